package queue

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/jobdoc"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// SetProgress records progress (encoded as JSON; nil clears it) for a
// job the caller holds, and sets job.Progress once stored.
func (q *Queues) SetProgress(ctx context.Context, job *pgmsgtype.Job, progress any) error {
	b, err := jobdoc.Encode("progress", progress)
	if err != nil {
		return err
	}
	if err := q.store.JobProgress(ctx, q.pool, job.ID, job.LeaseToken, b); err != nil {
		return err
	}
	job.Progress = b
	return nil
}

// Complete archives a held job with its result, on exec.
func (q *Queues) Complete(ctx context.Context, exec store.DBTX, job *pgmsgtype.Job) error {
	if _, err := jobdoc.Encode("result", job.Result); err != nil {
		return err
	}
	return q.store.JobComplete(ctx, exec, job.ID, job.LeaseToken, job.Result)
}

// CompleteMany archives jobs with their results on exec, and with what
// their attempts logged (logs, by position; nil: none logged): with the
// direct statement when none has a result or a log, else with
// job_complete_many(), which checks them. It returns the ids archived and
// those no longer held (left as they are).
func (q *Queues) CompleteMany(ctx context.Context, exec store.DBTX, jobs []*pgmsgtype.Job, logs []string) (completed, notHeld []int64, err error) {
	if len(jobs) == 0 {
		return nil, nil, nil
	}
	ids, tokens := make([]int64, len(jobs)), make([]int64, len(jobs))
	var results [][]byte
	for i, j := range jobs {
		ids[i], tokens[i] = j.ID, j.LeaseToken
		if j.Result != nil {
			if _, err := jobdoc.Encode("result", j.Result); err != nil {
				return nil, nil, fmt.Errorf("job %d: %w", j.ID, err)
			}
			if results == nil {
				results = make([][]byte, len(jobs))
			}
			results[i] = j.Result
		}
	}
	done, err := q.store.JobCompleteMany(ctx, exec, ids, tokens, results, logs)
	if err != nil {
		return nil, nil, err
	}
	if len(done) < len(ids) {
		slices.Sort(done)
		for _, id := range ids {
			if _, ok := slices.BinarySearch(done, id); !ok {
				notHeld = append(notHeld, id)
			}
		}
	}
	return done, notHeld, nil
}

// Fail records msg as the error of the held attempt of job on exec and
// schedules a retry after retryIn (0: the queue's backoff), or sends the
// job to the dead-letter state (dead, or out of attempts). It returns the
// job's new state and, for a retry, its run time. log ("": none) is kept
// as what the attempt logged.
func (q *Queues) Fail(ctx context.Context, exec store.DBTX, job *pgmsgtype.Job, jobErr error, retryIn time.Duration, dead bool, log string) (pgmsgtype.JobState, time.Time, error) {
	// job_fail() refuses a negative delay too (PM104); Go keeps the check
	// because one under 1µs would be sent as 0, a valid delay.
	if retryIn < 0 {
		return "", time.Time{}, errs.New(errs.InvalidDelay, "retry delay must not be negative, got %s", retryIn)
	}
	msg := "unknown error"
	if jobErr != nil {
		msg = jobErr.Error()
	}
	state, runAt, err := q.store.JobFail(ctx, exec, job.ID, job.LeaseToken, msg, retryIn, dead, log)
	if err != nil {
		return "", time.Time{}, err
	}
	return pgmsgtype.JobState(state), runAt, nil
}

// Snooze puts a held job back to wait delay, on exec, without counting
// the attempt, keeping log ("": none) as what the attempt logged, and
// returns its new run time.
func (q *Queues) Snooze(ctx context.Context, exec store.DBTX, job *pgmsgtype.Job, delay time.Duration, log string) (time.Time, error) {
	// As in Fail: a negative delay under 1µs would be sent as 0.
	if delay < 0 {
		return time.Time{}, errs.New(errs.InvalidDelay, "snooze delay must not be negative, got %s", delay)
	}
	return q.store.JobSnooze(ctx, exec, job.ID, job.LeaseToken, delay, log)
}

// Extend pushes a held job's lease to lease from now (0: the queue's) on
// exec, and sets job.LeaseExpiresAt.
func (q *Queues) Extend(ctx context.Context, exec store.DBTX, job *pgmsgtype.Job, lease time.Duration) error {
	// job_extend() refuses a negative lease (PM004) before it looks the
	// job up; one under 1µs is sent as 0 seconds, which it refuses too (0
	// itself is sent as NULL: the queue's lease).
	exp, err := q.store.JobExtend(ctx, exec, job.ID, job.LeaseToken, lease)
	if err != nil {
		return err
	}
	job.LeaseExpiresAt = exp
	return nil
}

// ExtendLeases extends, on the pool, the leases of the jobs held under
// tokens (ids and tokens pairwise) to lease from now (0: the queue's),
// and returns the ids it extended: a Worker's heartbeat.
func (q *Queues) ExtendLeases(ctx context.Context, ids, tokens []int64, lease time.Duration) ([]int64, error) {
	rows, err := q.store.JobExtendMany(ctx, q.pool, ids, tokens, lease)
	if err != nil {
		return nil, err
	}
	kept := make([]int64, len(rows))
	for i, r := range rows {
		kept[i] = r.ID
	}
	return kept, nil
}

// Cancel archives job id as cancelled, on exec; false if it had finished.
func (q *Queues) Cancel(ctx context.Context, exec store.DBTX, id int64) (bool, error) {
	return q.store.JobCancel(ctx, exec, id)
}

// Retry makes a scheduled or retrying job claimable now, on exec.
func (q *Queues) Retry(ctx context.Context, exec store.DBTX, id int64) error {
	return q.store.JobRetry(ctx, exec, id)
}

// Get returns a job wherever it is: live or archived.
func (q *Queues) Get(ctx context.Context, id int64) (*pgmsgtype.Job, error) {
	return q.store.JobGet(ctx, q.pool, id)
}

// WorkflowGet returns at most limit jobs of the workflow of job id.
func (q *Queues) WorkflowGet(ctx context.Context, id int64, limit int) ([]store.WorkflowJob, error) {
	return q.store.WorkflowGet(ctx, q.pool, id, limit)
}

// Logs returns what job id's handlers logged, per attempt.
func (q *Queues) Logs(ctx context.Context, id int64) ([]pgmsgtype.JobLog, error) {
	return q.store.JobLogs(ctx, q.pool, id)
}

// Steps returns the steps job id recorded.
func (q *Queues) Steps(ctx context.Context, id int64) ([]pgmsgtype.JobStep, error) {
	return q.store.JobSteps(ctx, q.pool, id)
}

// SaveStep records step name of a held job as completed with output
// (JSON; nil: none), on the pool.
func (q *Queues) SaveStep(ctx context.Context, job *pgmsgtype.Job, name string, output []byte) error {
	return q.store.JobStepSave(ctx, q.pool, job.ID, job.LeaseToken, name, output)
}
