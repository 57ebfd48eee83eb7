package queue

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/jobdoc"
	"github.com/pgmsg/pgmsg/internal/store"
)

// PeriodicSpec is a periodic job's definition (the fields of
// pgmsg.PeriodicJob that AddPeriodicJob reads).
type PeriodicSpec struct {
	// Queue and Name identify it; Schedule and TimeZone ("": UTC) say
	// when it ticks.
	Queue, Name, Schedule, TimeZone string
	// The job each tick enqueues (as in pgmsgtype.EnqueueParams).
	Payload     []byte
	Kind        string
	Priority    int
	MaxAttempts int
	Timeout     time.Duration
	Tags        []string
	Metadata    json.RawMessage
	// RunOnStart enqueues a job on the leader's next pass.
	RunOnStart bool
}

// AddPeriodic adds p to its queue, or replaces the periodic job of the
// same name, and returns it as stored.
func (q *Queues) AddPeriodic(ctx context.Context, p PeriodicSpec) (*store.Periodic, error) {
	// The names stay checked in Go (periodic_add() checks them too): the
	// checks of the job's Go values below run before the round trip, and a
	// bad name must be ErrInvalidName whatever else is wrong.
	if err := q.cfg.ValidateName("queue", p.Queue); err != nil {
		return nil, err
	}
	if err := q.cfg.ValidateName("periodic job", p.Name); err != nil {
		return nil, err
	}
	if p.TimeZone == "" {
		p.TimeZone = "UTC"
	}
	// The job's checks stay in Go although periodic_add() makes them too
	// (through enqueue_many()): it makes them after it looks the queue up
	// (PM101) and checks the time zone (PM112), so a bad priority with an
	// unknown queue or a bad time zone would get another code. A timeout
	// under 1µs would be sent as 0 (the queue's).
	durationMax := q.cfg.DurationMax
	switch {
	case p.Priority < PriorityMin || p.Priority > PriorityMax:
		return nil, errs.New(errs.InvalidArgument, "priority must be between %d and %d, got %d", PriorityMin, PriorityMax, p.Priority)
	case p.MaxAttempts < 0 || p.MaxAttempts > 1<<30:
		return nil, errs.New(errs.InvalidMaxAttempts, "max attempts must be from 1 to %d (0: the queue's), got %d", 1<<30, p.MaxAttempts)
	case p.Timeout < 0 || (p.Timeout > 0 && p.Timeout < time.Microsecond) || p.Timeout > durationMax:
		return nil, errs.New(errs.InvalidArgument, "timeout must be from 1µs to %s (0: the queue's), got %s", durationMax, p.Timeout)
	}
	tags, err := TagsJSON(0, p.Tags)
	if err != nil {
		return nil, err
	}
	md, err := jobdoc.Encode("metadata", p.Metadata)
	if err != nil {
		return nil, err
	}
	return q.store.PeriodicAdd(ctx, q.pool, &store.PeriodicParams{
		Queue: p.Queue, Name: p.Name, Schedule: p.Schedule, Payload: p.Payload, Kind: p.Kind,
		TimeZone: p.TimeZone, Priority: p.Priority, MaxAttempts: p.MaxAttempts,
		Timeout: p.Timeout, Tags: tags, Metadata: md, RunOnStart: p.RunOnStart,
	})
}

// RemovePeriodic deletes a queue's periodic job (the caller has checked
// that the names can be sent).
func (q *Queues) RemovePeriodic(ctx context.Context, queue, name string) error {
	return q.store.PeriodicRemove(ctx, q.pool, queue, name)
}

// ListPeriodic returns the periodic jobs of queue ("": of every queue).
func (q *Queues) ListPeriodic(ctx context.Context, queue string) ([]*store.Periodic, error) {
	return q.store.PeriodicList(ctx, q.pool, queue)
}

// PreviewSchedule returns the next n ticks of schedule in timeZone ("":
// UTC) after after.
func (q *Queues) PreviewSchedule(ctx context.Context, schedule, timeZone string, after time.Time, n int32) ([]time.Time, error) {
	// periodic_preview() refuses a count outside 1..1000 (PM004) before
	// anything else. Go checks only the time, which pgx must be able to
	// send and PostgreSQL hold.
	if err := q.cfg.CheckTime("after", after); err != nil {
		return nil, err
	}
	if timeZone == "" {
		timeZone = "UTC"
	}
	return q.store.PeriodicPreview(ctx, q.pool, schedule, timeZone, after, n)
}

// EnqueueDuePeriodic enqueues every due tick of the periodic jobs (up to
// 1000 per call) and returns what it did, logging the ticks that could
// not be enqueued (they stay due).
func (q *Queues) EnqueueDuePeriodic(ctx context.Context) ([]store.PeriodicTick, error) {
	rows, err := q.store.PeriodicEnqueueDue(ctx, q.pool, 1000)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if r.Error != "" {
			q.cfg.Logger.Warn("pgmsg: a periodic job's tick could not be enqueued; it stays due",
				"queue", r.Queue, "periodic_job", r.Name, "tick", r.Tick, "error", r.Error)
		}
	}
	return rows, nil
}
