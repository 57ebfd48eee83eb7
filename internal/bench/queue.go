package bench

import (
	"context"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueOptions are the settings of a queue run.
type QueueOptions struct {
	// Duration of the measured window; the run ends earlier when the
	// prefilled jobs are done and Rate is 0. Default 10s.
	Duration time.Duration
	// Warmup runs the workers before measuring. Default 1s.
	Warmup time.Duration
	// Payload bytes per job (at least 8). Default 1024.
	Payload int
	// Workers working jobs concurrently. Default 16.
	Workers int
	// Jobs enqueued before the run starts (not timed). Default 100000.
	Jobs int
	// Rate of jobs enqueued during the run, per second (0: none).
	Rate float64
	// SequenceKeys the jobs of ImplPgmsgSeq are spread over, round-robin.
	// Default 1000.
	SequenceKeys int
	// LimitKeys the jobs of ImplPgmsgKeyLimit are spread over,
	// round-robin, and KeyLimit its queue's per-key limit. Defaults 100
	// and 1.
	LimitKeys int
	KeyLimit  int
	// WorkflowLevels is the depth of ImplPgmsgWorkflow's workflows (below
	// their root). Default 10.
	WorkflowLevels int
	// Tenants is how many small tenants ImplPgmsgFair's paced jobs are
	// spread over, round-robin. Default 10.
	Tenants int
	// Processes runs the pgmsg queue's Workers as this many clients, each
	// with its own pool, as separate worker processes would (the Workers
	// shared among them). Default 1.
	Processes int
	// JobTime is how long the pgmsg queue's handler takes per job (a
	// sleep: the work of a handler that waits on something else), so that
	// Workers/JobTime paces the queue below what it could do. Default 0:
	// the handler returns at once.
	JobTime time.Duration
	// CompleteBatch is the pgmsg queue workers' WorkerOpts.CompleteBatch
	// (0: the default).
	CompleteBatch int
}

func (o *QueueOptions) defaults() {
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup < 0 {
		o.Warmup = 0
	}
	if o.Payload <= 0 {
		o.Payload = 1024
	}
	o.Payload = max(o.Payload, 8)
	if o.Workers <= 0 {
		o.Workers = 16
	}
	if o.Jobs < 0 {
		o.Jobs = 0
	}
	if o.SequenceKeys <= 0 {
		o.SequenceKeys = 1000
	}
	if o.LimitKeys <= 0 {
		o.LimitKeys = 100
	}
	if o.KeyLimit <= 0 {
		o.KeyLimit = 1
	}
	if o.Processes <= 0 {
		o.Processes = 1
	}
	if o.Tenants <= 0 {
		o.Tenants = 10
	}
	if o.WorkflowLevels <= 0 {
		o.WorkflowLevels = 10
	}
}

// QueueResult is the summary of one queue run. e2e is the time from a
// job's enqueue (or from the start of the run, for prefilled jobs) until
// its completion is committed.
type QueueResult struct {
	Mode       string  `json:"mode"`
	Impl       string  `json:"impl"`
	DurationS  float64 `json:"duration_s"`
	Payload    int     `json:"payload"`
	Workers    int     `json:"workers"`
	Jobs       int     `json:"jobs"`
	Rate       float64 `json:"rate"`
	JobsDone   int64   `json:"jobs_done"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	E2EP50MS   float64 `json:"e2e_p50_ms"`
	E2EP99MS   float64 `json:"e2e_p99_ms"`
	Remaining  int64   `json:"remaining"`
	// ProcessCPUPerJobUS and PGCPUPerJobUS are the CPU time of this
	// process and of the PostgreSQL processes serving the database over
	// the measured window, per job done (0: not measured).
	ProcessCPUPerJobUS float64 `json:"process_cpu_per_job_us,omitempty"`
	PGCPUPerJobUS      float64 `json:"pg_cpu_per_job_us,omitempty"`
	// Checked is what the implementation verified of the run, if anything
	// (QueueChecker).
	Checked    string `json:"checked,omitempty"`
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
}

// QueueDriver is one queue implementation under test. It is exported so
// that bench/peers (its own module, so that River never enters pgmsg's
// go.mod) can add River to the same runner.
type QueueDriver interface {
	// Setup creates what the run needs (a queue, a scratch schema).
	Setup(ctx context.Context) error
	// Prefill enqueues vals before the run (untimed).
	Prefill(ctx context.Context, vals [][]byte) error
	// Enqueue adds vals during the run.
	Enqueue(ctx context.Context, vals [][]byte) error
	// Work runs workers until ctx ends, calling done with the payloads of
	// jobs whose completion is committed (only the first 8 bytes, the
	// enqueue time, are read).
	Work(ctx context.Context, workers int, done func(payloads [][]byte)) error
	// Remaining counts jobs not completed.
	Remaining(ctx context.Context) (int64, error)
	// Teardown drops what Setup created.
	Teardown(ctx context.Context) error
}

// QueueChecker is a QueueDriver that verifies an invariant of its run:
// Check, called after it, says what held, or fails the run.
type QueueChecker interface {
	Check() (string, error)
}

// NewQueueDriverFunc makes a QueueDriver for one run.
type NewQueueDriverFunc func(env *Env, o QueueOptions) QueueDriver

// queueDrivers holds the queue implementations by name.
var queueDrivers = map[string]NewQueueDriverFunc{
	ImplSeed: func(env *Env, o QueueOptions) QueueDriver { return &seedQueue{env: env, o: o} },
}

// RegisterQueue adds a queue implementation under name (call from init).
func RegisterQueue(name string, f NewQueueDriverFunc) { queueDrivers[name] = f }

// QueueOptionsDefaults fills in the defaults of o.
func QueueOptionsDefaults(o *QueueOptions) { o.defaults() }

// RunQueue runs one queue benchmark of impl.
func RunQueue(ctx context.Context, env *Env, impl string, o QueueOptions) (*QueueResult, error) {
	o.defaults()
	mk, ok := queueDrivers[impl]
	if !ok {
		return nil, fmt.Errorf("bench: unknown queue implementation %q (this binary has %s)", impl, strings.Join(slices.Sorted(maps.Keys(queueDrivers)), ", "))
	}
	d := mk(env, o)
	if err := d.Setup(ctx); err != nil {
		_ = d.Teardown(context.WithoutCancel(ctx))
		return nil, err
	}
	defer func() { _ = d.Teardown(context.WithoutCancel(ctx)) }()

	// Prefill in chunks, stamped with one time: they were all enqueued
	// before the run.
	if o.Jobs > 0 {
		if env.Progress != nil {
			fmt.Fprintf(env.Progress, "%-12s prefilling %d jobs ...\n", impl, o.Jobs)
		}
		chunk := payloads(min(o.Jobs, 10000), o.Payload)
		now := time.Now()
		for _, v := range chunk {
			stamp(v, now)
		}
		for left := o.Jobs; left > 0; left -= len(chunk) {
			if err := d.Prefill(ctx, chunk[:min(left, len(chunk))]); err != nil {
				return nil, fmt.Errorf("bench: prefill: %w", err)
			}
		}
		// The prefill's garbage (its encoded batches) is collected and its
		// memory returned to the system now, not by the runtime's
		// background scavenger during the measured window: there its
		// madvise calls were 5.7 % of this process's CPU samples (perf,
		// 128 workers), counted against the jobs of whichever
		// implementation ran.
		debug.FreeOSMemory()
	}

	// The connection that reads the PostgreSQL processes' ids, opened
	// before the window starts (best effort: no figure without it).
	cpuConn, err := pgx.Connect(ctx, env.URL)
	if err != nil {
		cpuConn = nil
	} else {
		defer func() { _ = cpuConn.Close(context.WithoutCancel(ctx)) }()
	}
	win := newWindow(o.Warmup, o.Duration)
	st := newStats(win)
	runCtx, cancel := context.WithDeadline(ctx, win.end)
	defer cancel()
	// CPU time over the measured window (as pubsub's): this process (the
	// driver's workers, River's included) and the PostgreSQL processes
	// serving the database, per job done in the window.
	var cpuA, cpuB cpuSample
	cpuOK := false
	cpuDone := make(chan struct{})
	go func() {
		defer close(cpuDone)
		select {
		case <-runCtx.Done():
			return
		case <-time.After(time.Until(win.measured)):
		}
		cpuA = takeCPUSample(ctx, cpuConn)
		<-runCtx.Done()
		cpuB = takeCPUSample(context.WithoutCancel(ctx), cpuConn)
		cpuOK = true
	}()
	var finished time.Time
	var finishOnce sync.Once
	done := func(vals [][]byte) {
		now := time.Now()
		e2e := make([]time.Duration, len(vals))
		for i, v := range vals {
			from := sentAt(v)
			if from.Before(win.start) {
				from = win.start
			}
			e2e[i] = now.Sub(from)
		}
		st.read(len(vals), e2e)
		if o.Rate == 0 && st.readsAll.Load() >= int64(o.Jobs) {
			finishOnce.Do(func() { finished = now; cancel() })
		}
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.Work(runCtx, o.Workers, done); err != nil && runCtx.Err() == nil {
			st.fail(err)
			cancel()
		}
	}()
	if o.Rate > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Enqueue every 10ms (or per job below 100 jobs/s).
			per := max(1, int(o.Rate/100))
			vals := payloads(per, o.Payload)
			p := newPacer(o.Rate/float64(per), 0)
			for {
				// Latencies count from when the enqueue was due
				// (pacer.wait).
				t0, err := p.wait(runCtx)
				if err != nil {
					return
				}
				for _, v := range vals {
					stamp(v, t0)
				}
				if err := d.Enqueue(runCtx, vals); err != nil {
					if runCtx.Err() != nil {
						return
					}
					st.fail(err)
					continue
				}
				st.wrote(len(vals), time.Since(t0))
			}
		}()
	}
	progCtx, stopProg := context.WithCancel(runCtx)
	progDone := make(chan struct{})
	go func() {
		defer close(progDone)
		st.runProgress(progCtx, env, impl, func(el time.Duration, dw, dr int64, iv time.Duration, _, e2e *hist) string {
			left := int64(o.Jobs) + st.writesAll.Load() - st.readsAll.Load()
			s := fmt.Sprintf("%4s  jobs %7s/s  queued %7d  e2e p50 %7.1fms p99 %7.1fms", el, human(perSec(dr, iv)), max(left, 0), e2e.quantileMS(0.5), e2e.quantileMS(0.99))
			if n := st.errors.Load(); n > 0 {
				s += fmt.Sprintf("  errors %d", n)
			}
			return s
		})
	}()
	wg.Wait()
	stopProg()
	<-progDone
	endProgress(env)
	end := time.Now()
	if !finished.IsZero() {
		end = finished
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if o.Rate == 0 && !finished.IsZero() && !win.counts(finished) {
		// Every prefilled job was done before the measured window opened:
		// a figure of 0 jobs/s would be a lie about the queue.
		return nil, fmt.Errorf("bench: all %d prefilled jobs were done within the %s warm-up, so nothing was measured: raise --jobs or lower --warmup", o.Jobs, o.Warmup)
	}
	left, err := d.Remaining(context.WithoutCancel(ctx))
	if err != nil {
		st.fail(fmt.Errorf("remaining: %w", err))
	}
	var checked string
	if c, ok := d.(QueueChecker); ok {
		if checked, err = c.Check(); err != nil {
			st.fail(err)
		}
	}
	el := win.elapsed(end)
	r := &QueueResult{
		Mode: "queue", Impl: impl, DurationS: round(el.Seconds(), 2), Payload: o.Payload, Workers: o.Workers,
		Jobs: o.Jobs, Rate: o.Rate, JobsDone: st.reads.n.Load(),
		E2EP50MS: round(st.e2eTotal.quantileMS(0.5), 2), E2EP99MS: round(st.e2eTotal.quantileMS(0.99), 2),
		Remaining: left, Checked: checked, Errors: st.errors.Load(), FirstError: st.firstError(),
	}
	r.JobsPerSec = rate(r.JobsDone, el)
	<-cpuDone
	if n := r.JobsDone; n > 0 && cpuOK {
		r.ProcessCPUPerJobUS = round((cpuB.self-cpuA.self)/float64(n)*1e6, 2)
		if pg, ok := pgDelta(cpuA, cpuB); ok {
			r.PGCPUPerJobUS = round(pg/float64(n)*1e6, 2)
		}
	}
	return r, nil
}
