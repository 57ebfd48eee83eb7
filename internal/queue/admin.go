package queue

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// CheckConfig checks what the store cannot send faithfully, which the SQL
// API therefore never sees: values past int32, durations under 1µs (sent
// as 0, which means "none" or "default"), and negative values other than
// the ...None sentinels (all sent as 0, "remove"). The ranges it checks
// besides (negative durations, upper bounds) repeat _queue_check()'s with
// the same codes; they stay so that one Go check reports a bad setting
// before the round trip whatever the queue's name or existence
// (queue_update() looks the queue up first).
func (q *Queues) CheckConfig(cfg pgmsgtype.QueueConfig) error {
	durationMax := q.cfg.DurationMax
	if cfg.MaxAttempts < 0 || cfg.MaxAttempts > math.MaxInt32 {
		return errs.New(errs.InvalidMaxAttempts, "max attempts must be between 1 and %d, got %d", math.MaxInt32, cfg.MaxAttempts)
	}
	if cfg.MaxPayloadBytes > math.MaxInt32 {
		return errs.New(errs.InvalidArgument, "max payload bytes must be at most %d, got %d", math.MaxInt32, cfg.MaxPayloadBytes)
	}
	if cfg.Lease < 0 || cfg.RetryBackoff < 0 || cfg.RetryBackoffMax < 0 || cfg.ArchiveRetention < 0 || cfg.MaxPayloadBytes < 0 {
		return errs.New(errs.InvalidArgument, "queue durations and max payload bytes must not be negative")
	}
	if cfg.Lease > 0 && cfg.Lease < time.Microsecond {
		return errs.New(errs.InvalidArgument, "lease must be at least 1µs, got %s", cfg.Lease)
	}
	if cfg.MaxDepth < MaxDepthNone {
		return errs.New(errs.InvalidArgument, "max depth must be at least 1 (0: no limit or unchanged, QueueMaxDepthNone: remove), got %d", cfg.MaxDepth)
	}
	if b := cfg.BackpressureTimeout; b < BackpressureNoWait || (b > 0 && b < time.Microsecond) {
		return errs.New(errs.InvalidArgument, "backpressure timeout must be at least 1µs or QueueBackpressureNoWait, got %s", b)
	}
	if t := cfg.JobTimeout; t < JobTimeoutNone || (t > 0 && t < time.Microsecond) || t > durationMax {
		return errs.New(errs.InvalidArgument, "job timeout must be from 1µs to %s (0: none or unchanged, QueueJobTimeoutNone: remove), got %s", durationMax, t)
	}
	if d := cfg.DeadRetention; d < DeadRetentionNone || (d > 0 && d < time.Microsecond) || d > retentionMax {
		return errs.New(errs.InvalidArgument, "dead retention must be from 1µs to 36525 days (0: keep or unchanged, QueueDeadRetentionNone: keep again), got %s", d)
	}
	if r := cfg.RateLimit; math.IsNaN(r) || math.IsInf(r, 0) || (r < 0 && r != RateLimitNone) || r > RateLimitMax {
		return errs.New(errs.InvalidArgument, "rate limit must be more than 0 and at most %d jobs per second (0: none or unchanged, QueueRateLimitNone: remove), got %v",
			RateLimitMax, r)
	}
	if m := cfg.MaxRunning; m < MaxRunningNone || m > math.MaxInt32 {
		return errs.New(errs.InvalidArgument, "max running must be from 1 to %d (0: none or unchanged, QueueMaxRunningNone: remove), got %d", math.MaxInt32, m)
	}
	if k := cfg.KeyLimit; k < KeyLimitNone || k > math.MaxInt32 {
		return errs.New(errs.InvalidArgument, "key limit must be from 1 to %d (0: none or unchanged, QueueKeyLimitNone: remove), got %d", math.MaxInt32, k)
	}
	if cfg.KeyField != KeyFieldNone && strings.IndexByte(cfg.KeyField, 0) >= 0 {
		return errs.New(errs.InvalidArgument, "key field must not hold a NUL byte")
	}
	if len(cfg.KeyField) > KeyFieldMaxBytes {
		return errs.New(errs.InvalidArgument, "key field must be at most %d bytes, got %d", KeyFieldMaxBytes, len(cfg.KeyField))
	}
	return nil
}

// Create creates queue name with cfg's settings on exec; ifNotExists
// returns an existing queue as it is instead of ErrQueueExists.
func (q *Queues) Create(ctx context.Context, exec store.DBTX, name string, cfg pgmsgtype.QueueConfig, ifNotExists bool) (*pgmsgtype.Queue, error) {
	// queue_create() checks the name too; it stays here because validate
	// runs before the round trip, and a bad name must be ErrInvalidName
	// whatever else is wrong.
	if err := q.cfg.ValidateName("queue", name); err != nil {
		return nil, err
	}
	if err := q.CheckConfig(cfg); err != nil {
		return nil, err
	}
	// The store gives the negative ...None and BackpressureNoWait values
	// their meaning.
	return q.store.QueueCreate(ctx, exec, name, cfg, ifNotExists)
}

// Update changes the non-zero settings of cfg.
func (q *Queues) Update(ctx context.Context, name string, cfg pgmsgtype.QueueConfig) (*pgmsgtype.Queue, error) {
	if err := q.CheckConfig(cfg); err != nil {
		return nil, err
	}
	return q.store.QueueUpdate(ctx, q.pool, name, cfg)
}

// List returns every queue, by name.
func (q *Queues) List(ctx context.Context) ([]*pgmsgtype.Queue, error) {
	return q.store.QueueList(ctx, q.pool)
}

// Delete removes a queue with its archive; force deletes its live jobs
// too (else ErrQueueNotEmpty).
func (q *Queues) Delete(ctx context.Context, name string, force bool) error {
	return q.store.QueueDelete(ctx, q.pool, name, force)
}

// Pause stops queue from handing out jobs.
func (q *Queues) Pause(ctx context.Context, queue string) error {
	return q.store.QueuePause(ctx, q.pool, queue)
}

// Resume lets a paused queue hand out jobs again.
func (q *Queues) Resume(ctx context.Context, queue string) error {
	return q.store.QueueResume(ctx, q.pool, queue)
}

// Stats returns the job counts of queue, ErrUnknownQueue when it does
// not exist.
func (q *Queues) Stats(ctx context.Context, queue string) (*pgmsgtype.QueueStats, error) {
	all, err := q.AllStats(ctx, queue)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, errs.New(errs.UnknownQueue, "unknown queue %q", queue)
	}
	return all[0], nil
}

// AllStats returns the counts of queue ("": of every queue, by name).
func (q *Queues) AllStats(ctx context.Context, queue string) ([]*pgmsgtype.QueueStats, error) {
	rows, err := q.store.QueueStats(ctx, q.pool, queue)
	if err != nil {
		return nil, err
	}
	out := make([]*pgmsgtype.QueueStats, 0, len(rows))
	for _, r := range rows {
		out = append(out, &pgmsgtype.QueueStats{
			Queue: r.Queue, Available: r.Available, Scheduled: r.Scheduled, Running: r.Running,
			Retrying: r.Retrying, Dead: r.Dead, Archived: r.Archived, Pending: r.Pending, OldestAvailableAge: r.OldestAvailableAge,
			ArchivedLastMinute: r.ArchivedLastMinute, Throughput: float64(r.ArchivedLastMinute) / 60, Paused: r.Paused,
		})
	}
	return out, nil
}

// PruneArchive deletes archived jobs of queue ("": every queue) older
// than olderThan (0: each queue's retention), in statements of at most
// batchSize jobs (0: PruneBatchDefault), each its own short transaction,
// until none is left or ctx ends; it returns how many it deleted.
func (q *Queues) PruneArchive(ctx context.Context, queue string, olderThan time.Duration, batchSize int) (int64, error) {
	if batchSize == 0 {
		batchSize = PruneBatchDefault
	}
	// archive_prune() refuses a negative older than (PM004) before
	// anything else; Go keeps what it cannot leave to it: one under 1µs
	// would be sent as 0 (prune everything), and a negative batch size,
	// which archive_prune() takes as 0, would never end the loop below.
	if batchSize < 0 || (olderThan < 0 && olderThan > -time.Microsecond) {
		return 0, errs.New(errs.InvalidArgument, "batch size and older than must not be negative")
	}
	batch := int32(min(batchSize, 1<<30))
	return pruneBatches(ctx, batch, func() (int32, error) { return q.store.ArchivePrune(ctx, q.pool, queue, olderThan, batch) })
}

// PruneDead deletes the dead jobs of queue ("": every queue) past their
// queue's DeadRetention, in statements of at most PruneBatchDefault jobs,
// until none is left or ctx ends; it returns how many it deleted.
func (q *Queues) PruneDead(ctx context.Context, queue string) (int64, error) {
	return pruneBatches(ctx, PruneBatchDefault, func() (int32, error) {
		return q.store.DeadPrune(ctx, q.pool, queue, PruneBatchDefault)
	})
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

// Rescue makes jobs of queue ("": every queue) whose lease expired
// claimable again, counting the attempt, and returns how many.
func (q *Queues) Rescue(ctx context.Context, queue string) (int, error) {
	n, err := q.store.JobRescue(ctx, q.pool, queue, 100000)
	return int(n), err
}

// ListOpts filter List (pgmsg.ListJobsOpts, defaults not yet applied).
type ListOpts struct {
	// State, Kind and Tag keep only the jobs that have them ("": any).
	State pgmsgtype.JobState
	Kind  string
	Tag   string
	// Since and Until bound the enqueue time (zero: unbounded).
	Since, Until time.Time
	// Limit caps the jobs returned, 1..1000; 0: 100.
	Limit int
	// AfterID pages in the list's order: ids above it oldest first,
	// below it newest first (0: from the start).
	AfterID int64
	// Order: "" or asc oldest first, desc newest first.
	Order pgmsgtype.JobOrder
}

// ListJobs returns jobs of queue, live and archived, by id (newest first
// when o.Order is desc), filtered by o.
func (q *Queues) ListJobs(ctx context.Context, queue string, o ListOpts) ([]*pgmsgtype.Job, error) {
	if o.Limit == 0 {
		o.Limit = 100
	}
	// Stays in Go although job_list() refuses the limit too (PM004): it
	// does so after it looks the queue up, so a bad limit of an unknown or
	// badly named queue would become PM101 or PM003. job_list() takes a
	// negative after id as 0, so that check is Go's alone.
	if o.Limit < 0 || o.Limit > 1000 {
		return nil, errs.New(errs.InvalidArgument, "limit must be between 1 and 1000, got %d", o.Limit)
	}
	if o.Order != "" && o.Order != pgmsgtype.JobOrderAsc && o.Order != pgmsgtype.JobOrderDesc {
		return nil, errs.New(errs.InvalidArgument, "order must be asc or desc, got %q", o.Order)
	}
	if o.AfterID < 0 {
		return nil, errs.New(errs.InvalidArgument, "after id must not be negative, got %d", o.AfterID)
	}
	// job_list() refuses a bad name too (PM003, through _queue()); checked
	// here because the times' checks below run before the round trip.
	if err := q.cfg.ValidateName("queue", queue); err != nil {
		return nil, err
	}
	// Times pgx can send and PostgreSQL hold.
	if !o.Since.IsZero() {
		if err := q.cfg.CheckTime("since", o.Since); err != nil {
			return nil, err
		}
	}
	if !o.Until.IsZero() {
		if err := q.cfg.CheckTime("until", o.Until); err != nil {
			return nil, err
		}
	}
	return q.store.JobList(ctx, q.pool, store.JobListParams{Queue: queue, State: string(o.State), Kind: o.Kind,
		Tag: o.Tag, Since: o.Since, Until: o.Until, Limit: o.Limit, AfterID: o.AfterID, Desc: o.Order == pgmsgtype.JobOrderDesc})
}

// DeadOpts filter the dead-job calls (pgmsg.DeadJobsOpts, defaults not
// yet applied).
type DeadOpts struct {
	// IDs restricts requeue and purge to these jobs (none: all).
	IDs []int64
	// Kind restricts the call to jobs of this kind ("": any).
	Kind string
	// OlderThan restricts purge to jobs dead for longer than this.
	OlderThan time.Duration
	// Limit caps the jobs of one call (0: ListDead 100; requeue and
	// purge all, deadBatch per statement; negative: PM004).
	Limit int
	// AfterID pages ListDead: only jobs with a larger id.
	AfterID int64
}

// ListDead returns dead jobs of queue by id, with their error history.
func (q *Queues) ListDead(ctx context.Context, queue string, o DeadOpts) ([]*pgmsgtype.Job, error) {
	if o.Limit == 0 {
		o.Limit = 100
	}
	// A negative limit is dead_list()'s to refuse (PM004).
	return q.store.DeadList(ctx, q.pool, queue, o.Kind, o.Limit, o.AfterID)
}

// deadBatch is the jobs of one requeue or purge statement when o.Limit
// does not say: the calls loop until done.
const deadBatch = 10000

// RequeueDead makes dead jobs of queue available again with their
// attempts reset, and returns how many: o.Limit of them, or all, in
// statements of deadBatch.
func (q *Queues) RequeueDead(ctx context.Context, queue string, o DeadOpts) (int64, error) {
	return deadLoop(o.Limit, func(batch int) (int, error) {
		return q.store.DeadRequeue(ctx, q.pool, queue, o.IDs, o.Kind, batch)
	})
}

// PurgeDead deletes dead jobs of queue for good, and returns how many:
// o.Limit of them, or all, in statements of deadBatch.
func (q *Queues) PurgeDead(ctx context.Context, queue string, o DeadOpts) (int64, error) {
	return deadLoop(o.Limit, func(batch int) (int, error) {
		return q.store.DeadPurge(ctx, q.pool, queue, o.IDs, o.Kind, o.OlderThan, batch)
	})
}

// deadLoop runs step with limit (one statement) when limit is set, else
// with deadBatch until a statement does less, and returns the total.
func deadLoop(limit int, step func(batch int) (int, error)) (int64, error) {
	// A negative limit goes to the statement, which refuses it (PM004):
	// read as "not set", it would requeue or purge every dead job.
	batch := limit
	if batch == 0 {
		batch = deadBatch
	}
	var total int64
	for {
		n, err := step(batch)
		if err != nil {
			return total, err
		}
		total += int64(n)
		if n < batch || limit != 0 {
			return total, nil
		}
	}
}

// SequenceList lists queue's sequences (store.SequenceList).
func (q *Queues) SequenceList(ctx context.Context, queue string, heldOnly bool, limit int, afterKey string) ([]store.Sequence, error) {
	return q.store.SequenceList(ctx, q.pool, queue, heldOnly, limit, afterKey)
}

// SequenceResume resumes a held sequence of queue (store.SequenceResume).
func (q *Queues) SequenceResume(ctx context.Context, queue, key string) (bool, error) {
	return q.store.SequenceResume(ctx, q.pool, queue, key)
}

// KeyLimitList lists queue's limit keys with admitted or pending jobs
// (store.KeyLimitList).
func (q *Queues) KeyLimitList(ctx context.Context, queue string, limit int, afterKey string) ([]store.LimitKey, error) {
	return q.store.KeyLimitList(ctx, q.pool, queue, limit, afterKey)
}

// SequenceJobs returns a sequence's jobs (store.SequenceJobs).
func (q *Queues) SequenceJobs(ctx context.Context, queue, key string, limit int) (*store.SequenceJobsResult, error) {
	return q.store.SequenceJobs(ctx, q.pool, queue, key, limit)
}

// TenantWeightSet sets a tenant's weight in queue (store.TenantWeightSet).
func (q *Queues) TenantWeightSet(ctx context.Context, queue, tenant string, weight float64) error {
	return q.store.TenantWeightSet(ctx, q.pool, queue, tenant, weight)
}

// TenantList lists queue's tenants (store.TenantList).
func (q *Queues) TenantList(ctx context.Context, queue string, limit int, afterTenant string) ([]store.Tenant, error) {
	return q.store.TenantList(ctx, q.pool, queue, limit, afterTenant)
}
