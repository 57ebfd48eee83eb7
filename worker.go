package pgmsg

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// Defaults of WorkerOpts fields left zero.
const (
	WorkerConcurrencyDefault    = 10
	WorkerClaimBatchMax         = 100
	WorkerClaimConcurrency      = 2
	WorkerCompleteLingerDefault = 2 * time.Millisecond
	WorkerCompleteBatchDefault  = 500
	WorkerShutdownDefault       = 30 * time.Second
)

// JobHandler processes one job. Returning nil completes the job (archived);
// returning an error fails the attempt (retry with backoff, or dead-letter
// after the last attempt), except for the errors of JobSnooze and
// JobDiscard. A panic fails the attempt. The handler should return when ctx
// ends: ctx is cancelled when the worker shuts down past its grace period
// (the job is then released, not failed) and when the job is lost (its
// lease was rescued, or it was cancelled).
type JobHandler func(ctx context.Context, job *Job) error

type snoozeError struct{ delay time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snooze %s", e.delay) }

// JobSnooze returns an error that makes the worker snooze the job for
// delay (0: release it at once) instead of failing it; the attempt does not
// count.
func JobSnooze(delay time.Duration) error { return &snoozeError{delay: max(delay, 0)} }

type discardError struct{ err error }

func (e *discardError) Error() string { return e.err.Error() }
func (e *discardError) Unwrap() error { return e.err }

// JobDiscard wraps err so that the worker sends the job to the dead-letter
// state at once, without further retries: for errors no retry can fix.
func JobDiscard(err error) error {
	if err == nil {
		err = errors.New("discarded")
	}
	return &discardError{err: err}
}

// claimTimeout bounds one claim statement of a worker.
const claimTimeout = 30 * time.Second

// errWorkerShutdown is the cause of handler contexts cancelled at the end of
// the shutdown grace period.
var errWorkerShutdown = errors.New("pgmsg: worker shut down")

// WorkerOpts configure a Worker; nil means defaults.
type WorkerOpts struct {
	// Concurrency is how many handlers run at once. Default 10.
	Concurrency int
	// Lease overrides the queue's Lease for the worker's claims. The worker
	// extends the leases of running jobs every Lease/3, so handlers may run
	// longer than the lease. Default: the queue's.
	Lease time.Duration
	// JobTimeout bounds how long a handler may run: when it passes, the
	// handler's context is cancelled (context.Cause is ErrJobTimeout), the
	// worker stops extending the job's lease, and an error the handler
	// then returns fails the attempt as a timeout (retried with backoff,
	// like any failure). A handler that ignores its context keeps its slot
	// until it returns, but its job is rescued once the lease expires.
	// A job's own timeout (Job.Timeout: EnqueueParams.Timeout, else its
	// queue's QueueConfig.JobTimeout) takes precedence. Default 0: no
	// bound (the lease is extended for as long as it runs).
	JobTimeout time.Duration
	// ClaimBatch caps the jobs of one claim; the worker never claims more
	// than it has free handler slots. Default min(Concurrency, 100).
	ClaimBatch int
	// ClaimConcurrency is how many claims may be in flight at once. Each
	// takes at most ClaimBatch jobs and never more than the handler slots
	// free when it is sent (slots are reserved for it), so handlers never
	// exceed Concurrency and no claimed job waits for a slot. With fast
	// handlers a second claim runs on a second connection while the first
	// one's jobs are handled, using a second server core. Default
	// WorkerClaimConcurrency (2); 1 claims strictly one after another.
	ClaimConcurrency int
	// ClaimMaxBytes caps the payload bytes of one claim
	// (ClaimJobsOpts.MaxBytes): a claim stops before the job that would go
	// beyond it, but always takes at least one. It bounds the payloads a
	// worker holds at once to about ClaimMaxBytes plus one job per busy
	// handler. Default 0: no cap.
	ClaimMaxBytes int64
	// PollInterval is how often an idle worker polls when no notification
	// wakes it. Default Config.PollInterval.
	PollInterval time.Duration
	// CompleteLinger is how long finished jobs are collected before being
	// archived in one statement, at most: the statement goes out at once
	// when no other started job is still running (nothing more is about to
	// finish), so a worker that is not saturated does not wait. Under load
	// completions also batch up while the previous statement runs.
	// Default 2ms.
	CompleteLinger time.Duration
	// CompleteBatch caps the jobs of one completion statement. Default 500.
	CompleteBatch int
	// ShutdownTimeout is how long running handlers may go on after the
	// worker's context ends; then their contexts are cancelled and the jobs
	// still running are released (claimable at once, attempt not counted).
	// Default 30s.
	ShutdownTimeout time.Duration
	// Name identifies the worker on its claims (Job.Worker). Default
	// host-pid-random.
	Name string
	// OnCompleted, if set, is called with the jobs of each completion
	// statement once it has committed (the jobs are archived), from the
	// worker's completer goroutine: keep it short. Jobs that had lost
	// their lease are not in it. For metrics and end-to-end latency.
	OnCompleted func(jobs []*Job)
}

// Worker runs a JobHandler over one queue with a pool of goroutines. Create
// it with NewWorker and start it with Run.
type Worker struct {
	client  *Client
	queue   string
	handler JobHandler
	opts    WorkerOpts

	mu       sync.Mutex
	inflight map[int64]*inflightJob
	reserved int // handler slots held for claims in flight
	// unfinished counts the jobs started whose outcome the completer has
	// not been handed yet; settled signals when it drops to zero.
	unfinished int
	settled    chan struct{}
	freed      chan struct{}
	wg         sync.WaitGroup
}

type inflightJob struct {
	job    *Job
	cancel context.CancelCauseFunc
	// deadline is when JobTimeout ends the job (zero: none); its lease is
	// not extended past it. stopTimer stops the timeout's timer.
	deadline  time.Time
	stopTimer func() bool
}

// Work runs handler over queue's jobs with concurrency handlers at once
// until ctx ends, then shuts down gracefully (see WorkerOpts) and returns
// ctx's error. The queue is created with default settings if it does not
// exist. It is NewWorker(queue, handler, &WorkerOpts{Concurrency:
// concurrency}).Run(ctx).
func (c *Client) Work(ctx context.Context, queue string, handler JobHandler, concurrency int) error {
	w, err := c.NewWorker(queue, handler, &WorkerOpts{Concurrency: concurrency})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// NewWorker returns a Worker for queue. It fails with ErrInvalidName or
// ErrInvalidArgument.
func (c *Client) NewWorker(queue string, handler JobHandler, opts *WorkerOpts) (*Worker, error) {
	// Checked here although the SQL API checks it again: a constructor
	// makes no round trip, and a bad name fails it at once.
	if err := ValidateName("queue", queue); err != nil {
		return nil, err
	}
	if handler == nil {
		return nil, newError(ErrInvalidArgument, "worker handler is nil")
	}
	o := WorkerOpts{}
	if opts != nil {
		o = *opts
	}
	if o.Concurrency < 0 || o.Lease < 0 || o.ClaimBatch < 0 || o.ClaimConcurrency < 0 || o.ClaimMaxBytes < 0 || o.PollInterval < 0 ||
		o.CompleteLinger < 0 || o.CompleteBatch < 0 || o.ShutdownTimeout < 0 || o.JobTimeout < 0 {
		return nil, newError(ErrInvalidArgument, "worker options must not be negative")
	}
	if o.Concurrency == 0 {
		o.Concurrency = WorkerConcurrencyDefault
	}
	if o.ClaimBatch == 0 {
		o.ClaimBatch = min(o.Concurrency, WorkerClaimBatchMax)
	}
	if o.ClaimConcurrency == 0 {
		o.ClaimConcurrency = WorkerClaimConcurrency
	}
	if o.PollInterval == 0 {
		o.PollInterval = c.config.PollInterval
	}
	if o.CompleteLinger == 0 {
		o.CompleteLinger = WorkerCompleteLingerDefault
	}
	if o.CompleteBatch == 0 {
		o.CompleteBatch = WorkerCompleteBatchDefault
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = WorkerShutdownDefault
	}
	if o.Name == "" {
		host, _ := os.Hostname()
		var rnd [3]byte
		_, _ = rand.Read(rnd[:])
		o.Name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(rnd[:]))
	}
	return &Worker{client: c, queue: queue, handler: handler, opts: o,
		inflight: map[int64]*inflightJob{}, freed: make(chan struct{}, 1), settled: make(chan struct{}, 1)}, nil
}

// Run claims and handles jobs until ctx ends (call it once per Worker), then stops claiming, lets
// running handlers finish (up to ShutdownTimeout, after which their jobs are
// released), archives every completed job and returns ctx's error. Database
// errors while claiming are logged and retried; Run returns early only if
// the queue is deleted (ErrUnknownQueue).
func (w *Worker) Run(ctx context.Context) error {
	c := w.client
	q, err := c.EnsureQueue(ctx, w.queue, QueueConfig{})
	if err != nil {
		return err
	}
	lease := w.opts.Lease
	if lease == 0 {
		lease = q.Lease
	}
	wake, unsubscribe := c.wakeups("queue:" + w.queue)
	defer unsubscribe()

	// Handlers run under their own context so that the worker's ctx ending
	// starts a graceful shutdown rather than aborting them.
	handlerCtx, cancelHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHandlers(nil)
	bg := context.WithoutCancel(ctx)

	completions := make(chan *Job, w.opts.CompleteBatch)
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
	grace := time.NewTimer(w.opts.ShutdownTimeout)
	select {
	case <-handlersDone:
	case <-grace.C:
		cancelHandlers(errWorkerShutdown)
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
	return w.opts.Concurrency - len(w.inflight) - w.reserved
}

func (w *Worker) reserve(n int) {
	w.mu.Lock()
	w.reserved += n
	w.mu.Unlock()
}

// claimResult is what one claim in flight brought back.
type claimResult struct {
	jobs  []*Job
	err   error
	asked int
}

// fetch claims jobs while there are free handler slots, with up to
// ClaimConcurrency claims in flight, and waits for a notification or the
// poll interval when the queue is drained.
func (w *Worker) fetch(ctx, handlerCtx context.Context, wake <-chan struct{}, completions chan<- *Job) error {
	c := w.client
	// Claim in batches: with only a few slots free, wait (briefly) for more
	// to free up rather than claiming a job or two per statement. Measured
	// in the benchmark work: at 16 workers claims averaged 8 jobs and
	// job_claim took 60% of sampled server time.
	threshold := max(1, min(w.opts.ClaimBatch, w.opts.Concurrency)/2)
	results := make(chan claimResult, w.opts.ClaimConcurrency)
	inFlight := 0
	// idle: the last claim found fewer jobs than it asked for (or failed);
	// the next one waits for a notification or the poll interval.
	idle := false
	// freedInFlight: a limited queue's slot freed while a claim was in
	// flight; a short answer to that claim does not make the worker idle.
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
			start := time.Now()
			jobs, err := c.ClaimJobs(cctx, w.queue, &ClaimJobsOpts{Max: n, Lease: w.opts.Lease, Worker: w.opts.Name,
				MaxBytes: w.opts.ClaimMaxBytes})
			c.loadJobTraces(cctx, jobs)
			c.traceJobClaim(cctx, start, w.queue, jobs, err)
			results <- claimResult{jobs: jobs, err: err, asked: n}
		}()
	}
	receive := func(r claimResult) {
		inFlight--
		// Start the jobs before giving the slots back, so that free()
		// never counts a slot twice.
		for _, j := range r.jobs {
			w.start(handlerCtx, j, completions)
		}
		w.reserve(-r.asked)
		switch {
		case r.err != nil && ctx.Err() == nil:
			if errors.Is(r.err, ErrUnknownQueue) {
				fatal = r.err
				return
			}
			c.config.Logger.Warn("pgmsg: worker claim failed; retrying", "queue", w.queue, "error", r.err)
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
			poll.Reset(w.opts.PollInterval)
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
		if !idle && inFlight < w.opts.ClaimConcurrency && free > 0 {
			// A claim goes out when at least threshold slots are free, or
			// with fewer once they have waited 2 ms with no claim in flight.
			if free >= threshold || lingerDone {
				stopLinger()
				lingerDone = false
				send(min(free, w.opts.ClaimBatch))
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
			if c.queueLimited(w.queue) {
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

func (w *Worker) start(handlerCtx context.Context, job *Job, completions chan<- *Job) {
	c := w.client
	jctx, cancel := context.WithCancelCause(handlerCtx)
	f := &inflightJob{job: job, cancel: cancel}
	timeout := w.opts.JobTimeout
	if job.Timeout > 0 {
		timeout = job.Timeout
	}
	if timeout > 0 {
		f.deadline = time.Now().Add(timeout)
		t := time.AfterFunc(timeout, func() {
			cancel(newError(ErrJobTimeout, "job %d ran longer than its timeout of %s", job.ID, timeout))
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
		pctx, endSpan := c.startJobProcessSpan(jctx, job)
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
		w.finish(context.WithoutCancel(handlerCtx), job, err, cause, completions)
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

func (w *Worker) call(ctx context.Context, job *Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return w.handler(ctx, job)
}

// finish applies a handler's outcome. Completions are batched; the rare
// outcomes (fail, snooze, release) are one statement each.
func (w *Worker) finish(ctx context.Context, job *Job, err error, cause error, completions chan<- *Job) {
	c := w.client
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var snooze *snoozeError
	var discard *discardError
	var opErr error
	switch {
	case err == nil:
		completions <- job
		return
	case errors.Is(cause, ErrJobNotHeld):
		return // lost to a rescue or cancel: nothing of ours to write
	case errors.Is(cause, errWorkerShutdown):
		_, opErr = c.Snooze(ctx, job, 0)
	case errors.Is(cause, ErrJobTimeout):
		_, opErr = c.Fail(ctx, job, fmt.Errorf("%w (the handler returned: %v)", cause, err), nil)
	case errors.As(err, &snooze):
		_, opErr = c.Snooze(ctx, job, snooze.delay)
	case errors.As(err, &discard):
		_, opErr = c.Fail(ctx, job, discard.err, &FailOpts{Dead: true})
	default:
		_, opErr = c.Fail(ctx, job, err, nil)
	}
	if opErr != nil {
		c.config.Logger.Warn("pgmsg: worker could not record a job's outcome; it will be rescued when its lease expires",
			"queue", w.queue, "job", job.ID, "error", opErr)
	}
}

// completer archives finished jobs in batches: it collects them for
// CompleteLinger (or until CompleteBatch, or until no started job is left
// running), then completes them in one statement. It returns when
// completions is closed and drained.
func (w *Worker) completer(ctx context.Context, completions <-chan *Job) {
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	batch := make([]*Job, 0, w.opts.CompleteBatch)
	for {
		j, ok := <-completions
		if !ok {
			return
		}
		batch = append(batch[:0], j)
		linger.Reset(w.opts.CompleteLinger)
		open := true
	collect:
		for len(batch) < w.opts.CompleteBatch {
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

func (w *Worker) flush(ctx context.Context, batch []*Job) {
	c := w.client
	slices.SortFunc(batch, func(a, b *Job) int { return cmp.Compare(a.ID, b.ID) })
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		endSpan := c.startJobSettleSpan(fctx, w.queue, len(batch))
		res, err := c.completeMany(fctx, c.pool, batch)
		endSpan(err)
		cancel()
		if errors.Is(err, ErrInvalidArgument) && len(batch) > 1 {
			// A result the server refused (larger than it looked to the
			// client: see jobDocument): complete the others without it.
			for _, j := range batch {
				w.flush(ctx, []*Job{j})
			}
			return
		}
		if errors.Is(err, ErrInvalidArgument) {
			// The job ran, but its result cannot be stored: say so on the
			// job, where it will be seen, rather than lose it quietly.
			j := batch[0]
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, ferr := c.Fail(fctx, j, fmt.Errorf("result not stored: %w", err), &FailOpts{Dead: true})
			cancel()
			c.config.Logger.Warn("pgmsg: a job's result was refused; the job is dead", "queue", w.queue, "job", j.ID,
				"error", err, "fail_error", ferr)
			return
		}
		if err == nil {
			if len(res.NotHeld) > 0 {
				c.config.Logger.Warn("pgmsg: jobs finished after losing their lease were not completed (another attempt runs or ran them)",
					"queue", w.queue, "jobs", res.NotHeld)
				batch = slices.DeleteFunc(batch, func(j *Job) bool { return slices.Contains(res.NotHeld, j.ID) })
			}
			if w.opts.OnCompleted != nil && len(batch) > 0 {
				w.opts.OnCompleted(batch)
			}
			select {
			case w.freed <- struct{}{}: // running slots of a capped queue are free now (see fetch)
			default:
			}
			return
		}
		if attempt >= 5 || !IsRetryable(err) {
			ids := make([]int64, len(batch))
			for i, j := range batch {
				ids[i] = j.ID
			}
			c.config.Logger.Warn("pgmsg: could not complete jobs; they will be rescued when their leases expire",
				"queue", w.queue, "jobs", ids, "error", err)
			return
		}
		time.Sleep(backoff)
		backoff *= 2
	}
}

// heartbeat extends the leases of running jobs every lease/3 in one
// statement, and cancels the handlers of jobs found lost.
func (w *Worker) heartbeat(ctx context.Context, lease time.Duration, stop <-chan struct{}) {
	c := w.client
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
		rows, err := c.store.JobExtendMany(hctx, c.pool, ids, tokens, w.opts.Lease)
		cancel()
		if err != nil {
			c.config.Logger.Warn("pgmsg: worker could not extend job leases", "queue", w.queue, "error", err)
			continue
		}
		kept := make(map[int64]time.Time, len(rows))
		for _, r := range rows {
			kept[r.ID] = r.ExpiresAt
		}
		w.mu.Lock()
		for i, id := range ids {
			f, ok := w.inflight[id]
			if !ok || f.job.LeaseToken != tokens[i] {
				continue
			}
			if _, ok := kept[id]; !ok {
				f.cancel(newError(ErrJobNotHeld, "job %d lost its lease", id))
			}
		}
		w.mu.Unlock()
	}
}
