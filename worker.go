package pgmsg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/pgmsg/pgmsg/internal/worker"
)

// Defaults of WorkerOpts fields left zero.
const (
	WorkerConcurrencyDefault    = 10
	WorkerClaimBatchMax         = 250
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

// JobSnooze returns an error that makes the worker snooze the job for
// delay (0: release it at once) instead of failing it; the attempt does not
// count.
func JobSnooze(delay time.Duration) error { return worker.Snooze(delay) }

// JobDiscard wraps err so that the worker sends the job to the dead-letter
// state at once, without further retries: for errors no retry can fix.
func JobDiscard(err error) error { return worker.Discard(err) }

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
	// than it has free handler slots. Default min(Concurrency,
	// WorkerClaimBatchMax): 250, so that a worker with many fast handlers
	// pays a claim statement's fixed cost (about 0.2 ms of server CPU)
	// once per ~140 jobs rather than per ~85 (docs/benchmarks.md, the
	// queue throughput row).
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
	// MaxLogBytes bounds what one attempt's log keeps (Logger, JobLogs),
	// in bytes: the first record past it is cut and a last line says so.
	// Default WorkerLogBytesDefault (64 KiB); at most WorkerLogBytesMax
	// (1 MiB).
	MaxLogBytes int
}

// Worker runs a JobHandler over one queue with a pool of goroutines. Create
// it with NewWorker and start it with Run.
type Worker struct {
	client *Client
	queue  string
	lease  time.Duration // WorkerOpts.Lease
	engine *worker.Worker
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
		o.CompleteLinger < 0 || o.CompleteBatch < 0 || o.ShutdownTimeout < 0 || o.JobTimeout < 0 || o.MaxLogBytes < 0 {
		return nil, newError(ErrInvalidArgument, "worker options must not be negative")
	}
	if o.MaxLogBytes > WorkerLogBytesMax {
		return nil, newError(ErrInvalidArgument, "worker MaxLogBytes %d is more than %d", o.MaxLogBytes, WorkerLogBytesMax)
	}
	if o.MaxLogBytes == 0 {
		o.MaxLogBytes = WorkerLogBytesDefault
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
	q := &worker.Jobs{Queues: c.queues, Store: c.store, Pool: c.pool, Tracer: c.tracer,
		Queue: queue, Lease: o.Lease, Name: o.Name, MaxBytes: o.ClaimMaxBytes}
	engine := worker.New(q, worker.Handler(handler), worker.Config{
		Queue:            queue,
		Concurrency:      o.Concurrency,
		JobTimeout:       o.JobTimeout,
		ClaimBatch:       o.ClaimBatch,
		ClaimConcurrency: o.ClaimConcurrency,
		PollInterval:     o.PollInterval,
		CompleteLinger:   o.CompleteLinger,
		CompleteBatch:    o.CompleteBatch,
		ShutdownTimeout:  o.ShutdownTimeout,
		OnCompleted:      o.OnCompleted,
		Logger:           c.config.Logger,
		MaxLogBytes:      o.MaxLogBytes,
	})
	return &Worker{client: c, queue: queue, lease: o.Lease, engine: engine}, nil
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
	lease := w.lease
	if lease == 0 {
		lease = q.Lease
	}
	wake, unsubscribe := c.wakeups("queue:" + w.queue)
	defer unsubscribe()
	return w.engine.Run(ctx, lease, wake)
}
