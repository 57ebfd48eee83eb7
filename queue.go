package pgmsg

import (
	"context"
	"github.com/pgmsg/pgmsg/pgmsgtype"
	"math"
	"time"

	"github.com/pgmsg/pgmsg/internal/store"
)

// Defaults of queue settings (QueueConfig fields left zero), as the SQL API
// applies them.
const (
	QueueMaxAttemptsDefault      = 25
	QueueLeaseDefault            = 30 * time.Second
	QueueRetryBackoffDefault     = time.Second
	QueueRetryBackoffMaxDefault  = time.Hour
	QueueArchiveRetentionDefault = 7 * 24 * time.Hour
	QueueMaxPayloadBytesDefault  = 1 << 20
	// JobPriorityMin and JobPriorityMax bound EnqueueParams.Priority.
	JobPriorityMin = -32768
	JobPriorityMax = 32767
	// ArchivePruneBatchDefault is how many archived jobs one pruning
	// statement deletes at most.
	ArchivePruneBatchDefault = 1000
	// QueueBackpressureTimeoutDefault is how long Enqueue waits for room in
	// a full queue (QueueConfig.BackpressureTimeout left zero), as topics'
	// BackpressureTimeoutDefault.
	QueueBackpressureTimeoutDefault = BackpressureTimeoutDefault
	// QueueMaxDepthNone in QueueConfig.MaxDepth removes a queue's depth
	// limit on UpdateQueue (0 leaves it unchanged).
	QueueMaxDepthNone = -1
	// QueueJobTimeoutNone in QueueConfig.JobTimeout removes a queue's job
	// timeout on UpdateQueue (0 leaves it unchanged).
	QueueJobTimeoutNone time.Duration = -1
	// QueueDeadRetentionNone in QueueConfig.DeadRetention makes a queue
	// keep its dead jobs again on UpdateQueue (0 leaves it unchanged).
	QueueDeadRetentionNone time.Duration = -1
	// QueueBackpressureNoWait in QueueConfig.BackpressureTimeout makes a
	// full queue refuse enqueues at once (0 means the default). A Queue read
	// back reports it for a zero timeout.
	QueueBackpressureNoWait time.Duration = -1
	// QueueRateLimitNone in QueueConfig.RateLimit removes a queue's rate
	// limit on UpdateQueue (0 leaves it unchanged).
	QueueRateLimitNone = -1
	// QueueMaxRunningNone in QueueConfig.MaxRunning removes a queue's cap
	// on running jobs on UpdateQueue (0 leaves it unchanged).
	QueueMaxRunningNone = -1
	// QueueRateLimitMax is the largest RateLimit, in jobs per second.
	QueueRateLimitMax = 1_000_000
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

// checkQueueConfig checks what the store cannot send faithfully, which the SQL
// API therefore never sees: values past int32, durations under 1µs
// (sent as 0, which means "none" or "default"), and negative values other
// than the ...None sentinels (all sent as 0, "remove"). The ranges it
// checks besides (negative durations, upper bounds) repeat _queue_check()'s
// with the same codes; they stay so that one Go check reports a bad
// setting before the round trip whatever the queue's name or existence
// (queue_update() looks the queue up first).
func checkQueueConfig(cfg QueueConfig) error {
	if cfg.MaxAttempts < 0 || cfg.MaxAttempts > math.MaxInt32 {
		return newError(ErrInvalidMaxAttempts, "max attempts must be between 1 and %d, got %d", math.MaxInt32, cfg.MaxAttempts)
	}
	if cfg.MaxPayloadBytes > math.MaxInt32 {
		return newError(ErrInvalidArgument, "max payload bytes must be at most %d, got %d", math.MaxInt32, cfg.MaxPayloadBytes)
	}
	if cfg.Lease < 0 || cfg.RetryBackoff < 0 || cfg.RetryBackoffMax < 0 || cfg.ArchiveRetention < 0 || cfg.MaxPayloadBytes < 0 {
		return newError(ErrInvalidArgument, "queue durations and max payload bytes must not be negative")
	}
	if cfg.Lease > 0 && cfg.Lease < time.Microsecond {
		return newError(ErrInvalidArgument, "lease must be at least 1µs, got %s", cfg.Lease)
	}
	if cfg.MaxDepth < QueueMaxDepthNone {
		return newError(ErrInvalidArgument, "max depth must be at least 1 (0: no limit or unchanged, QueueMaxDepthNone: remove), got %d", cfg.MaxDepth)
	}
	if b := cfg.BackpressureTimeout; b < QueueBackpressureNoWait || (b > 0 && b < time.Microsecond) {
		return newError(ErrInvalidArgument, "backpressure timeout must be at least 1µs or QueueBackpressureNoWait, got %s", b)
	}
	if t := cfg.JobTimeout; t < QueueJobTimeoutNone || (t > 0 && t < time.Microsecond) || t > durationMax {
		return newError(ErrInvalidArgument, "job timeout must be from 1µs to %s (0: none or unchanged, QueueJobTimeoutNone: remove), got %s", durationMax, t)
	}
	if d := cfg.DeadRetention; d < QueueDeadRetentionNone || (d > 0 && d < time.Microsecond) || d > retentionMax {
		return newError(ErrInvalidArgument, "dead retention must be from 1µs to 36525 days (0: keep or unchanged, QueueDeadRetentionNone: keep again), got %s", d)
	}
	if r := cfg.RateLimit; math.IsNaN(r) || math.IsInf(r, 0) || (r < 0 && r != QueueRateLimitNone) || r > QueueRateLimitMax {
		return newError(ErrInvalidArgument, "rate limit must be more than 0 and at most %d jobs per second (0: none or unchanged, QueueRateLimitNone: remove), got %v",
			QueueRateLimitMax, r)
	}
	if m := cfg.MaxRunning; m < QueueMaxRunningNone || m > math.MaxInt32 {
		return newError(ErrInvalidArgument, "max running must be from 1 to %d (0: none or unchanged, QueueMaxRunningNone: remove), got %d", math.MaxInt32, m)
	}
	return nil
}

// CreateQueue creates a queue with cfg's settings (zero fields: defaults).
// It fails with ErrQueueExists, ErrInvalidName, ErrInvalidMaxAttempts or
// ErrInvalidArgument. Queues are also created on demand, with default
// settings, by the first Enqueue to them and by Work.
func (c *Client) CreateQueue(ctx context.Context, name string, cfg QueueConfig) (*Queue, error) {
	return c.CreateQueueTx(ctx, c.pool, name, cfg)
}

// CreateQueueTx is CreateQueue on exec.
func (c *Client) CreateQueueTx(ctx context.Context, exec DBTX, name string, cfg QueueConfig) (*Queue, error) {
	return c.createQueue(ctx, exec, name, cfg, false)
}

// EnsureQueue returns the queue, creating it with cfg's settings if it does
// not exist. An existing queue's settings are left as they are.
func (c *Client) EnsureQueue(ctx context.Context, name string, cfg QueueConfig) (*Queue, error) {
	return c.createQueue(ctx, c.pool, name, cfg, true)
}

func (c *Client) createQueue(ctx context.Context, exec DBTX, name string, cfg QueueConfig, ifNotExists bool) (*Queue, error) {
	// queue_create() checks the name too; it stays here because validate
	// runs before the round trip, and a bad name must be ErrInvalidName
	// whatever else is wrong.
	if err := ValidateName("queue", name); err != nil {
		return nil, err
	}
	if err := checkQueueConfig(cfg); err != nil {
		return nil, err
	}
	// The store gives the negative ...None and QueueBackpressureNoWait
	// values their meaning.
	return c.store.QueueCreate(ctx, exec, name, cfg, ifNotExists)
}

// UpdateQueue changes the non-zero settings of cfg. Jobs already enqueued
// keep their max attempts; the other settings apply at once (a MaxDepth
// below the current depth removes no job: enqueues fail until the queue
// drains). It fails with ErrUnknownQueue.
func (c *Client) UpdateQueue(ctx context.Context, name string, cfg QueueConfig) (*Queue, error) {
	if err := checkQueueConfig(cfg); err != nil {
		return nil, err
	}
	return c.store.QueueUpdate(ctx, c.pool, name, cfg)
}

// ListQueues returns every queue, by name.
func (c *Client) ListQueues(ctx context.Context) ([]*Queue, error) {
	return c.store.QueueList(ctx, c.pool)
}

// DeleteQueue removes a queue with its archive. A queue with live jobs
// (waiting, running or dead) fails with ErrQueueNotEmpty unless force, which
// deletes them too.
func (c *Client) DeleteQueue(ctx context.Context, name string, force bool) error {
	return c.store.QueueDelete(ctx, c.pool, name, force)
}

// QueueStats returns the job counts of one queue. It fails with
// ErrUnknownQueue.
func (c *Client) QueueStats(ctx context.Context, queue string) (*QueueStats, error) {
	all, err := c.queueStats(ctx, queue)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, newError(ErrUnknownQueue, "unknown queue %q", queue)
	}
	return all[0], nil
}

// PauseQueue stops queue from handing out jobs: claims (workers,
// ClaimJobs, the SQL job_claim) find none while enqueues, retries and
// schedules go on and running jobs finish. The state is stored, so it
// survives restarts, and pausing a paused queue does nothing. It fails
// with ErrUnknownQueue.
func (c *Client) PauseQueue(ctx context.Context, queue string) error {
	return c.store.QueuePause(ctx, c.pool, queue)
}

// ResumeQueue lets a paused queue hand out jobs again and wakes its idle
// workers. Resuming a queue that is not paused does nothing. It fails with
// ErrUnknownQueue.
func (c *Client) ResumeQueue(ctx context.Context, queue string) error {
	return c.store.QueueResume(ctx, c.pool, queue)
}

// AllQueueStats returns the job counts of every queue, by name.
func (c *Client) AllQueueStats(ctx context.Context) ([]*QueueStats, error) {
	return c.queueStats(ctx, "")
}

// queueStats returns the counts of queue ("": of every queue).
func (c *Client) queueStats(ctx context.Context, queue string) ([]*QueueStats, error) {
	rows, err := c.store.QueueStats(ctx, c.pool, queue)
	if err != nil {
		return nil, err
	}
	out := make([]*QueueStats, 0, len(rows))
	for _, r := range rows {
		out = append(out, &QueueStats{
			Queue: r.Queue, Available: r.Available, Scheduled: r.Scheduled, Running: r.Running,
			Retrying: r.Retrying, Dead: r.Dead, Archived: r.Archived, OldestAvailableAge: r.OldestAvailableAge,
			ArchivedLastMinute: r.ArchivedLastMinute, Throughput: float64(r.ArchivedLastMinute) / 60, Paused: r.Paused,
		})
	}
	return out, nil
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
	if o.BatchSize == 0 {
		o.BatchSize = ArchivePruneBatchDefault
	}
	// archive_prune() refuses a negative older than (PM004) before
	// anything else; Go keeps what it cannot leave to it: one under 1µs
	// would be sent as 0 (prune everything), and a negative batch size,
	// which archive_prune() takes as 0, would never end the loop below.
	if o.BatchSize < 0 || (o.OlderThan < 0 && o.OlderThan > -time.Microsecond) {
		return 0, newError(ErrInvalidArgument, "batch size and older than must not be negative")
	}
	batch := int32(min(o.BatchSize, 1<<30))
	return pruneBatches(ctx, batch, func() (int32, error) { return c.store.ArchivePrune(ctx, c.pool, queue, o.OlderThan, batch) })
}

// pruneBatches runs step (one short transaction deleting at most batch
// rows) until it deletes fewer than batch or ctx ends, and returns the
// total.
func pruneBatches(ctx context.Context, batch int32, step func() (int32, error)) (int64, error) {
	var total int64
	for {
		n, err := step()
		if err != nil {
			return total, err
		}
		total += int64(n)
		if n < batch {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// PruneDeadJobs deletes the dead jobs of queue (every queue when queue is
// "") that went dead longer ago than their queue's DeadRetention, in
// statements of at most ArchivePruneBatchDefault jobs, each its own short
// transaction, until none is left or ctx ends. Queues without a
// DeadRetention keep their dead jobs. It returns how many it deleted.
func (c *Client) PruneDeadJobs(ctx context.Context, queue string) (int64, error) {
	return pruneBatches(ctx, ArchivePruneBatchDefault, func() (int32, error) {
		return c.store.DeadPrune(ctx, c.pool, queue, ArchivePruneBatchDefault)
	})
}

// RescueJobs makes jobs of queue (every queue when "") whose lease expired
// claimable again, counting the attempt (a job out of attempts goes dead),
// and returns how many. Claims do this for their queue already; this is for
// maintenance.
func (c *Client) RescueJobs(ctx context.Context, queue string) (int, error) {
	n, err := c.store.JobRescue(ctx, c.pool, queue, 100000)
	return int(n), err
}

// ListJobsOpts filter ListJobs; nil means the first 100 jobs of the
// queue, live and archived, by id.
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
	// AfterID pages: only jobs with a larger id (the last id of the
	// previous page).
	AfterID int64
}

// ListJobs returns jobs of queue, live and archived, in id order, filtered
// by opts (state, kind, tag, enqueue time): the jobs waiting, running or dead (with their payloads, error
// history and progress) and those archived (with their results) until
// archive retention prunes them. ErrUnknownQueue for a queue that does
// not exist; ErrInvalidArgument for an unknown state or a limit over 1000.
func (c *Client) ListJobs(ctx context.Context, queue string, opts *ListJobsOpts) ([]*Job, error) {
	o := ListJobsOpts{}
	if opts != nil {
		o = *opts
	}
	if o.Limit == 0 {
		o.Limit = 100
	}
	// Stays in Go although job_list() refuses the limit too (PM004): it
	// does so after it looks the queue up, so a bad limit of an unknown or
	// badly named queue would become PM101 or PM003. job_list() takes a
	// negative after id as 0, so that check is Go's alone.
	if o.Limit < 0 || o.Limit > 1000 {
		return nil, newError(ErrInvalidArgument, "limit must be between 1 and 1000, got %d", o.Limit)
	}
	if o.AfterID < 0 {
		return nil, newError(ErrInvalidArgument, "after id must not be negative, got %d", o.AfterID)
	}
	// job_list() refuses a bad name too (PM003, through _queue()); checked
	// here because the times' checks below run before the round trip.
	if err := ValidateName("queue", queue); err != nil {
		return nil, err
	}
	// Times pgx can send and PostgreSQL hold.
	if !o.Since.IsZero() {
		if err := checkTime("since", o.Since); err != nil {
			return nil, err
		}
	}
	if !o.Until.IsZero() {
		if err := checkTime("until", o.Until); err != nil {
			return nil, err
		}
	}
	return c.store.JobList(ctx, c.pool, store.JobListParams{Queue: queue, State: string(o.State), Kind: o.Kind,
		Tag: o.Tag, Since: o.Since, Until: o.Until, Limit: o.Limit, AfterID: o.AfterID})
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
	// purge default 10000 per statement (they loop until done).
	Limit int
	// AfterID pages ListDeadJobs: only jobs with a larger id.
	AfterID int64
}

// ListDeadJobs returns dead jobs of queue by id, with their error history.
func (c *Client) ListDeadJobs(ctx context.Context, queue string, opts *DeadJobsOpts) ([]*Job, error) {
	o := DeadJobsOpts{}
	if opts != nil {
		o = *opts
	}
	if o.Limit <= 0 {
		o.Limit = 100
	}
	return c.store.DeadList(ctx, c.pool, queue, o.Kind, o.Limit, o.AfterID)
}

// RequeueDeadJobs makes dead jobs of queue available again with their
// attempts reset (their error history is kept): those in opts.IDs, or all
// (of opts.Kind) when IDs is empty. A dead job whose unique key is taken by
// a live job stays dead. It returns how many were requeued.
func (c *Client) RequeueDeadJobs(ctx context.Context, queue string, opts *DeadJobsOpts) (int64, error) {
	o := DeadJobsOpts{}
	if opts != nil {
		o = *opts
	}
	batch := o.Limit
	if batch <= 0 {
		batch = 10000
	}
	var total int64
	for {
		n, err := c.store.DeadRequeue(ctx, c.pool, queue, o.IDs, o.Kind, batch)
		if err != nil {
			return total, err
		}
		total += int64(n)
		if n < batch || o.Limit > 0 {
			return total, nil
		}
	}
}

// PurgeDeadJobs deletes dead jobs of queue for good: those in opts.IDs, or
// all (of opts.Kind, dead longer than opts.OlderThan) when IDs is empty. It
// returns how many.
func (c *Client) PurgeDeadJobs(ctx context.Context, queue string, opts *DeadJobsOpts) (int64, error) {
	o := DeadJobsOpts{}
	if opts != nil {
		o = *opts
	}
	batch := o.Limit
	if batch <= 0 {
		batch = 10000
	}
	var total int64
	for {
		n, err := c.store.DeadPurge(ctx, c.pool, queue, o.IDs, o.Kind, o.OlderThan, batch)
		if err != nil {
			return total, err
		}
		total += int64(n)
		if n < batch || o.Limit > 0 {
			return total, nil
		}
	}
}
