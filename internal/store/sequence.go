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
