// Package worker is the engine behind pgmsg.Worker (River's jobexecutor
// and producer are the model): the fetch loop that keeps up to
// ClaimConcurrency claims in flight for the free handler slots, the
// handlers with their timeouts and cancellation, the decision of each
// outcome (complete, fail, snooze, discard, release), the batched
// completer and the lease heartbeat. Everything it needs of the database
// and tracing comes through Queue, which Jobs implements on the queue
// engine (internal/queue) and internal/telemetry (tests use their own);
// the root keeps the public API (WorkerOpts and its defaults, Worker,
// Client.Work and Client.NewWorker) and hands the notifications to Run.
package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Queue is what a Worker needs of the queue it works, bound to that queue
// and to the worker's claim options (lease, name, payload cap); Jobs
// implements it. Errors are the library's (internal/errs
// sentinels, mapped database errors).
type Queue interface {
	// Claim claims up to max jobs, and returns the trace contexts they
	// carry by job id (nil when tracing is off), recording the claim's
	// span.
	Claim(ctx context.Context, max int) ([]*pgmsgtype.Job, map[int64]propagation.MapCarrier, error)
	// CompleteMany archives jobs with their results in one statement,
	// with what their attempts logged (logs, by position; nil: none
	// logged), recording the settle span, and returns the ids of those no
	// longer held (left as they are).
	CompleteMany(ctx context.Context, jobs []*pgmsgtype.Job, logs []string) (notHeld []int64, err error)
	// Fail fails the attempt of job with jobErr, keeping log ("": none);
	// dead sends it to the dead-letter state at once.
	Fail(ctx context.Context, job *pgmsgtype.Job, jobErr error, dead bool, log string) error
	// Snooze puts job back to wait delay without counting the attempt,
	// keeping log ("": none).
	Snooze(ctx context.Context, job *pgmsgtype.Job, delay time.Duration, log string) error
	// Steps reads the step checkpoints of job; SaveStep records one under
	// the job's lease.
	Steps(ctx context.Context, job *pgmsgtype.Job) ([]pgmsgtype.JobStep, error)
	SaveStep(ctx context.Context, job *pgmsgtype.Job, name string, output []byte) error
	// ExtendLeases extends the leases of the jobs held under tokens (ids
	// and tokens pairwise) and returns the ids it extended.
	ExtendLeases(ctx context.Context, ids, tokens []int64) (kept []int64, err error)
	// Limited reports that the queue was last found to have a rate limit
	// or running cap: a finished job frees a slot for every worker, so the
	// worker claims again at once.
	Limited() bool
	// StartProcessSpan starts the span of handling job, a child of carrier
	// (from Claim) when it holds a valid trace context; the returned
	// context carries it, end records the handler's outcome.
	StartProcessSpan(ctx context.Context, job *pgmsgtype.Job, carrier propagation.MapCarrier) (_ context.Context, end func(error))
}

// Handler processes one job (pgmsg.JobHandler).
type Handler func(ctx context.Context, job *pgmsgtype.Job) error

// Config is a Worker's settings, all set (the root fills in defaults and
// checks them).
type Config struct {
	Queue            string // for log messages
	Concurrency      int
	JobTimeout       time.Duration
	ClaimBatch       int
	ClaimConcurrency int
	PollInterval     time.Duration
	CompleteLinger   time.Duration
	CompleteBatch    int
	ShutdownTimeout  time.Duration
	OnCompleted      func(jobs []*pgmsgtype.Job)
	Logger           *slog.Logger
	// MaxLogBytes bounds what an attempt's log keeps (Logger).
	MaxLogBytes int
}

// finished is a job whose handler returned nil, on its way to the
// completer, with what its attempt logged.
type finished struct {
	job *pgmsgtype.Job
	log string
}

// claimTimeout bounds one claim statement of a worker.
const claimTimeout = 30 * time.Second

// errShutdown is the cause of handler contexts cancelled at the end of
// the shutdown grace period.
var errShutdown = errors.New("pgmsg: worker shut down")

type snoozeError struct{ delay time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snooze %s", e.delay) }

// Snooze returns the error that makes a worker snooze the job for delay (0:
// release it at once) instead of failing it (pgmsg.JobSnooze).
func Snooze(delay time.Duration) error { return &snoozeError{delay: max(delay, 0)} }

type discardError struct{ err error }

func (e *discardError) Error() string { return e.err.Error() }
func (e *discardError) Unwrap() error { return e.err }

// Discard wraps err so that a worker sends the job to the dead-letter state
// at once (pgmsg.JobDiscard).
func Discard(err error) error {
	if err == nil {
		err = errors.New("discarded")
	}
	return &discardError{err: err}
}

// Worker runs a Handler over one queue with a pool of goroutines.
type Worker struct {
	q       Queue
	handler Handler
	cfg     Config

	mu       sync.Mutex
	inflight map[int64]*inflightJob
	reserved int // handler slots held for claims in flight
	// unfinished counts the jobs started whose outcome the completer has
	// not been handed yet; settled signals when it drops to zero.
	unfinished int
	settled    chan struct{}
	freed      chan struct{}
	// completed: a completion committed, which may have made the next job
	// of a sequence claimable; an idle fetch claims again (sequences wake
	// no one through NOTIFY).
	completed chan struct{}
	wg        sync.WaitGroup
}

type inflightJob struct {
	job    *pgmsgtype.Job
	cancel context.CancelCauseFunc
	// deadline is when JobTimeout ends the job (zero: none); its lease is
	// not extended past it. stopTimer stops the timeout's timer.
	deadline  time.Time
	stopTimer func() bool
	// run is what the handler's context carries for Logger and Step.
	run run
}

// New returns a Worker that runs handler over q's jobs.
func New(q Queue, handler Handler, cfg Config) *Worker {
	return &Worker{q: q, handler: handler, cfg: cfg,
		inflight: map[int64]*inflightJob{}, freed: make(chan struct{}, 1), completed: make(chan struct{}, 1), settled: make(chan struct{}, 1)}
}

// Run claims and handles jobs until ctx ends (call it once), then stops
// claiming, lets running handlers finish (up to ShutdownTimeout, after
// which their jobs are released), archives every completed job and returns
// ctx's error. Claim errors are logged and retried; Run returns early only
// with errs.UnknownQueue. lease is the jobs' lease (the heartbeat extends
// them every lease/3); wake fires when the queue may have new jobs (nil:
// poll only).
func (w *Worker) Run(ctx context.Context, lease time.Duration, wake <-chan struct{}) error {
	// Handlers run under their own context so that the worker's ctx ending
	// starts a graceful shutdown rather than aborting them.
	handlerCtx, cancelHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHandlers(nil)
	bg := context.WithoutCancel(ctx)

	completions := make(chan finished, w.cfg.CompleteBatch)
	completerDone := make(chan struct{})
	go func() {
		defer close(completerDone)
		w.completer(bg, completions)
	}()
	stopHeartbeat := make(chan struct{})
	heartbeatDone := make(chan struct{})
	go func() {
		defer close(heartbeatDone)
		w.heartbeat(bg, lease, stopHeartbeat)
	}()

	runErr := w.fetch(ctx, handlerCtx, wake, completions)

	// Shutdown: wait for handlers, then cancel the stragglers (they release
	// their jobs), then archive what completed and stop the heartbeat.
	handlersDone := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(handlersDone)
	}()
	grace := time.NewTimer(w.cfg.ShutdownTimeout)
	select {
	case <-handlersDone:
	case <-grace.C:
		cancelHandlers(errShutdown)
		<-handlersDone
	}
	grace.Stop()
	close(completions)
	<-completerDone
	close(stopHeartbeat)
	<-heartbeatDone
	if runErr != nil {
		return runErr
	}
	return ctx.Err()
}

func (w *Worker) free() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cfg.Concurrency - len(w.inflight) - w.reserved
}

func (w *Worker) reserve(n int) {
	w.mu.Lock()
	w.reserved += n
	w.mu.Unlock()
}

// claimResult is what one claim in flight brought back.
type claimResult struct {
	jobs []*pgmsgtype.Job
	// traces are the trace contexts the jobs carry (by job id), when
	// tracing is on.
	traces map[int64]propagation.MapCarrier
	err    error
	asked  int
}

// fetch claims jobs while there are free handler slots, with up to
// ClaimConcurrency claims in flight, and waits for a notification or the
// poll interval when the queue is drained.
func (w *Worker) fetch(ctx, handlerCtx context.Context, wake <-chan struct{}, completions chan<- finished) error {
	// Claim in batches: with only a few slots free, wait (briefly) for more
	// to free up rather than claiming a job or two per statement. Measured
	// in the benchmark work: at 16 workers claims averaged 8 jobs and
	// job_claim took 60% of sampled server time.
	threshold := max(1, min(w.cfg.ClaimBatch, w.cfg.Concurrency)/2)
	results := make(chan claimResult, w.cfg.ClaimConcurrency)
	inFlight := 0
	// idle: the last claim found fewer jobs than it asked for (or failed);
	// the next one waits for a notification or the poll interval.
	idle := false
	// freedInFlight: a limited queue's slot freed, or a completion
	// committed, while a claim was in flight; a short answer to that claim
	// does not make the worker idle.
	freedInFlight := false
	poll := time.NewTimer(time.Hour)
	poll.Stop()
	defer poll.Stop()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	lingering := false
	var fatal error

	send := func(n int) {
		w.reserve(n)
		inFlight++
		go func() {
			// The claim is not cancelled with ctx: a claim cancelled in
			// flight may still commit, and its jobs would sit unhandled
			// until their leases expired. Jobs claimed as ctx ends are
			// handled as in-flight.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
			defer cancel()
			jobs, traces, err := w.q.Claim(cctx, n)
			results <- claimResult{jobs: jobs, traces: traces, err: err, asked: n}
		}()
	}
	receive := func(r claimResult) {
		inFlight--
		// Start the jobs before giving the slots back, so that free()
		// never counts a slot twice.
		for _, j := range r.jobs {
			w.start(handlerCtx, j, r.traces[j.ID], completions)
		}
		w.reserve(-r.asked)
		switch {
		case r.err != nil && ctx.Err() == nil:
			if errors.Is(r.err, errs.UnknownQueue) {
				fatal = r.err
				return
			}
			w.cfg.Logger.Warn("pgmsg: worker claim failed; retrying", "queue", w.cfg.Queue, "error", r.err)
			idle = true
		case len(r.jobs) < r.asked:
			idle = !freedInFlight
		default:
			idle = false // a full claim: there is more
		}
		freedInFlight = false
		if idle {
			if !poll.Stop() {
				select {
				case <-poll.C:
				default:
				}
			}
			poll.Reset(w.cfg.PollInterval)
		}
	}

	stopLinger := func() {
		if lingering && !linger.Stop() {
			<-linger.C
		}
		lingering = false
	}
	lingerDone := false
	for ctx.Err() == nil && fatal == nil {
		free := w.free()
		if !idle && inFlight < w.cfg.ClaimConcurrency && free > 0 {
			// A claim goes out when at least threshold slots are free, or
			// with fewer once they have waited 2 ms with no claim in flight.
			if free >= threshold || lingerDone {
				stopLinger()
				lingerDone = false
				send(min(free, w.cfg.ClaimBatch))
				continue
			}
			if !lingering && inFlight == 0 {
				lingering = true
				linger.Reset(2 * time.Millisecond)
			}
		}
		var wakeC <-chan struct{}
		var pollC, lingerC <-chan time.Time
		if idle {
			wakeC, pollC = wake, poll.C
		}
		if lingering {
			lingerC = linger.C
		}
		select {
		case <-ctx.Done():
		case r := <-results:
			receive(r)
		case <-w.freed:
			if w.q.Limited() {
				// A job of a queue with a running cap (or rate limit)
				// finished (its handler returned, or its completion
				// committed, which frees its slot for every worker):
				// claim again now rather than at the poll interval, or
				// after the claim in flight, which may have missed it.
				if idle {
					idle = false
				} else if inFlight > 0 {
					freedInFlight = true
				}
			}
		case <-w.completed:
			// The completion may have moved a sequence on or released a
			// workflow's dependents: they are claimable now, and nothing
			// else wakes a worker for them. A claim in flight may have
			// read before the commit: its short answer does not make the
			// worker idle either (it would wait for the poll interval).
			if idle {
				idle = false
			} else if inFlight > 0 {
				freedInFlight = true
			}
		case <-wakeC:
			idle = false
		case <-pollC:
			idle = false
		case <-lingerC:
			lingering = false
			lingerDone = true
		}
	}
	stopLinger()
	for inFlight > 0 {
		receive(<-results)
	}
	return fatal
}

func (w *Worker) start(handlerCtx context.Context, job *pgmsgtype.Job, carrier propagation.MapCarrier, completions chan<- finished) {
	jctx, cancel := context.WithCancelCause(handlerCtx)
	f := &inflightJob{job: job, cancel: cancel, run: run{w: w, job: job}}
	timeout := w.cfg.JobTimeout
	if job.Timeout > 0 {
		timeout = job.Timeout
	}
	if timeout > 0 {
		f.deadline = time.Now().Add(timeout)
		t := time.AfterFunc(timeout, func() {
			cancel(errs.New(errs.JobTimeout, "job %d ran longer than its timeout of %s", job.ID, timeout))
		})
		f.stopTimer = t.Stop
	}
	w.mu.Lock()
	w.inflight[job.ID] = f
	w.unfinished++
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer w.settle()
		pctx, endSpan := w.q.StartProcessSpan(context.WithValue(jctx, runKey{}, &f.run), job, carrier)
		err := w.call(pctx, job)
		endSpan(err)
		if f.stopTimer != nil {
			f.stopTimer()
		}
		w.mu.Lock()
		delete(w.inflight, job.ID)
		w.mu.Unlock()
		cause := context.Cause(jctx)
		cancel(nil)
		select {
		case w.freed <- struct{}{}:
		default:
		}
		w.finish(context.WithoutCancel(handlerCtx), job, f.run.text(), err, cause, completions)
	}()
}

// settle counts one started job as handed on (to the completer, or failed,
// snoozed or released) and signals the completer when none is left.
func (w *Worker) settle() {
	w.mu.Lock()
	w.unfinished--
	none := w.unfinished == 0
	w.mu.Unlock()
	if none {
		select {
		case w.settled <- struct{}{}:
		default:
		}
	}
}

// allSettled reports that no started job is still running or on its way
// to the completer.
func (w *Worker) allSettled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unfinished == 0
}

func (w *Worker) call(ctx context.Context, job *pgmsgtype.Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return w.handler(ctx, job)
}

// finish applies a handler's outcome, with what the attempt logged (log).
// Completions are batched; the rare outcomes (fail, snooze, release) are
// one statement each.
func (w *Worker) finish(ctx context.Context, job *pgmsgtype.Job, log string, err error, cause error, completions chan<- finished) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var snooze *snoozeError
	var discard *discardError
	var opErr error
	switch {
	case err == nil:
		completions <- finished{job: job, log: log}
		return
	case errors.Is(cause, errs.JobNotHeld), errors.Is(err, errs.JobNotHeld):
		// lost to a rescue or cancel (found by the heartbeat, or by a
		// step's checkpoint): nothing of ours to write
		return
	case errors.Is(cause, errShutdown):
		opErr = w.q.Snooze(ctx, job, 0, log)
	case errors.Is(cause, errs.JobTimeout):
		opErr = w.q.Fail(ctx, job, fmt.Errorf("%w (the handler returned: %v)", cause, err), false, log)
	case errors.As(err, &snooze):
		opErr = w.q.Snooze(ctx, job, snooze.delay, log)
	case errors.As(err, &discard):
		opErr = w.q.Fail(ctx, job, discard.err, true, log)
	default:
		opErr = w.q.Fail(ctx, job, err, false, log)
	}
	if opErr != nil {
		w.cfg.Logger.Warn("pgmsg: worker could not record a job's outcome; it will be rescued when its lease expires",
			"queue", w.cfg.Queue, "job", job.ID, "error", opErr)
	}
}

// completer archives finished jobs in batches: it collects them for
// CompleteLinger (or until CompleteBatch, or until no started job is left
// running), then completes them in one statement. It returns when
// completions is closed and drained.
func (w *Worker) completer(ctx context.Context, completions <-chan finished) {
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	batch := make([]finished, 0, w.cfg.CompleteBatch)
	for {
		j, ok := <-completions
		if !ok {
			return
		}
		batch = append(batch[:0], j)
		linger.Reset(w.cfg.CompleteLinger)
		open := true
	collect:
		for len(batch) < w.cfg.CompleteBatch {
			if w.allSettled() {
				// Every started job has been handed on: take what waits
				// and go, rather than linger for jobs not yet claimed.
				select {
				case j, ok := <-completions:
					if !ok {
						open = false
						break collect
					}
					batch = append(batch, j)
					continue
				default:
					break collect
				}
			}
			select {
			case j, ok := <-completions:
				if !ok {
					open = false
					break collect
				}
				batch = append(batch, j)
			case <-w.settled:
			case <-linger.C:
				break collect
			}
		}
		if !linger.Stop() {
			select {
			case <-linger.C:
			default:
			}
		}
		w.flush(ctx, batch)
		if !open {
			return
		}
	}
}

// flush completes fin in one statement, retrying what may succeed on a
// second try; a result the server refuses is completed job by job, and the
// job whose result it refuses is sent to the dead-letter state.
func (w *Worker) flush(ctx context.Context, fin []finished) {
	slices.SortFunc(fin, func(a, b finished) int { return cmp.Compare(a.job.ID, b.job.ID) })
	batch := make([]*pgmsgtype.Job, len(fin))
	var logs []string // nil unless a job logged something
	for i, f := range fin {
		batch[i] = f.job
		if f.log != "" {
			if logs == nil {
				logs = make([]string, len(fin))
			}
			logs[i] = f.log
		}
	}
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		notHeld, err := w.q.CompleteMany(fctx, batch, logs)
		cancel()
		if errors.Is(err, errs.InvalidArgument) && len(batch) > 1 {
			// A result the server refused (larger than it looked to the
			// client: see internal/jobdoc): complete the others without it.
			for _, f := range fin {
				w.flush(ctx, []finished{f})
			}
			return
		}
		if errors.Is(err, errs.InvalidArgument) {
			// The job ran, but its result cannot be stored: say so on the
			// job, where it will be seen, rather than lose it quietly.
			j := batch[0]
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			ferr := w.q.Fail(fctx, j, fmt.Errorf("result not stored: %w", err), true, fin[0].log)
			cancel()
			w.cfg.Logger.Warn("pgmsg: a job's result was refused; the job is dead", "queue", w.cfg.Queue, "job", j.ID,
				"error", err, "fail_error", ferr)
			return
		}
		if err == nil {
			if len(notHeld) > 0 {
				w.cfg.Logger.Warn("pgmsg: jobs finished after losing their lease were not completed (another attempt runs or ran them)",
					"queue", w.cfg.Queue, "jobs", notHeld)
				batch = slices.DeleteFunc(batch, func(j *pgmsgtype.Job) bool { return slices.Contains(notHeld, j.ID) })
			}
			if w.cfg.OnCompleted != nil && len(batch) > 0 {
				w.cfg.OnCompleted(batch)
			}
			select {
			case w.freed <- struct{}{}: // running slots of a capped queue are free now (see fetch)
			default:
			}
			select {
			case w.completed <- struct{}{}:
			default:
			}
			return
		}
		if attempt >= 5 || !errs.IsRetryable(err) {
			ids := make([]int64, len(batch))
			for i, j := range batch {
				ids[i] = j.ID
			}
			w.cfg.Logger.Warn("pgmsg: could not complete jobs; they will be rescued when their leases expire",
				"queue", w.cfg.Queue, "jobs", ids, "error", err)
			return
		}
		time.Sleep(backoff)
		backoff *= 2
	}
}

// heartbeat extends the leases of running jobs every lease/3 in one
// statement, and cancels the handlers of jobs found lost.
func (w *Worker) heartbeat(ctx context.Context, lease time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(max(lease/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		ids := make([]int64, 0, len(w.inflight))
		tokens := make([]int64, 0, len(w.inflight))
		now := time.Now()
		for _, f := range w.inflight {
			if !f.deadline.IsZero() && now.After(f.deadline) {
				continue // timed out: its lease runs out, and it is rescued if it hangs
			}
			ids = append(ids, f.job.ID)
			tokens = append(tokens, f.job.LeaseToken)
		}
		w.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, max(lease/3, time.Second))
		kept, err := w.q.ExtendLeases(hctx, ids, tokens)
		cancel()
		if err != nil {
			w.cfg.Logger.Warn("pgmsg: worker could not extend job leases", "queue", w.cfg.Queue, "error", err)
			continue
		}
		held := make(map[int64]struct{}, len(kept))
		for _, id := range kept {
			held[id] = struct{}{}
		}
		w.mu.Lock()
		for i, id := range ids {
			f, ok := w.inflight[id]
			if !ok || f.job.LeaseToken != tokens[i] {
				continue
			}
			if _, ok := held[id]; !ok {
				f.cancel(errs.New(errs.JobNotHeld, "job %d lost its lease", id))
			}
		}
		w.mu.Unlock()
	}
}
