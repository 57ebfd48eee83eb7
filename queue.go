package pgmsg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/queue"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/internal/telemetry"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Defaults of queue settings (QueueConfig fields left zero), as the SQL API
// applies them, and the bounds and sentinels of the queue API, whose one
// Go home is internal/queue (re-exported here).
const (
	QueueMaxAttemptsDefault      = 25
	QueueLeaseDefault            = 30 * time.Second
	QueueRetryBackoffDefault     = time.Second
	QueueRetryBackoffMaxDefault  = time.Hour
	QueueArchiveRetentionDefault = 7 * 24 * time.Hour
	QueueMaxPayloadBytesDefault  = 1 << 20
	// JobPriorityMin and JobPriorityMax bound EnqueueParams.Priority.
	JobPriorityMin = queue.PriorityMin
	JobPriorityMax = queue.PriorityMax
	// ArchivePruneBatchDefault is how many archived jobs one pruning
	// statement deletes at most.
	ArchivePruneBatchDefault = queue.PruneBatchDefault
	// QueueBackpressureTimeoutDefault is how long Enqueue waits for room in
	// a full queue (QueueConfig.BackpressureTimeout left zero), as topics'
	// BackpressureTimeoutDefault.
	QueueBackpressureTimeoutDefault = BackpressureTimeoutDefault
	// QueueMaxDepthNone in QueueConfig.MaxDepth removes a queue's depth
	// limit on UpdateQueue (0 leaves it unchanged).
	QueueMaxDepthNone = queue.MaxDepthNone
	// QueueJobTimeoutNone in QueueConfig.JobTimeout removes a queue's job
	// timeout on UpdateQueue (0 leaves it unchanged).
	QueueJobTimeoutNone = queue.JobTimeoutNone
	// QueueDeadRetentionNone in QueueConfig.DeadRetention makes a queue
	// keep its dead jobs again on UpdateQueue (0 leaves it unchanged).
	QueueDeadRetentionNone = queue.DeadRetentionNone
	// QueueBackpressureNoWait in QueueConfig.BackpressureTimeout makes a
	// full queue refuse enqueues at once (0 means the default). A Queue read
	// back reports it for a zero timeout.
	QueueBackpressureNoWait = queue.BackpressureNoWait
	// QueueRateLimitNone in QueueConfig.RateLimit removes a queue's rate
	// limit on UpdateQueue (0 leaves it unchanged).
	QueueRateLimitNone = queue.RateLimitNone
	// QueueMaxRunningNone in QueueConfig.MaxRunning removes a queue's cap
	// on running jobs on UpdateQueue (0 leaves it unchanged).
	QueueMaxRunningNone = queue.MaxRunningNone
	// QueueKeyLimitNone in QueueConfig.KeyLimit removes a queue's per-key
	// limit, and its KeyField, on UpdateQueue (0 leaves them unchanged):
	// the jobs waiting for a place run.
	QueueKeyLimitNone = queue.KeyLimitNone
	// QueueKeyFieldNone in QueueConfig.KeyField removes a queue's key
	// field on UpdateQueue ("" leaves it unchanged): jobs then give their
	// limit key (EnqueueParams.LimitKey) or have none.
	QueueKeyFieldNone = queue.KeyFieldNone
	// QueueRateLimitMax is the largest RateLimit, in jobs per second.
	QueueRateLimitMax = queue.RateLimitMax
)

// QueueConfig is a queue's settings (pgmsgtype.QueueConfig). Zero fields
// take their defaults (on CreateQueue) or stay unchanged (on UpdateQueue).
type QueueConfig = pgmsgtype.QueueConfig

// Queue is a queue and its settings, every field filled in (pgmsgtype.Queue).
type Queue = pgmsgtype.Queue

// QueueStats counts a queue's jobs by state. Computing them reads the
// partial index of each state, so the cost follows the size of the states,
// not of the table; calling it every few seconds is fine.
type QueueStats = pgmsgtype.QueueStats

// CreateQueue creates a queue with cfg's settings (zero fields: defaults).
// It fails with ErrQueueExists, ErrInvalidName, ErrInvalidMaxAttempts or
// ErrInvalidArgument. Queues are also created on demand, with default
// settings, by the first Enqueue to them and by Work.
func (c *Client) CreateQueue(ctx context.Context, name string, cfg QueueConfig) (*Queue, error) {
	return c.CreateQueueTx(ctx, c.pool, name, cfg)
}

// CreateQueueTx is CreateQueue on exec.
func (c *Client) CreateQueueTx(ctx context.Context, exec DBTX, name string, cfg QueueConfig) (*Queue, error) {
	return c.queues.Create(ctx, exec, name, cfg, false)
}

// EnsureQueue returns the queue, creating it with cfg's settings if it does
// not exist. An existing queue's settings are left as they are.
func (c *Client) EnsureQueue(ctx context.Context, name string, cfg QueueConfig) (*Queue, error) {
	return c.queues.Create(ctx, c.pool, name, cfg, true)
}

// UpdateQueue changes the non-zero settings of cfg. Jobs already enqueued
// keep their max attempts; the other settings apply at once (a MaxDepth
// below the current depth removes no job: enqueues fail until the queue
// drains). It fails with ErrUnknownQueue.
func (c *Client) UpdateQueue(ctx context.Context, name string, cfg QueueConfig) (*Queue, error) {
	return c.queues.Update(ctx, name, cfg)
}

// ListQueues returns every queue, by name.
func (c *Client) ListQueues(ctx context.Context) ([]*Queue, error) {
	return c.queues.List(ctx)
}

// DeleteQueue removes a queue with its archive. A queue with live jobs
// (waiting, running or dead) fails with ErrQueueNotEmpty unless force, which
// deletes them too.
func (c *Client) DeleteQueue(ctx context.Context, name string, force bool) error {
	return c.queues.Delete(ctx, name, force)
}

// QueueStats returns the job counts of one queue. It fails with
// ErrUnknownQueue.
func (c *Client) QueueStats(ctx context.Context, queue string) (*QueueStats, error) {
	return c.queues.Stats(ctx, queue)
}

// PauseQueue stops queue from handing out jobs: claims (workers,
// ClaimJobs, the SQL job_claim) find none while enqueues, retries and
// schedules go on and running jobs finish. The state is stored, so it
// survives restarts, and pausing a paused queue does nothing. It fails
// with ErrUnknownQueue.
func (c *Client) PauseQueue(ctx context.Context, queue string) error {
	return c.queues.Pause(ctx, queue)
}

// ResumeQueue lets a paused queue hand out jobs again and wakes its idle
// workers. Resuming a queue that is not paused does nothing. It fails with
// ErrUnknownQueue.
func (c *Client) ResumeQueue(ctx context.Context, queue string) error {
	return c.queues.Resume(ctx, queue)
}

// AllQueueStats returns the job counts of every queue, by name.
func (c *Client) AllQueueStats(ctx context.Context) ([]*QueueStats, error) {
	return c.queues.AllStats(ctx, "")
}

// PruneArchiveOpts are options of PruneArchive; nil means defaults.
type PruneArchiveOpts struct {
	// OlderThan overrides the queues' ArchiveRetention. Default: each
	// queue's own retention.
	OlderThan time.Duration
	// BatchSize is the most jobs one statement deletes. Default 1000.
	BatchSize int
}

// PruneArchive deletes archived jobs older than the retention from queue
// (every queue when queue is ""), in statements of at most BatchSize jobs,
// each its own short transaction, until none is left or ctx ends. It
// returns how many it deleted.
func (c *Client) PruneArchive(ctx context.Context, queue string, opts *PruneArchiveOpts) (int64, error) {
	o := PruneArchiveOpts{}
	if opts != nil {
		o = *opts
	}
	return c.queues.PruneArchive(ctx, queue, o.OlderThan, o.BatchSize)
}

// PruneDeadJobs deletes the dead jobs of queue (every queue when queue is
// "") that went dead longer ago than their queue's DeadRetention, in
// statements of at most ArchivePruneBatchDefault jobs, each its own short
// transaction, until none is left or ctx ends. Queues without a
// DeadRetention keep their dead jobs. It returns how many it deleted.
func (c *Client) PruneDeadJobs(ctx context.Context, queue string) (int64, error) {
	return c.queues.PruneDead(ctx, queue)
}

// RescueJobs makes jobs of queue (every queue when "") whose lease expired
// claimable again, counting the attempt (a job out of attempts goes dead),
// and returns how many. Claims do this for their queue already; this is for
// maintenance.
func (c *Client) RescueJobs(ctx context.Context, queue string) (int, error) {
	return c.queues.Rescue(ctx, queue)
}

// ListJobsOpts filter and order ListJobs; nil means the first 100 jobs of
// the queue, live and archived, oldest first (by id).
type ListJobsOpts struct {
	// State keeps only jobs in this state (available, scheduled,
	// retrying, running, dead; completed or cancelled for archived ones).
	// Default: any.
	State JobState
	// Kind keeps only jobs of this kind. Default: any.
	Kind string
	// Tag keeps only jobs with this tag (EnqueueParams.Tags). Default: any.
	Tag string
	// Since and Until keep only jobs enqueued at or after Since and before
	// Until (zero: unbounded).
	Since, Until time.Time
	// Limit caps the jobs returned, 1..1000. Default 100.
	Limit int
	// AfterID pages, in the list's order: the last id of the previous
	// page. Oldest first, only jobs with a larger id follow; newest
	// first, only jobs with a smaller id. 0: from the start.
	AfterID int64
	// Order is JobOrderAsc (oldest first, the default when "") or
	// JobOrderDesc (newest first). Either is served by an index on
	// (queue, id), however long the queue.
	Order JobOrder
}

// ListJobs returns jobs of queue, live and archived, by id (oldest first
// unless opts.Order is JobOrderDesc), filtered
// by opts (state, kind, tag, enqueue time): the jobs waiting, running or dead (with their payloads, error
// history and progress) and those archived (with their results) until
// archive retention prunes them. ErrUnknownQueue for a queue that does
// not exist; ErrInvalidArgument for an unknown state or order, or a limit
// over 1000.
func (c *Client) ListJobs(ctx context.Context, queue string, opts *ListJobsOpts) ([]*Job, error) {
	return c.queues.ListJobs(ctx, queue, listOpts(opts))
}

// listOpts is opts for the engine (nil: defaults, which it applies).
func listOpts(opts *ListJobsOpts) queue.ListOpts {
	if opts == nil {
		return queue.ListOpts{}
	}
	return queue.ListOpts(*opts)
}

// DeadJobsOpts filter ListDeadJobs, RequeueDeadJobs and PurgeDeadJobs; nil
// means all dead jobs of the queue.
type DeadJobsOpts struct {
	// IDs restricts the call to these jobs (RequeueDeadJobs, PurgeDeadJobs).
	IDs []int64
	// Kind restricts the call to jobs of this kind.
	Kind string
	// OlderThan restricts PurgeDeadJobs to jobs dead for longer than this.
	OlderThan time.Duration
	// Limit caps the jobs of one call: ListDeadJobs default 100; requeue and
	// purge default 10000 per statement (they loop until done). A negative
	// Limit or OlderThan is refused (ErrInvalidArgument).
	Limit int
	// AfterID pages ListDeadJobs: only jobs with a larger id.
	AfterID int64
}

// ListDeadJobs returns dead jobs of queue by id, with their error history.
func (c *Client) ListDeadJobs(ctx context.Context, queue string, opts *DeadJobsOpts) ([]*Job, error) {
	return c.queues.ListDead(ctx, queue, deadOpts(opts))
}

// deadOpts is opts for the engine (nil: defaults, which it applies).
func deadOpts(opts *DeadJobsOpts) queue.DeadOpts {
	if opts == nil {
		return queue.DeadOpts{}
	}
	return queue.DeadOpts(*opts)
}

// RequeueDeadJobs makes dead jobs of queue available again with their
// attempts reset (their error history is kept): those in opts.IDs, or all
// (of opts.Kind) when IDs is empty. A dead job whose unique key is taken by
// a live job stays dead. It returns how many were requeued.
func (c *Client) RequeueDeadJobs(ctx context.Context, queue string, opts *DeadJobsOpts) (int64, error) {
	return c.queues.RequeueDead(ctx, queue, deadOpts(opts))
}

// PurgeDeadJobs deletes dead jobs of queue for good: those in opts.IDs, or
// all (of opts.Kind, dead longer than opts.OlderThan) when IDs is empty. It
// returns how many.
func (c *Client) PurgeDeadJobs(ctx context.Context, queue string, opts *DeadJobsOpts) (int64, error) {
	return c.queues.PurgeDead(ctx, queue, deadOpts(opts))
}

// newQueues builds a client's queue engine (NewClient) on its store and
// pool. The rules the engine shares with the log's code stay in the root,
// one home each, and are handed over: names (ValidateName), times
// (checkTime) and the SQL API's longest duration. The backpressure retry
// (errs.RetryWhile) is run by EnqueueMany itself.
func newQueues(st *store.Store, pool *pgxpool.Pool, cfg *Config, tracer *telemetry.Tracer) *queue.Queues {
	return queue.New(st, pool, queue.Config{
		Logger:       cfg.Logger,
		ValidateName: ValidateName,
		CheckTime:    checkTime,
		DurationMax:  durationMax,
		Tracer:       tracer,
	})
}
