package store

import (
	"context"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// JobLogs returns what a job's handlers logged, one entry per attempt that
// logged something, oldest first (errs.UnknownJob).
func (s *Store) JobLogs(ctx context.Context, exec DBTX, id int64) ([]pgmsgtype.JobLog, error) {
	rows, err := s.q.JobLogs(ctx, s.DB(exec), id)
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]pgmsgtype.JobLog, len(rows))
	for i, r := range rows {
		out[i] = pgmsgtype.JobLog{Attempt: int(r.Attempt), At: r.At.Time, Outcome: r.Outcome, Log: r.Log}
	}
	return out, nil
}

// JobSteps returns the steps a job recorded, in the order they completed
// (errs.UnknownJob).
func (s *Store) JobSteps(ctx context.Context, exec DBTX, id int64) ([]pgmsgtype.JobStep, error) {
	rows, err := s.q.JobSteps(ctx, s.DB(exec), id)
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]pgmsgtype.JobStep, len(rows))
	for i, r := range rows {
		out[i] = pgmsgtype.JobStep{Name: r.Name, Attempt: int(r.Attempt), At: r.At.Time, Output: r.Output}
	}
	return out, nil
}

// JobStepSave records that step name of the job held under token
// completed with output (JSON; nil: none): errs.JobNotHeld,
// errs.InvalidStepName, errs.StepTooLarge.
func (s *Store) JobStepSave(ctx context.Context, exec DBTX, id, token int64, name string, output []byte) error {
	return errs.Map(s.q.JobStepSave(ctx, s.DB(exec), dbsqlc.JobStepSaveParams{ID: id, LeaseToken: token, Name: name,
		Output: output}))
}
