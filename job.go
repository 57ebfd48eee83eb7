package pgmsg

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/jobdoc"
	"github.com/pgmsg/pgmsg/internal/queue"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// JobState is where a job is in its life (pgmsgtype.JobState).
type JobState = pgmsgtype.JobState

// Job states. Available, scheduled and retrying jobs wait (and are claimable
// once their RunAt passes); running jobs are held by a worker; dead jobs ran
// out of attempts. Pending jobs wait behind an earlier job of their sequence
// (EnqueueParams.SequenceKey). Completed and cancelled jobs are in the
// archive.
const (
	JobStateAvailable = pgmsgtype.JobStateAvailable
	JobStateScheduled = pgmsgtype.JobStateScheduled
	JobStateRetrying  = pgmsgtype.JobStateRetrying
	JobStateRunning   = pgmsgtype.JobStateRunning
	JobStateDead      = pgmsgtype.JobStateDead
	JobStatePending   = pgmsgtype.JobStatePending
	JobStateCompleted = pgmsgtype.JobStateCompleted
	JobStateCancelled = pgmsgtype.JobStateCancelled
)

// JobOrder is the order ListJobs lists jobs in, by id (pgmsgtype.JobOrder).
type JobOrder = pgmsgtype.JobOrder

// Job list orders (ListJobsOpts.Order): oldest first, the default, or
// newest first.
const (
	JobOrderAsc  = pgmsgtype.JobOrderAsc
	JobOrderDesc = pgmsgtype.JobOrderDesc
)

// Job is a job as claimed by a worker or read by GetJob (pgmsgtype.Job).
type Job = pgmsgtype.Job

// JobError is one failed attempt of a job (pgmsgtype.JobError).
type JobError = pgmsgtype.JobError

// JobDocumentMaxBytes is the largest progress or result document a job
// keeps: 64 KiB of JSON text, as PostgreSQL writes it (jsonb's text form).
const JobDocumentMaxBytes = jobdoc.MaxBytes

// JobClaimMaxDefault is how many jobs ClaimJobs claims by default.
const JobClaimMaxDefault = queue.ClaimMaxDefault

// SetJobProgress records progress (encoded as JSON; nil clears it) for a
// job the caller holds, visible to GetJob while it runs and kept when it
// finishes. It fails with ErrJobNotHeld when the job's lease was lost, and
// ErrInvalidArgument for what SetResult refuses.
func (c *Client) SetJobProgress(ctx context.Context, job *Job, progress any) error {
	return c.queues.SetProgress(ctx, job, progress)
}

// EnqueueParams is one job to enqueue (pgmsgtype.EnqueueParams).
type EnqueueParams = pgmsgtype.EnqueueParams

// JobTagsMax is the most tags a job may have.
const JobTagsMax = queue.TagsMax

// JSONPayload encodes v as JSON for EnqueueParams.Payload.
func JSONPayload(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, newError(ErrInvalidArgument, "payload is not JSON: %v", err)
	}
	return b, nil
}

// EnqueueOpts are options of an enqueue call; nil means defaults.
type EnqueueOpts struct {
	// DisableCreateQueue makes an enqueue to a queue that does not exist
	// fail with ErrUnknownQueue. Default false: the queue is created with
	// default settings.
	DisableCreateQueue bool
}

// EnqueueResult is what an enqueue did with one job (pgmsgtype.EnqueueResult).
type EnqueueResult = pgmsgtype.EnqueueResult

// Enqueue adds one job to queue. See EnqueueMany.
func (c *Client) Enqueue(ctx context.Context, queue string, params EnqueueParams, opts *EnqueueOpts) (*EnqueueResult, error) {
	res, err := c.EnqueueMany(ctx, queue, []EnqueueParams{params}, opts)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// EnqueueTx is Enqueue on exec: inside a transaction the job exists iff the
// transaction commits. See EnqueueManyTx.
func (c *Client) EnqueueTx(ctx context.Context, exec DBTX, queue string, params EnqueueParams, opts *EnqueueOpts) (*EnqueueResult, error) {
	res, err := c.EnqueueManyTx(ctx, exec, queue, []EnqueueParams{params}, opts)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// EnqueueMany adds jobs to queue in one statement, as EnqueueManyTx does on
// the client's pool, except that when the queue is full (ErrQueueFull) it
// retries for up to the queue's BackpressureTimeout (default 5s) for
// workers to make room.
func (c *Client) EnqueueMany(ctx context.Context, queue string, params []EnqueueParams, opts *EnqueueOpts) ([]*EnqueueResult, error) {
	var res []*EnqueueResult
	enqueue := func() (err error) {
		res, err = c.EnqueueManyTx(ctx, c.pool, queue, params, opts)
		return err
	}
	err := enqueue()
	// PM109 says how long to wait: the queue's BackpressureTimeout. Each
	// attempt is its own EnqueueManyTx, with its own span.
	if wait, ok := c.queues.RoomWait(err); ok {
		err = errs.RetryWhile(ctx, ErrQueueFull, wait, err, enqueue)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// EnqueueManyTx adds jobs to queue in one statement on exec and returns one
// result per job, in order. Bad input fails the whole batch and writes
// nothing: ErrEmptyBatch, ErrUnknownQueue (with DisableCreateQueue),
// ErrPayloadTooLarge, ErrInvalidDelay, ErrInvalidMaxAttempts,
// ErrInvalidArgument (priority out of range, RunAt and Delay both set).
// A queue with a MaxDepth that the batch would exceed fails it at once with
// ErrQueueFull: waiting inside the caller's transaction would hold its
// locks, so it is the caller's to retry (IsRetryable reports true).
// Idle workers of the queue are woken when the transaction commits.
func (c *Client) EnqueueManyTx(ctx context.Context, exec DBTX, queue string, params []EnqueueParams, opts *EnqueueOpts) (res []*EnqueueResult, err error) {
	// Stays in Go although enqueue_many() checks it too: the per-job
	// checks (queue.Queues.Enqueue) run before the round trip, and a bad
	// name must be ErrInvalidName whatever else is wrong. Both checks come
	// before the engine's span, as the per-job ones come after it.
	if err := ValidateName("queue", queue); err != nil {
		return nil, err
	}
	if len(params) == 0 {
		return nil, newError(ErrEmptyBatch, "empty batch: enqueue needs at least one job")
	}
	return c.queues.Enqueue(ctx, exec, queue, params, opts == nil || !opts.DisableCreateQueue)
}

// ClaimJobsOpts are options of ClaimJobs; nil means defaults.
type ClaimJobsOpts struct {
	// Max is the most jobs to claim. Default 1.
	Max int
	// Lease overrides the queue's Lease for these jobs.
	Lease time.Duration
	// Worker names the claimant (shown by GetJob). Optional.
	Worker string
	// MaxBytes caps the payload bytes of the claim: it stops before the job
	// that would take the total beyond MaxBytes, but always hands out at
	// least one job, whatever its size. Jobs beyond the cap are not leased.
	// Default 0: no cap.
	MaxBytes int64
}

// ClaimJobs leases up to opts.Max claimable jobs of queue to the caller in
// one statement, highest priority first, then oldest RunAt. Each job is
// running under a new LeaseToken until its lease expires; finish it with
// Complete, Fail or Snooze, and ExtendJob it if it runs long. Claimers never
// wait on one another. It returns no jobs (and no error) when none is
// claimable, and fails with ErrUnknownQueue.
func (c *Client) ClaimJobs(ctx context.Context, queue string, opts *ClaimJobsOpts) ([]*Job, error) {
	return c.queues.Claim(ctx, c.pool, queue, claimOpts(opts), true)
}

// ClaimJobsTx is ClaimJobs on exec. Inside a transaction the claim is only
// visible once it commits; other claimers skip the jobs meanwhile.
func (c *Client) ClaimJobsTx(ctx context.Context, exec DBTX, queue string, opts *ClaimJobsOpts) ([]*Job, error) {
	return c.queues.Claim(ctx, exec, queue, claimOpts(opts), false)
}

// claimOpts is opts for the engine (nil: defaults, which it applies).
func claimOpts(opts *ClaimJobsOpts) queue.ClaimOpts {
	if opts == nil {
		return queue.ClaimOpts{}
	}
	return queue.ClaimOpts(*opts)
}

// Complete archives a job the caller holds (status completed). It fails
// with ErrJobNotHeld, writing nothing, when the claim no longer holds the
// job (for example its lease expired and the job was rescued), and with
// ErrUnknownJob.
func (c *Client) Complete(ctx context.Context, job *Job) error {
	return c.CompleteTx(ctx, c.pool, job)
}

// CompleteTx is Complete on exec: complete the job in the same transaction
// as the handler's own writes, so both commit or neither does.
func (c *Client) CompleteTx(ctx context.Context, exec DBTX, job *Job) error {
	return c.queues.Complete(ctx, exec, job)
}

// CompleteManyResult says which jobs of a CompleteMany were archived.
type CompleteManyResult struct {
	// Completed holds the ids of the jobs archived.
	Completed []int64
	// NotHeld holds the ids of the jobs the caller no longer held; they were
	// left as they are.
	NotHeld []int64
}

// CompleteMany archives many held jobs in one statement. Jobs no longer
// held are left as they are and reported in NotHeld.
func (c *Client) CompleteMany(ctx context.Context, jobs []*Job) (*CompleteManyResult, error) {
	return c.CompleteManyTx(ctx, c.pool, jobs)
}

// CompleteManyTx is CompleteMany on exec.
func (c *Client) CompleteManyTx(ctx context.Context, exec DBTX, jobs []*Job) (*CompleteManyResult, error) {
	done, notHeld, err := c.queues.CompleteMany(ctx, exec, jobs, nil)
	if err != nil {
		return nil, err
	}
	return &CompleteManyResult{Completed: done, NotHeld: notHeld}, nil
}

// FailOpts are options of Fail; nil means defaults.
type FailOpts struct {
	// RetryIn overrides the queue's backoff for this retry. Default 0: the
	// queue's backoff.
	RetryIn time.Duration
	// Dead sends the job to the dead-letter state at once, without retrying
	// (for errors that no retry will fix).
	Dead bool
}

// FailResult is a failed job's new state: JobStateRetrying with the RunAt of
// the retry, or JobStateDead.
type FailResult struct {
	State JobState
	RunAt time.Time
}

// Fail records jobErr as the error of the held attempt and schedules a
// retry after the queue's backoff (retry n waits RetryBackoff * 2^(n-1),
// capped, +-10% jitter), or moves the job to the dead-letter state when it
// is out of attempts. It fails with ErrJobNotHeld or ErrInvalidDelay,
// writing nothing.
func (c *Client) Fail(ctx context.Context, job *Job, jobErr error, opts *FailOpts) (*FailResult, error) {
	return c.FailTx(ctx, c.pool, job, jobErr, opts)
}

// FailTx is Fail on exec.
func (c *Client) FailTx(ctx context.Context, exec DBTX, job *Job, jobErr error, opts *FailOpts) (*FailResult, error) {
	o := FailOpts{}
	if opts != nil {
		o = *opts
	}
	state, runAt, err := c.queues.Fail(ctx, exec, job, jobErr, o.RetryIn, o.Dead, "")
	if err != nil {
		return nil, err
	}
	return &FailResult{State: state, RunAt: runAt}, nil
}

// Snooze puts a held job back to wait delay (0: claimable at once, which
// releases it) without counting the attempt, and returns its new RunAt. It
// fails with ErrJobNotHeld or ErrInvalidDelay.
func (c *Client) Snooze(ctx context.Context, job *Job, delay time.Duration) (time.Time, error) {
	return c.SnoozeTx(ctx, c.pool, job, delay)
}

// SnoozeTx is Snooze on exec.
func (c *Client) SnoozeTx(ctx context.Context, exec DBTX, job *Job, delay time.Duration) (time.Time, error) {
	return c.queues.Snooze(ctx, exec, job, delay, "")
}

// ExtendJob pushes a held job's lease to lease from now (database clock;
// 0: the queue's Lease), a heartbeat for long jobs. It fails with
// ErrJobNotHeld.
func (c *Client) ExtendJob(ctx context.Context, job *Job, lease time.Duration) error {
	return c.ExtendJobTx(ctx, c.pool, job, lease)
}

// ExtendJobTx is ExtendJob on exec.
func (c *Client) ExtendJobTx(ctx context.Context, exec DBTX, job *Job, lease time.Duration) error {
	return c.queues.Extend(ctx, exec, job, lease)
}

// CancelJob archives a job (status cancelled) whatever its state; a worker
// running it then gets ErrJobNotHeld when it finishes. It returns false if
// the job had already finished, and fails with ErrUnknownJob.
func (c *Client) CancelJob(ctx context.Context, id int64) (bool, error) {
	return c.CancelJobTx(ctx, c.pool, id)
}

// CancelJobTx is CancelJob on exec.
func (c *Client) CancelJobTx(ctx context.Context, exec DBTX, id int64) (bool, error) {
	return c.queues.Cancel(ctx, exec, id)
}

// RetryJob makes a scheduled or retrying job claimable now, keeping its
// attempts, and wakes its queue's idle workers; an available job is left as
// it is. It fails with ErrJobNotWaiting for a running, dead
// (RequeueDeadJobs requeues those) or finished job, and with ErrUnknownJob.
func (c *Client) RetryJob(ctx context.Context, id int64) error {
	return c.RetryJobTx(ctx, c.pool, id)
}

// RetryJobTx is RetryJob on exec; the workers are woken when it commits.
func (c *Client) RetryJobTx(ctx context.Context, exec DBTX, id int64) error {
	return c.queues.Retry(ctx, exec, id)
}

// GetJob returns a job wherever it is: live or archived. It fails with
// ErrUnknownJob.
func (c *Client) GetJob(ctx context.Context, id int64) (*Job, error) {
	return c.queues.Get(ctx, id)
}
