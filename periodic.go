package pgmsg

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pgmsg/pgmsg/internal/queue"
	"github.com/pgmsg/pgmsg/internal/store"
)

// PeriodicJob is a job enqueued on a schedule: a cron expression, a
// descriptor or a fixed interval, read in a time zone. The maintenance
// leader (RunMaintenance, which `pgmsg serve` runs) enqueues each tick
// once, whichever process leads and however often leadership changes: a
// tick and the move of NextRunAt to the next one commit together, with the
// periodic job's row locked. A tick that comes due while no leader runs is
// enqueued when one does; ticks missed over a longer outage are coalesced
// into one job (for the first of them), not replayed one by one.
//
// Each job's UniqueKey is "periodic:<name>@<tick in UTC, RFC 3339 with
// microseconds>", so ListJobs and GetJob show which tick made it.
type PeriodicJob struct {
	// Queue the jobs go to. It must exist.
	Queue string `json:"queue"`
	// Name identifies the periodic job within its queue (1-200 letters,
	// digits, ".", "_" or "-").
	Name string `json:"name"`
	// Schedule is one of:
	//   - five cron fields, minute hour day-of-month month day-of-week,
	//     each *, a value, a range a-b, a step (*/n, a-b/n) or a list of
	//     those ("*/15 * * * *", "0 9 * * MON-FRI"; names JAN..DEC and
	//     SUN..SAT; 0 and 7 are Sunday). When both day fields are
	//     restricted, a day matching either runs, as in Vixie cron;
	//   - @yearly (@annually), @monthly, @weekly, @daily (@midnight),
	//     @hourly;
	//   - @every <interval>, from 1 second to 366 days ("@every 90s",
	//     "@every 1h30m", "@every 5 minutes"): ticks at the time the
	//     definition was set, plus whole intervals.
	Schedule string `json:"schedule"`
	// TimeZone in which cron fields are read: an IANA name such as
	// "Europe/Paris". Default "UTC". A local time that a daylight-saving
	// change skips runs an hour later; one that happens twice runs once.
	TimeZone string `json:"time_zone"`
	// The job enqueued at each tick, as in EnqueueParams: MaxAttempts and
	// Timeout 0 take the queue's.
	Payload     []byte          `json:"payload"`
	Kind        string          `json:"kind,omitempty"`
	Priority    int             `json:"priority"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Timeout     time.Duration   `json:"timeout,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	// RunOnStart enqueues a job as soon as the periodic job is added (or
	// its definition changed), on the leader's next pass, then follows the
	// schedule.
	RunOnStart bool `json:"run_on_start"`

	// Set by the server (ignored by AddPeriodicJob).

	// DefinedAt is when the definition was last set.
	DefinedAt time.Time `json:"defined_at"`
	// NextRunAt is the next tick to enqueue.
	NextRunAt time.Time `json:"next_run_at"`
	// LastRunAt is the last tick enqueued (zero: none yet).
	LastRunAt time.Time `json:"last_run_at,omitempty"`
	// LastJobID is the job that tick enqueued.
	LastJobID int64 `json:"last_job_id,omitempty"`
	// LastError says why the due tick could not be enqueued (the queue was
	// full, or its MaxPayloadBytes now refuses the payload); the tick stays
	// due and is tried again on the leader's next pass. A tick whose payload
	// lacks the limit key the queue's KeyField names (ErrLimitKeyMissing)
	// is skipped instead, and the next one is due at its time.
	LastError string `json:"last_error,omitempty"`
}

// periodicEvery is how often the maintenance leader enqueues due periodic
// jobs: ticks are at least a minute apart for cron schedules, and @every
// schedules of a few seconds are served within this much of their tick.
const periodicEvery = time.Second

// AddPeriodicJob adds p to its queue, or replaces the periodic job of the
// same name, and returns it as stored (NextRunAt set). Adding a definition
// identical to the stored one changes nothing, so an application may add
// its periodic jobs at every start. It fails with ErrUnknownQueue,
// ErrInvalidSchedule (schedule or time zone), ErrInvalidName, and what
// EnqueueMany refuses in the job (ErrPayloadTooLarge, ErrInvalidArgument,
// ErrInvalidMaxAttempts); nothing is stored then.
func (c *Client) AddPeriodicJob(ctx context.Context, p PeriodicJob) (*PeriodicJob, error) {
	row, err := c.queues.AddPeriodic(ctx, queue.PeriodicSpec{
		Queue: p.Queue, Name: p.Name, Schedule: p.Schedule, TimeZone: p.TimeZone, Payload: p.Payload, Kind: p.Kind,
		Priority: p.Priority, MaxAttempts: p.MaxAttempts, Timeout: p.Timeout, Tags: p.Tags, Metadata: p.Metadata,
		RunOnStart: p.RunOnStart,
	})
	if err != nil {
		return nil, err
	}
	return periodicFromStore(row), nil
}

// RemovePeriodicJob deletes a queue's periodic job; the jobs it enqueued
// stay. It fails with ErrUnknownQueue or ErrUnknownPeriodicJob.
func (c *Client) RemovePeriodicJob(ctx context.Context, queue, name string) error {
	// periodic_remove() refuses bad names (PM003) first; Go only what
	// cannot be sent.
	if err := sendableNames("queue", queue, "periodic job", name); err != nil {
		return err
	}
	return c.queues.RemovePeriodic(ctx, queue, name)
}

// ListPeriodicJobs returns the periodic jobs of queue ("": of every
// queue), by queue and name. It fails with ErrUnknownQueue.
func (c *Client) ListPeriodicJobs(ctx context.Context, queue string) ([]*PeriodicJob, error) {
	// periodic_list() refuses a bad queue name (PM003, through _queue());
	// Go only one that cannot be sent.
	if err := sendableNames("queue", queue); err != nil {
		return nil, err
	}
	rows, err := c.queues.ListPeriodic(ctx, queue)
	if err != nil {
		return nil, err
	}
	out := make([]*PeriodicJob, len(rows))
	for i, r := range rows {
		out[i] = periodicFromStore(r)
	}
	return out, nil
}

// PreviewSchedule returns the next n ticks (1 to 1000) of schedule in
// timeZone ("": UTC) after after, as a periodic job would run them. It
// fails with ErrInvalidSchedule.
func (c *Client) PreviewSchedule(ctx context.Context, schedule, timeZone string, after time.Time, n int) ([]time.Time, error) {
	// n is sent capped, not wrapped (limit32), for periodic_preview() to
	// refuse a count outside 1..1000 (PM004).
	return c.queues.PreviewSchedule(ctx, schedule, timeZone, after, limit32(n))
}

// PeriodicTick is one periodic job handled by EnqueueDuePeriodicJobs.
type PeriodicTick struct {
	Queue string    `json:"queue"`
	Name  string    `json:"name"`
	Tick  time.Time `json:"tick"`
	// JobID is the job enqueued for the tick (0 when Error is set).
	JobID int64 `json:"job_id,omitempty"`
	// Duplicate: a live job had the tick's unique key already.
	Duplicate bool      `json:"duplicate,omitempty"`
	NextRunAt time.Time `json:"next_run_at"`
	// Error says why the tick could not be enqueued; it stays due, unless
	// its payload lacks the queue's limit key (skipped: NextRunAt is the
	// next tick).
	Error string `json:"error,omitempty"`
}

// EnqueueDuePeriodicJobs enqueues every due tick of the periodic jobs (up
// to 1000 per call) and returns what it did. The maintenance leader calls
// it every second; any process may call it too (concurrent calls share the
// work and never enqueue a tick twice).
func (c *Client) EnqueueDuePeriodicJobs(ctx context.Context) ([]PeriodicTick, error) {
	rows, err := c.queues.EnqueueDuePeriodic(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]PeriodicTick, len(rows))
	for i, r := range rows {
		out[i] = PeriodicTick(r) // the same fields
	}
	return out, nil
}

// periodicFromStore is a periodic job as the store reads it back.
func periodicFromStore(r *store.Periodic) *PeriodicJob {
	p := &PeriodicJob{
		Queue: r.Queue, Name: r.Name, Schedule: r.Schedule, TimeZone: r.TimeZone, Payload: r.Payload, Kind: r.Kind,
		Priority: r.Priority, MaxAttempts: r.MaxAttempts, Timeout: r.Timeout,
		Tags: r.Tags, RunOnStart: r.RunOnStart, DefinedAt: r.DefinedAt, NextRunAt: r.NextRunAt,
		LastRunAt: r.LastRunAt, LastJobID: r.LastJobID, LastError: r.LastError,
	}
	if r.Metadata != nil {
		p.Metadata = json.RawMessage(r.Metadata)
	}
	if p.Payload == nil {
		p.Payload = []byte{}
	}
	return p
}
