package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
)

// Sequence is one row of sequence_list(): a sequence of a queue with live
// jobs or held. HeadID 0 and HeadState "": no job waits to run or runs
// (the sequence is held). HeldJobID 0: not held.
type Sequence struct {
	Key        string
	HeadID     int64
	HeadState  string
	Pending    int64
	HeldJobID  int64
	HeldAt     time.Time
	HeldReason string
}

// SequenceResume resumes a held sequence of queue: its next pending job
// runs. It returns false when the sequence was not held
// (errs.UnknownQueue, errs.InvalidArgument for a key that is not 1 to 200
// bytes).
func (s *Store) SequenceResume(ctx context.Context, exec DBTX, queue, key string) (bool, error) {
	ok, err := s.q.SequenceResume(ctx, s.DB(exec), dbsqlc.SequenceResumeParams{Queue: queue, SequenceKey: key})
	return ok, errs.Map(err)
}

// sequenceListSQL is sequence_list() (the schema rewritten by Store.SQL).
const sequenceListSQL = `SELECT s.sequence_key, s.head_id, s.head_state, s.pending, s.held_job_id, s.held_at, s.held_reason
  FROM pgmsg.sequence_list($1::text, $2::boolean, $3::integer, $4::text) s`

// SequenceList lists at most limit sequences of queue (held ones only if
// heldOnly) with keys after afterKey ("": from the first), by key.
func (s *Store) SequenceList(ctx context.Context, exec DBTX, queue string, heldOnly bool, limit int, afterKey string) ([]Sequence, error) {
	rows, err := exec.Query(ctx, s.SQL(sequenceListSQL), queue, heldOnly, limit32(limit), optText(afterKey))
	if err != nil {
		return nil, errs.Map(err)
	}
	defer rows.Close()
	var out []Sequence
	for rows.Next() {
		var q Sequence
		var head, held pgtype.Int8
		var headState, reason pgtype.Text
		var heldAt pgtype.Timestamptz
		if err := rows.Scan(&q.Key, &head, &headState, &q.Pending, &held, &heldAt, &reason); err != nil {
			return nil, errs.Map(err)
		}
		q.HeadID, q.HeadState, q.HeldJobID, q.HeldAt, q.HeldReason = head.Int64, headState.String, held.Int64, heldAt.Time, reason.String
		out = append(out, q)
	}
	return out, errs.Map(rows.Err())
}

// SequenceJob is one job of a sequence, as SequenceJobs returns it.
type SequenceJob struct {
	ID                      int64
	State                   string
	AttemptedAt, FinishedAt *time.Time
}

// SequenceJobsResult is one sequence's jobs: its head (running or next to
// run), its first pending jobs in order and how many are pending, the
// job whose failure holds it, and the last one that left it (among the
// queue's SequenceRecentArchived most recent archived jobs).
type SequenceJobsResult struct {
	Head, Held, Last *SequenceJob
	HeldReason       string
	Pending          []SequenceJob
	PendingTotal     int64
}

// SequenceRecentArchived bounds the look for a sequence's last finished
// job: the archive has no index by sequence, so SequenceJobs reads at
// most this many of the queue's newest archived jobs (by its (queue_id, id)
// index).
const (
	SequenceRecentArchived    = 1000
	sequenceRecentArchivedSQL = "1000"
)

// sequenceJobsSQL reads a sequence's jobs through the sequence indexes
// (job_sequence_head, job_sequence_pending), its hold, and its last
// archived job among the queue's newest ones. part: 'h' head, 'p'
// pending, 'x' the held job, 'a' the last archived one.
const sequenceJobsSQL = `WITH q AS (SELECT queue_id FROM pgmsg.queue WHERE name = $1::text)
(SELECT 'h', j.id, j.state, j.attempted_at, NULL::timestamptz, NULL::text FROM pgmsg.job j, q
  WHERE j.queue_id = q.queue_id AND j.sequence_key = $2::text
    AND j.state IN ('available', 'scheduled', 'retrying', 'running'))
UNION ALL
(SELECT 'p', j.id, j.state, NULL::timestamptz, NULL::timestamptz, NULL::text FROM pgmsg.job j, q
  WHERE j.queue_id = q.queue_id AND j.sequence_key = $2::text AND j.state = 'pending'
  ORDER BY j.id LIMIT $3::integer)
UNION ALL
(SELECT 'x', s.held_job_id, coalesce(j.state, a.status, s.held_reason), coalesce(j.attempted_at, a.attempted_at),
        coalesce(j.finalized_at, a.finished_at), s.held_reason
   FROM pgmsg.job_sequence s JOIN q ON q.queue_id = s.queue_id
   LEFT JOIN pgmsg.job j ON j.id = s.held_job_id LEFT JOIN pgmsg.job_archive a ON a.id = s.held_job_id
  WHERE s.sequence_key = $2::text)
UNION ALL
(SELECT 'a', r.id, r.status, r.attempted_at, r.finished_at, NULL::text FROM
   (SELECT a.id, a.status, a.attempted_at, a.finished_at, a.sequence_key FROM pgmsg.job_archive a, q
     WHERE a.queue_id = q.queue_id ORDER BY a.id DESC LIMIT ` + sequenceRecentArchivedSQL + `) r
  WHERE r.sequence_key = $2::text ORDER BY r.id DESC LIMIT 1)`

// SequenceJobs returns the jobs of queue's sequence key, at most limit
// pending ones (errs.UnknownQueue).
func (s *Store) SequenceJobs(ctx context.Context, exec DBTX, queue, key string, limit int) (*SequenceJobsResult, error) {
	var known bool
	if err := exec.QueryRow(ctx, s.SQL(`SELECT EXISTS (SELECT 1 FROM pgmsg.queue WHERE name = $1::text)`), queue).Scan(&known); err != nil {
		return nil, errs.Map(err)
	}
	if !known {
		return nil, errs.New(errs.UnknownQueue, "unknown queue %q", queue)
	}
	out := &SequenceJobsResult{}
	if err := exec.QueryRow(ctx, s.SQL(`SELECT pg_catalog.count(*) FROM pgmsg.job j JOIN pgmsg.queue q ON q.queue_id = j.queue_id
	  WHERE q.name = $1::text AND j.sequence_key = $2::text AND j.state = 'pending'`), queue, key).Scan(&out.PendingTotal); err != nil {
		return nil, errs.Map(err)
	}
	rows, err := exec.Query(ctx, s.SQL(sequenceJobsSQL), queue, key, limit32(limit))
	if err != nil {
		return nil, errs.Map(err)
	}
	defer rows.Close()
	for rows.Next() {
		var part string
		var j SequenceJob
		var attempted, finished pgtype.Timestamptz
		var reason pgtype.Text
		if err := rows.Scan(&part, &j.ID, &j.State, &attempted, &finished, &reason); err != nil {
			return nil, errs.Map(err)
		}
		j.AttemptedAt, j.FinishedAt = timePtr(attempted), timePtr(finished)
		switch part {
		case "h":
			out.Head = &j
		case "p":
			out.Pending = append(out.Pending, j)
		case "x":
			out.Held, out.HeldReason = &j, reason.String
		case "a":
			out.Last = &j
		}
	}
	return out, errs.Map(rows.Err())
}
