package pgmsg_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// Schedules read as cron reads them: steps, ranges, names, descriptors,
// the Vixie rule for two restricted day fields, time zones across both
// daylight-saving changes, fixed intervals; and refused with
// ErrInvalidSchedule when they cannot be read or never fire .
func TestPreviewSchedule(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	for _, tc := range []struct {
		schedule, tz, after string
		want                []string
	}{
		{"*/15 * * * *", "", "2026-12-02T10:07:00Z", []string{"2026-12-02T10:15:00Z", "2026-12-02T10:30:00Z", "2026-12-02T10:45:00Z"}},
		{"0 9 * * MON-FRI", "Europe/Paris", "2026-12-04T12:00:00Z", []string{"2026-12-07T08:00:00Z", "2026-12-08T08:00:00Z", "2026-12-09T08:00:00Z"}},
		// Both day fields restricted: the 13th or a Friday.
		{"0 0 13 * 5", "", "2026-12-01T00:00:00Z", []string{"2026-12-04T00:00:00Z", "2026-12-11T00:00:00Z", "2026-12-13T00:00:00Z"}},
		// 7 is Sunday too; names are case-insensitive.
		{"30 6 * jan sun,7", "", "2027-01-01T00:00:00Z", []string{"2027-01-03T06:30:00Z", "2027-01-10T06:30:00Z", "2027-01-17T06:30:00Z"}},
		{"5/20 1-3/2 * * *", "", "2026-12-02T00:00:00Z", []string{"2026-12-02T01:05:00Z", "2026-12-02T01:25:00Z", "2026-12-02T01:45:00Z", "2026-12-02T03:05:00Z"}},
		// New York springs forward on 2026-03-08: 02:30 does not exist
		// that day and runs at 03:30 EDT; other days at 02:30 local.
		{"30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z", []string{"2026-03-07T07:30:00Z", "2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"}},
		// ... and falls back on 2026-11-01: 01:30 happens twice, runs once.
		{"30 1 * * *", "America/New_York", "2026-10-31T00:00:00Z", []string{"2026-10-31T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"}},
		{"@daily", "Asia/Tokyo", "2026-12-02T10:00:00Z", []string{"2026-12-02T15:00:00Z", "2026-12-03T15:00:00Z"}},
		{"@hourly", "", "2026-12-02T10:00:00Z", []string{"2026-12-02T11:00:00Z", "2026-12-02T12:00:00Z"}},
		{"@weekly", "", "2026-12-02T10:00:00Z", []string{"2026-12-06T00:00:00Z", "2026-12-13T00:00:00Z"}},
		{"@monthly", "", "2026-12-02T10:00:00Z", []string{"2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z"}},
		{"@yearly", "", "2026-12-02T10:00:00Z", []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"0 0 29 2 *", "", "2026-12-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		// Fixed intervals tick from the anchor (here the preview's start).
		{"@every 90s", "", "2026-12-01T00:00:00Z", []string{"2026-12-01T00:01:30Z", "2026-12-01T00:03:00Z"}},
		{"@every 1h30m", "", "2026-12-01T00:00:00Z", []string{"2026-12-01T01:30:00Z", "2026-12-01T03:00:00Z"}},
	} {
		got, err := tb.client.PreviewSchedule(tb.ctx, tc.schedule, tc.tz, at(tc.after), len(tc.want))
		require.NoError(t, err, tc.schedule)
		want := make([]time.Time, len(tc.want))
		for i, w := range tc.want {
			want[i] = at(w)
		}
		require.Len(t, got, len(want), tc.schedule)
		for i := range want {
			require.True(t, want[i].Equal(got[i]), "%s in %q after %s: tick %d is %s, want %s", tc.schedule, tc.tz, tc.after, i, got[i].UTC(), want[i])
		}
	}
	for _, tc := range []struct{ schedule, tz string }{
		{"", ""}, {"* * * *", ""}, {"* * * * * *", ""}, {"61 * * * *", ""}, {"* 24 * * *", ""}, {"* * 0 * *", ""},
		{"* * * 13 *", ""}, {"* * * * 8", ""}, {"*/0 * * * *", ""}, {"5-1 * * * *", ""}, {"*-5 * * * *", ""},
		{"* * * FOO *", ""}, {"0 0 30 2 *", ""}, {"@often", ""}, {"@every", ""}, {"@every 0s", ""},
		{"@every banana", ""}, {"@every 1 month", ""}, {"@every 400 days", ""}, {"@hourly", "Mars/Olympus"},
	} {
		_, err := tb.client.PreviewSchedule(tb.ctx, tc.schedule, tc.tz, time.Now(), 1)
		require.ErrorIs(t, err, pgmsg.ErrInvalidSchedule, "%q in %q", tc.schedule, tc.tz)
	}
	_, err := tb.client.PreviewSchedule(tb.ctx, "@hourly", "", time.Now(), 0)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
}

// Adding, replacing, listing and removing periodic jobs, and what is
// refused with nothing stored.
func TestPeriodicJobDefinitions(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "pj", pgmsg.QueueConfig{MaxPayloadBytes: 100})
	def := pgmsg.PeriodicJob{Queue: "pj", Name: "report", Schedule: "0 7 * * *", TimeZone: "Europe/Paris",
		Payload: []byte(`{"r":1}`), Kind: "report", Priority: 3, MaxAttempts: 2, Timeout: time.Minute,
		Tags: []string{"daily"}, Metadata: json.RawMessage(`{"team":"ops"}`)}
	p, err := tb.client.AddPeriodicJob(tb.ctx, def)
	require.NoError(t, err)
	require.Equal(t, "0 7 * * *", p.Schedule)
	require.Equal(t, "Europe/Paris", p.TimeZone)
	require.Equal(t, []byte(`{"r":1}`), p.Payload)
	require.Equal(t, "report", p.Kind)
	require.Equal(t, 3, p.Priority)
	require.Equal(t, 2, p.MaxAttempts)
	require.Equal(t, time.Minute, p.Timeout)
	require.Equal(t, []string{"daily"}, p.Tags)
	require.JSONEq(t, `{"team":"ops"}`, string(p.Metadata))
	require.True(t, p.NextRunAt.After(time.Now()))
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	require.Equal(t, 7, p.NextRunAt.In(paris).Hour())
	require.Zero(t, p.LastJobID)

	// The same definition again changes nothing; a new one is a new
	// definition, computed from now.
	again, err := tb.client.AddPeriodicJob(tb.ctx, def)
	require.NoError(t, err)
	require.True(t, p.DefinedAt.Equal(again.DefinedAt))
	def.Schedule = "@every 1h"
	changed, err := tb.client.AddPeriodicJob(tb.ctx, def)
	require.NoError(t, err)
	require.True(t, changed.DefinedAt.After(p.DefinedAt))
	require.True(t, changed.NextRunAt.Equal(changed.DefinedAt.Add(time.Hour)), "%s %s", changed.NextRunAt, changed.DefinedAt)

	_, err = tb.client.AddPeriodicJob(tb.ctx, pgmsg.PeriodicJob{Queue: "pj", Name: "b", Schedule: "@hourly", TimeZone: "UTC"})
	require.NoError(t, err)
	list, err := tb.client.ListPeriodicJobs(tb.ctx, "pj")
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "b", list[0].Name)
	require.Equal(t, "report", list[1].Name)
	require.Equal(t, []byte{}, list[0].Payload)
	all, err := tb.client.ListPeriodicJobs(tb.ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 2)

	for _, tc := range []struct {
		p    pgmsg.PeriodicJob
		want error
	}{
		{pgmsg.PeriodicJob{Queue: "nope", Name: "x", Schedule: "@hourly"}, pgmsg.ErrUnknownQueue},
		{pgmsg.PeriodicJob{Queue: "pj", Name: "bad name", Schedule: "@hourly"}, pgmsg.ErrInvalidName},
		{pgmsg.PeriodicJob{Queue: "pj", Name: "x", Schedule: "every hour"}, pgmsg.ErrInvalidSchedule},
		{pgmsg.PeriodicJob{Queue: "pj", Name: "x", Schedule: "@hourly", TimeZone: "Nowhere/Land"}, pgmsg.ErrInvalidSchedule},
		{pgmsg.PeriodicJob{Queue: "pj", Name: "x", Schedule: "@hourly", Payload: make([]byte, 101)}, pgmsg.ErrPayloadTooLarge},
		{pgmsg.PeriodicJob{Queue: "pj", Name: "x", Schedule: "@hourly", Tags: []string{"a b"}}, pgmsg.ErrInvalidArgument},
		{pgmsg.PeriodicJob{Queue: "pj", Name: "x", Schedule: "@hourly", Metadata: json.RawMessage(`[1]`)}, pgmsg.ErrInvalidArgument},
		{pgmsg.PeriodicJob{Queue: "pj", Name: "x", Schedule: "@hourly", Priority: 40000}, pgmsg.ErrInvalidArgument},
		{pgmsg.PeriodicJob{Queue: "pj", Name: "x", Schedule: "@hourly", MaxAttempts: -1}, pgmsg.ErrInvalidMaxAttempts},
		{pgmsg.PeriodicJob{Queue: "pj", Name: "x", Schedule: "@hourly", Kind: string(make([]byte, 201))}, pgmsg.ErrInvalidArgument},
	} {
		_, err := tb.client.AddPeriodicJob(tb.ctx, tc.p)
		require.ErrorIs(t, err, tc.want, "%+v", tc.p)
	}
	list, err = tb.client.ListPeriodicJobs(tb.ctx, "pj")
	require.NoError(t, err)
	require.Len(t, list, 2, "nothing refused was stored")
	st, err := tb.client.QueueStats(tb.ctx, "pj")
	require.NoError(t, err)
	require.Zero(t, st.Available, "checking a definition enqueues nothing")

	require.ErrorIs(t, tb.client.RemovePeriodicJob(tb.ctx, "pj", "nope"), pgmsg.ErrUnknownPeriodicJob)
	require.ErrorIs(t, tb.client.RemovePeriodicJob(tb.ctx, "nope", "b"), pgmsg.ErrUnknownQueue)
	require.NoError(t, tb.client.RemovePeriodicJob(tb.ctx, "pj", "b"))
	_, err = tb.client.ListPeriodicJobs(tb.ctx, "nope")
	require.ErrorIs(t, err, pgmsg.ErrUnknownQueue)
	require.NoError(t, tb.client.DeleteQueue(tb.ctx, "pj", true))
	all, err = tb.client.ListPeriodicJobs(tb.ctx, "")
	require.NoError(t, err)
	require.Empty(t, all, "a deleted queue's periodic jobs go with it")
}

// makeDue moves a periodic job's next tick into the past, as if that much
// time had gone by.
func (tb *testBundle) makeDue(t *testing.T, name string, ago time.Duration) {
	t.Helper()
	_, err := tb.Pool.Exec(tb.ctx, `UPDATE `+pgx.Identifier{tb.Schema}.Sanitize()+`.periodic_job
		SET next_run_at = now() - $2::interval WHERE name = $1`, name, ago.String())
	require.NoError(t, err)
}

// A due tick is enqueued once however many processes enqueue due ticks at
// the same moment; ticks missed for hours are one job; a tick that cannot
// be enqueued stays due and is enqueued once it can.
func TestPeriodicEnqueueOncePerTick(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "pq", pgmsg.QueueConfig{})
	clients := []*pgmsg.Client{tb.client}
	for range 3 {
		c, err := pgmsg.NewClient(tb.Pool, &pgmsg.Config{Schema: tb.Schema})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		clients = append(clients, c)
	}
	race := func() []pgmsg.PeriodicTick {
		var (
			mu  sync.Mutex
			all []pgmsg.PeriodicTick
			wg  sync.WaitGroup
		)
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ticks, err := clients[i%len(clients)].EnqueueDuePeriodicJobs(tb.ctx)
				require.NoError(t, err)
				mu.Lock()
				all = append(all, ticks...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return all
	}
	p, err := tb.client.AddPeriodicJob(tb.ctx, pgmsg.PeriodicJob{Queue: "pq", Name: "minutely", Schedule: "* * * * *",
		Payload: []byte("m"), Kind: "tick", RunOnStart: true})
	require.NoError(t, err)
	require.False(t, p.NextRunAt.After(time.Now()), "run on start: due at once")

	ticks := race()
	require.Len(t, ticks, 1, "one tick, once")
	require.Empty(t, ticks[0].Error)
	require.NotZero(t, ticks[0].JobID)
	require.True(t, ticks[0].Tick.Equal(p.NextRunAt))
	require.True(t, ticks[0].NextRunAt.After(time.Now()))
	require.Zero(t, ticks[0].NextRunAt.Second())
	job, err := tb.client.GetJob(tb.ctx, ticks[0].JobID)
	require.NoError(t, err)
	require.Equal(t, "tick", job.Kind)
	require.Equal(t, []byte("m"), job.Payload)
	require.Equal(t, "periodic:minutely@"+p.NextRunAt.UTC().Format("2006-01-02T15:04:05.000000Z"), job.UniqueKey)
	require.Empty(t, race(), "not due again before its next tick")

	// Three hours without a leader: one job, for the first missed tick.
	tb.makeDue(t, "minutely", 3*time.Hour)
	ticks = race()
	require.Len(t, ticks, 1)
	require.WithinDuration(t, time.Now().Add(-3*time.Hour), ticks[0].Tick, time.Minute)
	require.True(t, ticks[0].NextRunAt.After(time.Now()))
	list, err := tb.client.ListPeriodicJobs(tb.ctx, "pq")
	require.NoError(t, err)
	require.Equal(t, ticks[0].JobID, list[0].LastJobID)
	require.True(t, ticks[0].Tick.Equal(list[0].LastRunAt))

	// The queue no longer takes the payload: the tick stays due, says why,
	// and is enqueued once the queue takes it again.
	_, err = tb.client.UpdateQueue(tb.ctx, "pq", pgmsg.QueueConfig{MaxPayloadBytes: 1})
	require.NoError(t, err)
	_, err = tb.client.AddPeriodicJob(tb.ctx, pgmsg.PeriodicJob{Queue: "pq", Name: "big", Schedule: "@hourly", Payload: []byte("x")})
	require.NoError(t, err)
	_, err = tb.client.UpdateQueue(tb.ctx, "pq", pgmsg.QueueConfig{MaxPayloadBytes: 0}) // unchanged
	require.NoError(t, err)
	_, err = tb.Pool.Exec(tb.ctx, `UPDATE `+pgx.Identifier{tb.Schema}.Sanitize()+`.periodic_job SET payload = 'xx'::bytea WHERE name = 'big'`)
	require.NoError(t, err)
	tb.makeDue(t, "big", time.Minute)
	// One caller: a refused tick stays due, so concurrent callers after the
	// first would each try it again (and be refused again).
	ticks, err = tb.client.EnqueueDuePeriodicJobs(tb.ctx)
	require.NoError(t, err)
	require.Len(t, ticks, 1)
	require.Zero(t, ticks[0].JobID)
	require.Contains(t, ticks[0].Error, "max_payload_bytes")
	require.True(t, ticks[0].NextRunAt.Before(time.Now()), "still due")
	list, err = tb.client.ListPeriodicJobs(tb.ctx, "pq")
	require.NoError(t, err)
	require.Equal(t, "big", list[0].Name)
	require.Contains(t, list[0].LastError, "max_payload_bytes")
	_, err = tb.client.UpdateQueue(tb.ctx, "pq", pgmsg.QueueConfig{MaxPayloadBytes: 100})
	require.NoError(t, err)
	// Only big's tick: the minutely job is due again when the test
	// crosses a minute boundary.
	ticks = slices.DeleteFunc(race(), func(tk pgmsg.PeriodicTick) bool { return tk.Name != "big" })
	require.Len(t, ticks, 1)
	require.NotZero(t, ticks[0].JobID)
	require.Empty(t, ticks[0].Error)
	list, err = tb.client.ListPeriodicJobs(tb.ctx, "pq")
	require.NoError(t, err)
	require.Empty(t, list[0].LastError)

	st, err := tb.client.QueueStats(tb.ctx, "pq")
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Available, "three ticks, three jobs")
}

// The maintenance leader enqueues due ticks; when it goes, the next leader
// enqueues what came due meanwhile, and no tick is enqueued twice.
func TestPeriodicLeaderChange(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "lq", pgmsg.QueueConfig{})
	_, err := tb.client.AddPeriodicJob(tb.ctx, pgmsg.PeriodicJob{Queue: "lq", Name: "hourly", Schedule: "@hourly", RunOnStart: true})
	require.NoError(t, err)
	count := func() int64 {
		st, err := tb.client.QueueStats(tb.ctx, "lq")
		require.NoError(t, err)
		return st.Available
	}
	cfg := &pgmsg.MaintenanceConfig{Interval: 100 * time.Millisecond}
	run := func() (*pgmsg.Client, context.CancelFunc, chan struct{}) {
		c, err := pgmsg.NewClient(tb.Pool, &pgmsg.Config{Schema: tb.Schema})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(tb.ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = c.RunMaintenance(ctx, cfg)
		}()
		return c, cancel, done
	}
	a, stopA, doneA := run()
	defer stopA()
	require.Eventually(t, a.IsMaintenanceLeader, 30*time.Second, 10*time.Millisecond)
	b, stopB, doneB := run()
	defer stopB()
	require.Eventually(t, func() bool { return count() == 1 }, 30*time.Second, 10*time.Millisecond, "run on start")
	require.False(t, b.IsMaintenanceLeader())

	stopA()
	<-doneA
	tb.makeDue(t, "hourly", time.Second)
	require.Eventually(t, b.IsMaintenanceLeader, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return count() == 2 }, 30*time.Second, 10*time.Millisecond, "the due tick, by the new leader")
	list, err := tb.client.ListPeriodicJobs(tb.ctx, "lq")
	require.NoError(t, err)
	require.True(t, list[0].NextRunAt.After(time.Now()))
	// Several leader passes later, still one job per tick.
	passes, err := b.EnqueueDuePeriodicJobs(tb.ctx)
	require.NoError(t, err)
	require.Empty(t, passes)
	require.Equal(t, int64(2), count())
	stopB()
	<-doneB
}

// A periodic job whose payload lacks the limit key of its queue (a
// key_field set after the job was added, PM113) is refused at every tick
// until one of them changes: the tick is skipped with the reason in
// last_error, the schedule goes on (not due again before its next tick,
// so not tried at every pass), and once the payload has the key the next
// tick is enqueued.
func TestPeriodicLimitKeyMissing(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "pk", pgmsg.QueueConfig{})
	_, err := tb.client.AddPeriodicJob(tb.ctx, pgmsg.PeriodicJob{Queue: "pk", Name: "report", Schedule: "@hourly",
		Payload: []byte(`{"n":1}`)})
	require.NoError(t, err)
	_, err = tb.client.UpdateQueue(tb.ctx, "pk", pgmsg.QueueConfig{KeyLimit: 1, KeyField: "customer_id"})
	require.NoError(t, err)

	tb.makeDue(t, "report", time.Minute)
	ticks, err := tb.client.EnqueueDuePeriodicJobs(tb.ctx)
	require.NoError(t, err)
	require.Len(t, ticks, 1)
	require.Zero(t, ticks[0].JobID)
	require.Contains(t, ticks[0].Error, "limit key missing")
	require.Contains(t, ticks[0].Error, "customer_id")
	require.True(t, ticks[0].NextRunAt.After(time.Now()), "the schedule goes on to its next tick")
	list, err := tb.client.ListPeriodicJobs(tb.ctx, "pk")
	require.NoError(t, err)
	require.Equal(t, ticks[0].Error, list[0].LastError)
	require.True(t, list[0].LastRunAt.IsZero(), "no tick was enqueued")
	require.True(t, list[0].NextRunAt.Equal(ticks[0].NextRunAt))
	ticks, err = tb.client.EnqueueDuePeriodicJobs(tb.ctx)
	require.NoError(t, err)
	require.Empty(t, ticks, "not tried again before its next tick")
	st, err := tb.client.QueueStats(tb.ctx, "pk")
	require.NoError(t, err)
	require.Zero(t, st.Available+st.Pending)

	_, err = tb.client.AddPeriodicJob(tb.ctx, pgmsg.PeriodicJob{Queue: "pk", Name: "report", Schedule: "@hourly",
		Payload: []byte(`{"n":1,"customer_id":"c1"}`)})
	require.NoError(t, err)
	tb.makeDue(t, "report", time.Minute)
	ticks, err = tb.client.EnqueueDuePeriodicJobs(tb.ctx)
	require.NoError(t, err)
	require.Len(t, ticks, 1)
	require.Empty(t, ticks[0].Error)
	require.NotZero(t, ticks[0].JobID)
	list, err = tb.client.ListPeriodicJobs(tb.ctx, "pk")
	require.NoError(t, err)
	require.Empty(t, list[0].LastError)
}
