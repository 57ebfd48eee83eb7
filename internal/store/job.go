package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Job is a job as the statements return it (the public pgmsgtype.Job):
// claimed (JobClaim, JobClaimDirect: State "running", Worker the claim's,
// no FinishedAt, Progress, Result, Tags or Metadata) or read (JobGet,
// JobList, DeadList). Each is the caller's to keep.
type Job = pgmsgtype.Job

// jobErrors decodes a job's error history, the JSON array of its failed
// attempts (nil: none).
func jobErrors(raw []byte) ([]pgmsgtype.JobError, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var out []pgmsgtype.JobError
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("pgmsg: decode job errors: %w", err)
	}
	return out, nil
}

// jobFromGetRow is a job as JobGet, JobList and DeadList return it (one
// shape: their rows convert to JobListRow).
func jobFromGetRow(r *dbsqlc.JobListRow) (*Job, error) {
	history, err := jobErrors(r.Errors)
	if err != nil {
		return nil, err
	}
	return &Job{
		ID: r.ID, Queue: r.Queue, State: pgmsgtype.JobState(r.State), Kind: r.Kind, Payload: r.Payload,
		Priority: int(r.Priority), Attempt: int(r.Attempt), MaxAttempts: int(r.MaxAttempts),
		LeaseToken: r.LeaseToken, LeaseExpiresAt: timePtr(r.LeaseExpiresAt), RunAt: timePtr(r.RunAt),
		EnqueuedAt: r.EnqueuedAt.Time, AttemptedAt: timePtr(r.AttemptedAt), FinishedAt: timePtr(r.FinishedAt),
		Worker: r.Worker, UniqueKey: r.UniqueKey, Errors: history, Timeout: micros(r.TimeoutUs),
		Progress: r.Progress, Result: r.Result, Tags: r.Tags, Metadata: r.Metadata,
		SequenceKey: r.SequenceKey, LimitKey: r.LimitKey, BatchID: r.BatchID,
		DependsOn: r.DependsOn, DepsWaiting: int(r.DepsWaiting), WorkflowID: r.WorkflowID,
	}, nil
}

// JobGet returns a job, live or archived; errs.UnknownJob when none has
// the id.
func (s *Store) JobGet(ctx context.Context, exec DBTX, id int64) (*Job, error) {
	r, err := s.q.JobGet(ctx, s.DB(exec), id)
	if err != nil {
		return nil, errs.Map(err)
	}
	return jobFromGetRow((*dbsqlc.JobListRow)(r))
}

// WorkflowJob is one job of a workflow, as WorkflowGet returns it.
type WorkflowJob struct {
	ID, WorkflowID                      int64
	Queue, State, Kind                  string
	DependsOn                           []int64
	DepsWaiting                         int
	IgnoreCancelledDeps, IgnoreDeadDeps bool
	EnqueuedAt                          time.Time
	AttemptedAt, FinishedAt             *time.Time
}

// WorkflowGet returns at most limit jobs of the workflow of job id, by id
// (errs.UnknownJob).
func (s *Store) WorkflowGet(ctx context.Context, exec DBTX, id int64, limit int) ([]WorkflowJob, error) {
	rows, err := s.q.WorkflowGet(ctx, s.DB(exec), dbsqlc.WorkflowGetParams{ID: id, MaxJobs: limit32(limit)})
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]WorkflowJob, len(rows))
	for i, r := range rows {
		out[i] = WorkflowJob{ID: r.ID, WorkflowID: r.WorkflowID, Queue: r.Queue, State: r.State, Kind: r.Kind,
			DependsOn: r.DependsOn, DepsWaiting: int(r.DepsWaiting), IgnoreCancelledDeps: r.DepsIgnoreCancelled,
			IgnoreDeadDeps: r.DepsIgnoreDead, EnqueuedAt: r.EnqueuedAt.Time, AttemptedAt: timePtr(r.AttemptedAt),
			FinishedAt: timePtr(r.FinishedAt)}
	}
	return out, nil
}

// JobListParams filter JobList: "" State, Kind and Tag and zero Since and
// Until are none; Limit is required. Desc lists newest first, AfterID
// then bounding from above (0: from the newest).
type JobListParams struct {
	Queue            string
	State, Kind, Tag string
	Since, Until     time.Time
	Limit            int
	AfterID          int64
	Desc             bool
}

// JobList returns jobs of a queue, live and archived, in id order, or in
// reverse id order when p.Desc (errs.UnknownQueue).
func (s *Store) JobList(ctx context.Context, exec DBTX, p JobListParams) ([]*Job, error) {
	rows, err := s.q.JobList(ctx, s.DB(exec), dbsqlc.JobListParams{Queue: p.Queue, State: optText(p.State), Kind: optText(p.Kind),
		Tag: optText(p.Tag), MaxJobs: int32(p.Limit), AfterID: p.AfterID, Since: optTime(p.Since), Until: optTime(p.Until),
		SortOrder: sortOrder(p.Desc)})
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]*Job, len(rows))
	for i, r := range rows {
		if out[i], err = jobFromGetRow(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DeadList returns at most limit dead jobs of queue (of kind, unless "")
// with ids above afterID, by id.
func (s *Store) DeadList(ctx context.Context, exec DBTX, queue, kind string, limit int, afterID int64) ([]*Job, error) {
	rows, err := s.q.DeadList(ctx, s.DB(exec), dbsqlc.DeadListParams{
		Queue: queue, Kind: optText(kind), MaxJobs: limit32(limit), AfterID: afterID,
	})
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]*Job, len(rows))
	for i, r := range rows {
		if out[i], err = jobFromGetRow((*dbsqlc.JobListRow)(r)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DeadRequeue makes at most limit dead jobs of queue available again:
// those in ids, or any (of kind, unless "") when ids is empty. It returns
// how many.
func (s *Store) DeadRequeue(ctx context.Context, exec DBTX, queue string, ids []int64, kind string, limit int) (int, error) {
	n, err := s.q.DeadRequeue(ctx, s.DB(exec), dbsqlc.DeadRequeueParams{
		Queue: queue, Ids: ids, Kind: optText(kind), MaxJobs: limit32(limit),
	})
	return int(n), errs.Map(err)
}

// DeadPurge deletes at most limit dead jobs of queue: those in ids, or any
// (of kind, unless "", dead longer than olderThan, unless 0) when ids is
// empty. It returns how many.
func (s *Store) DeadPurge(ctx context.Context, exec DBTX, queue string, ids []int64, kind string, olderThan time.Duration, limit int) (int, error) {
	n, err := s.q.DeadPurge(ctx, s.DB(exec), dbsqlc.DeadPurgeParams{
		Queue: queue, Ids: ids, Kind: optText(kind), OlderThan: optInterval(olderThan), MaxJobs: limit32(limit),
	})
	return int(n), errs.Map(err)
}

// JobProgress records progress (JSON; nil clears it) for a job held under
// token (errs.JobNotHeld).
func (s *Store) JobProgress(ctx context.Context, exec DBTX, id, token int64, progress []byte) error {
	return errs.Map(s.q.JobProgress(ctx, s.DB(exec), dbsqlc.JobProgressParams{ID: id, LeaseToken: token, Progress: progress}))
}

// JobComplete archives a job held under token, with its result (JSON; nil:
// none). It fails with errs.JobNotHeld or errs.UnknownJob.
func (s *Store) JobComplete(ctx context.Context, exec DBTX, id, token int64, result []byte) error {
	return errs.Map(s.q.JobComplete(ctx, s.DB(exec), dbsqlc.JobCompleteParams{ID: id, LeaseToken: token, Result: result}))
}

// JobCompleteMany archives the jobs ids[i] still held under tokens[i], with
// results[i] (JSON; results nil: none has one) and logs[i] (what the
// attempt logged; logs nil: none logged) and returns the ids of those
// archived. Without results or logs it runs the direct statement against
// the tables, with them job_complete_many(), which checks the results and
// keeps the logs.
func (s *Store) JobCompleteMany(ctx context.Context, exec DBTX, ids, tokens []int64, results [][]byte, logs []string) ([]int64, error) {
	var (
		done []int64
		err  error
	)
	if results == nil && logs == nil {
		done, err = s.q.JobCompleteMany(ctx, s.DB(exec), dbsqlc.JobCompleteManyParams{Ids: ids, LeaseTokens: tokens})
	} else {
		done, err = s.q.JobCompleteManyResults(ctx, s.DB(exec), dbsqlc.JobCompleteManyResultsParams{Ids: ids,
			LeaseTokens: tokens, Results: results, Logs: logs})
	}
	return done, errs.Map(err)
}

// JobFail records msg as the error of the attempt held under token and
// schedules a retry after retryIn (0: the queue's backoff), or moves the
// job to dead when dead is set or it is out of attempts. It returns the
// job's new state and, for a retry, when it runs; log ("": none) is kept
// as what the attempt logged. It fails with errs.JobNotHeld or
// errs.InvalidDelay.
func (s *Store) JobFail(ctx context.Context, exec DBTX, id, token int64, msg string, retryIn time.Duration, dead bool, log string) (string, time.Time, error) {
	row, err := s.q.JobFail(ctx, s.DB(exec), dbsqlc.JobFailParams{ID: id, LeaseToken: token, Error: msg,
		RetryIn: optInterval(retryIn), Dead: dead, Log: optText(log)})
	if err != nil {
		return "", time.Time{}, errs.Map(err)
	}
	return row.State, row.RunAt.Time, nil
}

// JobSnooze puts a job held under token back to wait delay without
// counting the attempt, keeping log ("": none) as what the attempt logged,
// and returns its new run time (errs.JobNotHeld).
func (s *Store) JobSnooze(ctx context.Context, exec DBTX, id, token int64, delay time.Duration, log string) (time.Time, error) {
	at, err := s.q.JobSnooze(ctx, s.DB(exec), dbsqlc.JobSnoozeParams{ID: id, LeaseToken: token, Delay: interval(delay),
		Log: optText(log)})
	if err != nil {
		return time.Time{}, errs.Map(err)
	}
	return at.Time, nil
}

// JobExtend pushes the lease of a job held under token to lease from now
// (0: the queue's) and returns when it expires (errs.JobNotHeld).
func (s *Store) JobExtend(ctx context.Context, exec DBTX, id, token int64, lease time.Duration) (*time.Time, error) {
	exp, err := s.q.JobExtend(ctx, s.DB(exec), dbsqlc.JobExtendParams{ID: id, LeaseToken: token, Lease: optInterval(lease)})
	if err != nil {
		return nil, errs.Map(err)
	}
	return timePtr(exp), nil
}

// JobLease is a job's lease extended by JobExtendMany.
type JobLease struct {
	ID        int64
	ExpiresAt time.Time
}

// JobExtendMany extends the leases of the jobs ids[i] still held under
// tokens[i] to lease from now (0: each queue's) and returns those
// extended; the others were lost.
func (s *Store) JobExtendMany(ctx context.Context, exec DBTX, ids, tokens []int64, lease time.Duration) ([]JobLease, error) {
	rows, err := s.q.JobExtendMany(ctx, s.DB(exec), dbsqlc.JobExtendManyParams{Ids: ids, LeaseTokens: tokens, Lease: optInterval(lease)})
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]JobLease, len(rows))
	for i, r := range rows {
		out[i] = JobLease{ID: r.ID, ExpiresAt: r.LeaseExpiresAt.Time}
	}
	return out, nil
}

// JobCancel archives a job as cancelled whatever its state; false if it
// had finished already (errs.UnknownJob).
func (s *Store) JobCancel(ctx context.Context, exec DBTX, id int64) (bool, error) {
	ok, err := s.q.JobCancel(ctx, s.DB(exec), id)
	return ok, errs.Map(err)
}

// JobRetry makes a scheduled or retrying job claimable now
// (errs.JobNotWaiting, errs.UnknownJob).
func (s *Store) JobRetry(ctx context.Context, exec DBTX, id int64) error {
	_, err := s.q.JobRetry(ctx, s.DB(exec), id)
	return errs.Map(err)
}

// jobTraceSQL reads the trace context of claimed jobs.
const jobTraceSQL = `SELECT j.id, j.metadata->>'traceparent', coalesce(j.metadata->>'tracestate', '')
  FROM pgmsg.job j WHERE j.id = ANY($1::bigint[]) AND j.metadata ? 'traceparent'`

// JobTraces calls fn with the trace context (W3C traceparent and
// tracestate, "" for none) that each job of ids carries in its metadata,
// for those that carry one.
func (s *Store) JobTraces(ctx context.Context, exec DBTX, ids []int64, fn func(id int64, traceparent, tracestate string)) error {
	rows, err := exec.Query(ctx, s.SQL(jobTraceSQL), ids)
	if err != nil {
		return errs.Map(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id         int64
			parent, st string
		)
		if err := rows.Scan(&id, &parent, &st); err != nil {
			return err
		}
		fn(id, parent, st)
	}
	return errs.Map(rows.Err())
}

// sortOrder is job_list()'s p_order.
func sortOrder(desc bool) string {
	if desc {
		return "desc"
	}
	return "asc"
}

// Batch is a batch of jobs, as BatchGet returns it.
type Batch struct {
	ID                                         int64
	Queue                                      string
	Total                                      int
	CreatedAt                                  time.Time
	Pending, Available, Scheduled, Retrying    int64
	Running, Completed, Cancelled, Dead        int64
	FinishedAt                                 *time.Time
	OnComplete, OnDiscard, OnFinished          []byte
	CompleteJobID, DiscardJobID, FinishedJobID int64
}

// BatchGet returns batch id (errs.UnknownBatch).
func (s *Store) BatchGet(ctx context.Context, exec DBTX, id int64) (*Batch, error) {
	r, err := s.q.BatchGet(ctx, s.DB(exec), id)
	if err != nil {
		return nil, errs.Map(err)
	}
	return &Batch{ID: r.BatchID, Queue: r.Queue, Total: int(r.Total), CreatedAt: r.CreatedAt.Time, Pending: r.Pending,
		Available: r.Available, Scheduled: r.Scheduled, Retrying: r.Retrying, Running: r.Running, Completed: r.Completed,
		Cancelled: r.Cancelled, Dead: r.Dead, FinishedAt: timePtr(r.FinishedAt), OnComplete: r.OnComplete,
		OnDiscard: r.OnDiscard, OnFinished: r.OnFinished, CompleteJobID: r.CompleteJobID, DiscardJobID: r.DiscardJobID,
		FinishedJobID: r.FinishedJobID}, nil
}
