package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
)

// PeriodicParams define a periodic job for PeriodicAdd. A nil Payload is
// stored empty; "" Kind, 0 MaxAttempts and Timeout (the queue's) and nil
// Tags (a JSON array) and Metadata (a JSON object) are none.
type PeriodicParams struct {
	Queue, Name, Schedule, TimeZone string
	Payload                         []byte
	Kind                            string
	Priority                        int
	MaxAttempts                     int
	Timeout                         time.Duration
	Tags, Metadata                  []byte
	RunOnStart                      bool
}

// Periodic is a periodic job as the SQL API returns it (pgmsg.PeriodicJob
// has the same fields): 0 MaxAttempts and Timeout are the queue's, the
// zero LastRunAt none.
type Periodic struct {
	Queue, Name, Schedule, TimeZone string
	Payload                         []byte
	Kind                            string
	Priority                        int
	MaxAttempts                     int
	Timeout                         time.Duration
	Tags                            []string
	Metadata                        []byte
	RunOnStart                      bool
	DefinedAt, NextRunAt, LastRunAt time.Time
	LastJobID                       int64
	LastError                       string
}

func periodicFromRow(r *dbsqlc.PeriodicListRow) *Periodic {
	return &Periodic{
		Queue: r.Queue, Name: r.Name, Schedule: r.Schedule, TimeZone: r.TimeZone, Payload: r.Payload, Kind: r.Kind,
		Priority: int(r.Priority), MaxAttempts: int(r.MaxAttempts), Timeout: micros(r.TimeoutUs),
		Tags: r.Tags, Metadata: r.Metadata, RunOnStart: r.RunOnStart, DefinedAt: r.DefinedAt.Time, NextRunAt: r.NextRunAt.Time,
		LastRunAt: r.LastRunAt.Time, LastJobID: r.LastJobID, LastError: r.LastError,
	}
}

// PeriodicAdd adds a periodic job, or replaces the one of the same name,
// and returns it as stored. It fails with errs.UnknownQueue,
// errs.InvalidSchedule, errs.PayloadTooLarge ...
func (s *Store) PeriodicAdd(ctx context.Context, exec DBTX, p *PeriodicParams) (*Periodic, error) {
	payload := p.Payload
	if payload == nil {
		payload = []byte{}
	}
	row, err := s.q.PeriodicAdd(ctx, s.DB(exec), dbsqlc.PeriodicAddParams{
		Queue: p.Queue, Name: p.Name, Schedule: p.Schedule, Payload: payload, Kind: optText(p.Kind),
		TimeZone: p.TimeZone, Priority: int32(p.Priority), MaxAttempts: optInt4(p.MaxAttempts),
		Timeout: optInterval(p.Timeout), Tags: p.Tags, Metadata: p.Metadata, RunOnStart: p.RunOnStart,
	})
	if err != nil {
		return nil, errs.Map(err)
	}
	return periodicFromRow((*dbsqlc.PeriodicListRow)(row)), nil
}

// PeriodicRemove deletes a queue's periodic job (errs.UnknownQueue,
// errs.UnknownPeriodicJob).
func (s *Store) PeriodicRemove(ctx context.Context, exec DBTX, queue, name string) error {
	return errs.Map(s.q.PeriodicRemove(ctx, s.DB(exec), dbsqlc.PeriodicRemoveParams{Queue: queue, Name: name}))
}

// PeriodicList returns the periodic jobs of queue ("": of every queue), by
// queue and name (errs.UnknownQueue).
func (s *Store) PeriodicList(ctx context.Context, exec DBTX, queue string) ([]*Periodic, error) {
	rows, err := s.q.PeriodicList(ctx, s.DB(exec), optText(queue))
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]*Periodic, len(rows))
	for i, r := range rows {
		out[i] = periodicFromRow(r)
	}
	return out, nil
}

// PeriodicPreview returns the next n ticks of schedule in timeZone after
// after (errs.InvalidSchedule).
func (s *Store) PeriodicPreview(ctx context.Context, exec DBTX, schedule, timeZone string, after time.Time, n int32) ([]time.Time, error) {
	ts, err := s.q.PeriodicPreview(ctx, s.DB(exec), dbsqlc.PeriodicPreviewParams{
		Schedule: schedule, TimeZone: timeZone, After: pgtype.Timestamptz{Time: after, Valid: true}, Count: n})
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]time.Time, len(ts))
	for i, t := range ts {
		out[i] = t.Time
	}
	return out, nil
}

// PeriodicTick is one periodic job handled by PeriodicEnqueueDue (JobID 0
// when Error says why its tick was not enqueued).
type PeriodicTick struct {
	Queue, Name string
	Tick        time.Time
	JobID       int64
	Duplicate   bool
	NextRunAt   time.Time
	Error       string
}

// PeriodicEnqueueDue enqueues the due ticks of at most maxJobs periodic
// jobs and returns what it did.
func (s *Store) PeriodicEnqueueDue(ctx context.Context, exec DBTX, maxJobs int32) ([]PeriodicTick, error) {
	rows, err := s.q.PeriodicEnqueueDue(ctx, s.DB(exec), maxJobs)
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]PeriodicTick, len(rows))
	for i, r := range rows {
		out[i] = PeriodicTick{Queue: r.Queue, Name: r.Name, Tick: r.Tick.Time, JobID: r.JobID, Duplicate: r.Duplicate,
			NextRunAt: r.NextRunAt.Time, Error: r.Error}
	}
	return out, nil
}
