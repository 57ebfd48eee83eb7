package pgmsg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/jobdoc"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// JobState is where a job is in its life (pgmsgtype.JobState).
type JobState = pgmsgtype.JobState

// Job states. Available, scheduled and retrying jobs wait (and are claimable
// once their RunAt passes); running jobs are held by a worker; dead jobs ran
// out of attempts. Completed and cancelled jobs are in the archive.
const (
	JobStateAvailable = pgmsgtype.JobStateAvailable
	JobStateScheduled = pgmsgtype.JobStateScheduled
	JobStateRetrying  = pgmsgtype.JobStateRetrying
	JobStateRunning   = pgmsgtype.JobStateRunning
	JobStateDead      = pgmsgtype.JobStateDead
	JobStateCompleted = pgmsgtype.JobStateCompleted
	JobStateCancelled = pgmsgtype.JobStateCancelled
)

// Job is a job as claimed by a worker or read by GetJob (pgmsgtype.Job).
type Job = pgmsgtype.Job

// JobError is one failed attempt of a job (pgmsgtype.JobError).
type JobError = pgmsgtype.JobError

// JobDocumentMaxBytes is the largest progress or result document a job
// keeps: 64 KiB of JSON text, as PostgreSQL writes it (jsonb's text form).
const JobDocumentMaxBytes = jobdoc.MaxBytes

// jobDocument encodes and checks a job's progress, result or metadata
// (jobdoc.Encode).
func jobDocument(what string, v any) (json.RawMessage, error) { return jobdoc.Encode(what, v) }

// JobClaimMaxDefault is how many jobs ClaimJobs claims by default.
const JobClaimMaxDefault = 1

// SetJobProgress records progress (encoded as JSON; nil clears it) for a
// job the caller holds, visible to GetJob while it runs and kept when it
// finishes. It fails with ErrJobNotHeld when the job's lease was lost, and
// ErrInvalidArgument for what SetResult refuses.
func (c *Client) SetJobProgress(ctx context.Context, job *Job, progress any) error {
	b, err := jobDocument("progress", progress)
	if err != nil {
		return err
	}
	if err := c.store.JobProgress(ctx, c.pool, job.ID, job.LeaseToken, b); err != nil {
		return err
	}
	job.Progress = b
	return nil
}

// EnqueueParams is one job to enqueue (pgmsgtype.EnqueueParams).
type EnqueueParams = pgmsgtype.EnqueueParams

// JobTagsMax is the most tags a job may have.
const JobTagsMax = 20

var jobTagRE = regexp.MustCompile(`^[A-Za-z0-9._:/=@+-]{1,100}$`)

// jobTagsJSON checks a job's tags as _job_tags() does and encodes them for
// enqueue_many() (nil: none).
func jobTagsJSON(i int, tags []string) ([]byte, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	if len(tags) > JobTagsMax {
		return nil, newError(ErrInvalidArgument, "job %d: at most %d tags, got %d", i, JobTagsMax, len(tags))
	}
	for _, t := range tags {
		if !jobTagRE.MatchString(t) {
			return nil, newError(ErrInvalidArgument, "job %d: tag %q: a tag is 1 to 100 of A-Z a-z 0-9 . _ : / = @ + -", i, t)
		}
	}
	return json.Marshal(tags)
}

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
	// PM109 says how long to wait: the queue's BackpressureTimeout.
	if wait, ok := errs.BackpressureWait(err); ok && errors.Is(err, ErrQueueFull) {
		err = retryWhile(ctx, ErrQueueFull, wait, err, enqueue)
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
	// checks below run before the round trip, and a bad name must be
	// ErrInvalidName whatever else is wrong.
	if err := ValidateName("queue", queue); err != nil {
		return nil, err
	}
	if len(params) == 0 {
		return nil, newError(ErrEmptyBatch, "empty batch: enqueue needs at least one job")
	}
	params, endSpan := c.startEnqueueSpan(ctx, queue, params)
	defer func() { endSpan(err) }()
	n := len(params)
	batch := store.NewJobBatch(queue, n, opts == nil || !opts.DisableCreateQueue)
	// The per-job checks stay in Go although enqueue_many() makes them all
	// with the same codes: the direct statement (store.JobEnqueueDirect),
	// which most batches take, makes none of them, and having it decline
	// to enqueue_many() for them would cost the same tests on its common
	// path; and enqueue_many() checks windows, tags, metadata and payload
	// sizes (PM103) first, batch-wide, so a batch with two faults would get
	// another code. Durations under 1µs would be sent as 0 (none).
	for i, p := range params {
		switch {
		case p.Delay < 0:
			return nil, newError(ErrInvalidDelay, "job %d: delay must not be negative, got %s", i, p.Delay)
		case p.MaxAttempts < 0:
			return nil, newError(ErrInvalidMaxAttempts, "job %d: max attempts must be at least 1, got %d", i, p.MaxAttempts)
		case p.Priority < JobPriorityMin || p.Priority > JobPriorityMax:
			return nil, newError(ErrInvalidArgument, "job %d: priority must be between %d and %d, got %d", i, JobPriorityMin, JobPriorityMax, p.Priority)
		case !p.RunAt.IsZero() && p.Delay != 0:
			return nil, newError(ErrInvalidArgument, "job %d: give RunAt or Delay, not both", i)
		case len(p.Kind) > JobKindMaxBytes:
			return nil, newError(ErrInvalidArgument, "job %d: kind must be at most %d bytes, got %d", i, JobKindMaxBytes, len(p.Kind))
		case len(p.UniqueKey) > JobUniqueKeyMaxBytes:
			return nil, newError(ErrInvalidArgument, "job %d: unique key must be at most %d bytes, got %d", i, JobUniqueKeyMaxBytes, len(p.UniqueKey))
		case p.UniqueFor != 0 && (p.UniqueKey == "" || p.UniqueFor < time.Second || p.UniqueFor > durationMax):
			return nil, newError(ErrInvalidArgument, "job %d: a uniqueness window needs a unique key and lasts from 1s to %s, got %s", i, durationMax, p.UniqueFor)
		case p.Timeout < 0 || (p.Timeout > 0 && p.Timeout < time.Microsecond) || p.Timeout > durationMax:
			return nil, newError(ErrInvalidArgument, "job %d: timeout must be from 1µs to %s (0: the queue's), got %s", i, durationMax, p.Timeout)
		}
		if !p.RunAt.IsZero() {
			// A time pgx can send and PostgreSQL hold (enqueue_many()
			// refuses the other years outside 0001..9999, PM004, too).
			if err := checkTime(fmt.Sprintf("job %d: run at", i), p.RunAt); err != nil {
				return nil, err
			}
		}
		tags, err := jobTagsJSON(i, p.Tags)
		if err != nil {
			return nil, err
		}
		md, err := jobDocument(fmt.Sprintf("%d metadata", i), p.Metadata)
		if err != nil {
			return nil, err
		}
		if md != nil && !bytes.HasPrefix(bytes.TrimSpace(md), []byte("{")) {
			return nil, newError(ErrInvalidArgument, "job %d: metadata must be a JSON object", i)
		}
		batch.Set(i, &store.JobParams{Payload: p.Payload, Kind: p.Kind, Priority: p.Priority, RunAt: p.RunAt, Delay: p.Delay,
			MaxAttempts: p.MaxAttempts, UniqueKey: p.UniqueKey, UniqueFor: p.UniqueFor, Timeout: p.Timeout, Tags: tags, Metadata: md})
	}
	out := make([]*EnqueueResult, n)
	if err := c.store.JobEnqueueMany(ctx, exec, &batch, func(i int, r store.JobEnqueued) {
		out[i] = &EnqueueResult{ID: r.ID, Duplicate: r.Duplicate, State: JobState(r.State), RunAt: r.RunAt}
	}); err != nil {
		return nil, err
	}
	return out, nil
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
	return c.claimJobs(ctx, c.pool, queue, opts, true)
}

// ClaimJobsTx is ClaimJobs on exec. Inside a transaction the claim is only
// visible once it commits; other claimers skip the jobs meanwhile.
func (c *Client) ClaimJobsTx(ctx context.Context, exec DBTX, queue string, opts *ClaimJobsOpts) ([]*Job, error) {
	return c.claimJobs(ctx, exec, queue, opts, false)
}

// claimJobs claims on exec. async (only for a claim that is its own
// transaction) lets the claim commit without waiting for its WAL flush:
// a claim lost in a crash is claimed again, which at-least-once allows.
func (c *Client) claimJobs(ctx context.Context, exec DBTX, queue string, opts *ClaimJobsOpts, async bool) ([]*Job, error) {
	o := ClaimJobsOpts{}
	if opts != nil {
		o = *opts
	}
	if o.Max == 0 {
		o.Max = JobClaimMaxDefault
	}
	// job_claim() refuses a max under 1, a lease that is not positive (one
	// under 1µs is sent as 0) or over 366 days and a max bytes under 1
	// (PM004), before it looks the queue up. The direct statement covers
	// claims on the client's pool without a byte cap (the worker's), and a
	// max and lease job_claim() accepts (it does not check them);
	// job_claim() answers the rest.
	direct := exec == DBTX(c.pool) && o.MaxBytes == 0 && o.Max >= 1 &&
		(o.Lease == 0 || (o.Lease.Microseconds() > 0 && o.Lease <= durationMax))
	now := time.Now()
	if direct {
		jobs, ok, err := c.claimJobsDirect(ctx, queue, &o, async)
		if err != nil {
			return nil, err
		}
		if ok {
			return jobs, nil
		}
	}
	var out []*Job
	err := c.store.JobClaim(ctx, exec, store.JobClaimParams{Queue: queue, Max: o.Max, Lease: o.Lease, Worker: o.Worker,
		MaxBytes: o.MaxBytes, Async: async}, func(i, n int, j *Job) error {
		if out == nil {
			out = make([]*Job, n)
		}
		out[i] = j
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []*Job{}
	}
	if direct {
		st := c.jobClaimState(queue, true)
		st.claimed(out, true, now)
		if len(out) < o.Max {
			c.checkLimited(ctx, queue, st, now)
		}
	}
	return out, nil
}

// checkLimited learns, at most once per jobClaimLimitedFor, whether a
// queue whose job_claim() call returned fewer jobs than asked is limited:
// the direct statement says so itself, but a queue's first claims go
// through job_claim(), and a Worker needs to know (it claims again when a
// handler frees a slot of a limited queue; see fetch in internal/worker).
func (c *Client) checkLimited(ctx context.Context, queue string, st *jobClaimState, now time.Time) {
	st.mu.Lock()
	fresh := now.Sub(st.limitChecked) < jobClaimLimitedFor || now.Sub(st.limited) < jobClaimLimitedFor
	if !fresh {
		st.limitChecked = now
	}
	st.mu.Unlock()
	if fresh {
		return
	}
	if limited, err := c.store.QueueLimited(ctx, c.pool, queue); err != nil || !limited {
		return
	}
	st.mu.Lock()
	st.limited = now
	st.mu.Unlock()
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
	if _, err := jobDocument("result", job.Result); err != nil {
		return err
	}
	return c.store.JobComplete(ctx, exec, job.ID, job.LeaseToken, job.Result)
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
	return c.completeMany(ctx, exec, jobs)
}

// completeMany archives jobs with their results: with the direct statement
// when none has one, else with job_complete_many(), which checks them.
func (c *Client) completeMany(ctx context.Context, exec DBTX, jobs []*Job) (*CompleteManyResult, error) {
	res := &CompleteManyResult{}
	if len(jobs) == 0 {
		return res, nil
	}
	ids, tokens := make([]int64, len(jobs)), make([]int64, len(jobs))
	var results [][]byte
	for i, j := range jobs {
		ids[i], tokens[i] = j.ID, j.LeaseToken
		if j.Result != nil {
			if _, err := jobDocument("result", j.Result); err != nil {
				return nil, fmt.Errorf("job %d: %w", j.ID, err)
			}
			if results == nil {
				results = make([][]byte, len(jobs))
			}
			results[i] = j.Result
		}
	}
	done, err := c.store.JobCompleteMany(ctx, exec, ids, tokens, results)
	if err != nil {
		return nil, err
	}
	res.Completed = done
	if len(done) < len(ids) {
		slices.Sort(done)
		for _, id := range ids {
			if _, ok := slices.BinarySearch(done, id); !ok {
				res.NotHeld = append(res.NotHeld, id)
			}
		}
	}
	return res, nil
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
	// job_fail() refuses a negative delay too (PM104); Go keeps the check
	// because one under 1µs would be sent as 0, a valid delay.
	if o.RetryIn < 0 {
		return nil, newError(ErrInvalidDelay, "retry delay must not be negative, got %s", o.RetryIn)
	}
	msg := "unknown error"
	if jobErr != nil {
		msg = jobErr.Error()
	}
	state, runAt, err := c.store.JobFail(ctx, exec, job.ID, job.LeaseToken, msg, o.RetryIn, o.Dead)
	if err != nil {
		return nil, err
	}
	return &FailResult{State: JobState(state), RunAt: runAt}, nil
}

// Snooze puts a held job back to wait delay (0: claimable at once, which
// releases it) without counting the attempt, and returns its new RunAt. It
// fails with ErrJobNotHeld or ErrInvalidDelay.
func (c *Client) Snooze(ctx context.Context, job *Job, delay time.Duration) (time.Time, error) {
	return c.SnoozeTx(ctx, c.pool, job, delay)
}

// SnoozeTx is Snooze on exec.
func (c *Client) SnoozeTx(ctx context.Context, exec DBTX, job *Job, delay time.Duration) (time.Time, error) {
	// As in FailTx: a negative delay under 1µs would be sent as 0.
	if delay < 0 {
		return time.Time{}, newError(ErrInvalidDelay, "snooze delay must not be negative, got %s", delay)
	}
	return c.store.JobSnooze(ctx, exec, job.ID, job.LeaseToken, delay)
}

// ExtendJob pushes a held job's lease to lease from now (database clock;
// 0: the queue's Lease), a heartbeat for long jobs. It fails with
// ErrJobNotHeld.
func (c *Client) ExtendJob(ctx context.Context, job *Job, lease time.Duration) error {
	return c.ExtendJobTx(ctx, c.pool, job, lease)
}

// ExtendJobTx is ExtendJob on exec.
func (c *Client) ExtendJobTx(ctx context.Context, exec DBTX, job *Job, lease time.Duration) error {
	// job_extend() refuses a negative lease (PM004) before it looks the
	// job up; one under 1µs is sent as 0 seconds, which it refuses too (0
	// itself is sent as NULL: the queue's lease).
	exp, err := c.store.JobExtend(ctx, exec, job.ID, job.LeaseToken, lease)
	if err != nil {
		return err
	}
	job.LeaseExpiresAt = exp
	return nil
}

// CancelJob archives a job (status cancelled) whatever its state; a worker
// running it then gets ErrJobNotHeld when it finishes. It returns false if
// the job had already finished, and fails with ErrUnknownJob.
func (c *Client) CancelJob(ctx context.Context, id int64) (bool, error) {
	return c.CancelJobTx(ctx, c.pool, id)
}

// CancelJobTx is CancelJob on exec.
func (c *Client) CancelJobTx(ctx context.Context, exec DBTX, id int64) (bool, error) {
	return c.store.JobCancel(ctx, exec, id)
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
	return c.store.JobRetry(ctx, exec, id)
}

// GetJob returns a job wherever it is: live or archived. It fails with
// ErrUnknownJob.
func (c *Client) GetJob(ctx context.Context, id int64) (*Job, error) {
	return c.store.JobGet(ctx, c.pool, id)
}
