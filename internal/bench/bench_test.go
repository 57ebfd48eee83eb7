package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// dropRoles drops what is left of schema, which the bench created and
// dropped: its roles (cluster-wide, and left by the bench's release).
func dropRoles(t *testing.T, b *pgtest.Bundle, schema string) {
	t.Helper()
	m, err := pgmsgmigrate.New(b.Pool, &pgmsgmigrate.Opts{Schema: schema})
	if err == nil {
		err = m.Drop(context.Background())
	}
	if err != nil {
		t.Errorf("drop %s: %v", schema, err)
	}
}

func TestHistQuantiles(t *testing.T) {
	t.Parallel()
	h := newHist()
	for i := 1; i <= 10000; i++ {
		h.add(time.Duration(i) * time.Microsecond) // 1 µs .. 10 ms, uniform
	}
	require.Equal(t, uint64(10000), h.count())
	require.InDelta(t, 5.0, h.quantileMS(0.5), 5.0*0.02)
	require.InDelta(t, 9.9, h.quantileMS(0.99), 9.9*0.02)
	require.InDelta(t, 10.0, h.quantileMS(1), 0.001)
	require.Zero(t, newHist().quantileMS(0.99))

	// Every bucket's upper bound maps back to the bucket.
	for i := 0; i < 128+40*histSub; i++ {
		require.Equal(t, i, histIndex(histValue(i)), "bucket %d", i)
	}
}

// Producers sharing a rate get first slots spread over the interval, so
// that together they publish at evenly spaced instants, not in bursts.
func TestPacerPhases(t *testing.T) {
	t.Parallel()
	const producers = 4
	for i := range producers {
		before := time.Now()
		p := newPacer(125, float64(i)/producers) // every 8 ms
		after := time.Now()
		require.Equal(t, 8*time.Millisecond, p.interval)
		// Producer i's first slot is i × 2 ms after the moment it was made.
		offset := time.Duration(i) * 2 * time.Millisecond
		require.False(t, p.next.Before(before.Add(offset)), "producer %d", i)
		require.False(t, p.next.After(after.Add(offset)), "producer %d", i)
	}
	require.Zero(t, newPacer(0, 0.5).interval, "no rate: no pacing")
}

// A caller that fell behind gets its missed slots at once, each with its
// own due time, so that a stalled call's delay counts in every call it
// held up (latencies count from the slot); behind by more than a second,
// slots start again from now.
func TestPacerSlots(t *testing.T) {
	t.Parallel()
	p := newPacer(100, 0) // every 10 ms
	first, err := p.wait(context.Background())
	require.NoError(t, err)
	time.Sleep(35 * time.Millisecond) // a stalled call
	for i := 1; i <= 3; i++ {
		slot, err := p.wait(context.Background())
		require.NoError(t, err)
		require.Equal(t, first.Add(time.Duration(i)*10*time.Millisecond), slot, "slot %d", i)
	}
	p.next = time.Now().Add(-2 * time.Second)
	before := time.Now()
	slot, err := p.wait(context.Background())
	require.NoError(t, err)
	require.False(t, slot.Before(before), "behind by more than a second: the slot is now")

	before = time.Now()
	now, err := newPacer(0, 0).wait(context.Background())
	require.NoError(t, err)
	require.False(t, now.Before(before), "no rate: the slot is now")
}

// The summary's latencies are those recorded inside the measured window:
// a sample of the warm-up never reaches them, even when the interval it
// was recorded in ends after the warm-up (the progress ticker's first
// tick lands just after it).
func TestStatsLeaveWarmupOut(t *testing.T) {
	t.Parallel()
	now := time.Now()
	st := newStats(window{start: now, measured: now.Add(time.Hour), end: now.Add(2 * time.Hour)})
	st.read(1, []time.Duration{500 * time.Millisecond})
	st.wrote(1, 400*time.Millisecond)
	st.win.measured = now // the warm-up is over
	st.read(2, []time.Duration{time.Millisecond, time.Millisecond})
	st.wrote(1, 2*time.Millisecond)
	pub, e2e := st.interval()
	require.Equal(t, uint64(3), e2e.count(), "the progress line shows the whole interval")
	require.Equal(t, uint64(2), pub.count())
	require.Equal(t, uint64(2), st.e2eTotal.count())
	require.InDelta(t, 1.0, st.e2eTotal.quantileMS(1), 0.02)
	require.Equal(t, uint64(1), st.pubTotal.count())
	require.InDelta(t, 2.0, st.pubTotal.quantileMS(1), 0.04)
	require.Equal(t, int64(2), st.reads.n.Load())
	require.Equal(t, int64(3), st.readsAll.Load())
}

func TestSummarizeMediansAndRatios(t *testing.T) {
	t.Parallel()
	runs := [][]any{
		{&PubSubResult{Impl: "pgmsg", WritesPerSec: 100}, &PubSubResult{Impl: "pgmsg", WritesPerSec: 300}, &PubSubResult{Impl: "pgmsg", WritesPerSec: 200}},
		{&PubSubResult{Impl: "seed", WritesPerSec: 10}, &PubSubResult{Impl: "seed", WritesPerSec: 100}, &PubSubResult{Impl: "seed", WritesPerSec: 40}},
	}
	s := Summarize(&ServerInfo{Version: "15"}, runs)
	require.Equal(t, 200.0, s["writes_per_sec"])
	require.Equal(t, "pgmsg", s["impl"])
	base := s["baseline"].([]map[string]any)
	require.Equal(t, 40.0, base[0]["writes_per_sec"])
	// Per-round ratios 10, 3, 5: the median is 5.
	require.Equal(t, 5.0, s["vs_seed"].(map[string]float64)["writes_per_sec"])
	require.Len(t, s["rounds"], 2)

	var out strings.Builder
	PrintSummary(&out, s)
	require.Contains(t, out.String(), "pgmsg vs seed: writes_per_sec 5.00x")
	require.NoError(t, Check(s))

	runs[1] = []any{&PubSubResult{Impl: "seed", Errors: 2, FirstError: "boom"}}
	runs[0] = runs[0][:1]
	require.ErrorContains(t, Check(Summarize(nil, runs)), "boom")
}

func TestEnsureSchemaRefusesOtherData(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, nil)
	ctx := context.Background()

	// An empty pgmsg schema is fine, and is not dropped (it was not ours).
	g, err := ensureSchema(ctx, b.Pool, b.Schema, false)
	require.NoError(t, err)
	require.False(t, g.created)

	c, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema})
	require.NoError(t, err)
	_, err = c.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	_, err = ensureSchema(ctx, b.Pool, b.Schema, false)
	require.ErrorContains(t, err, "holds other pgmsg data (1 topics)")
	_, err = ensureSchema(ctx, b.Pool, b.Schema, true)
	require.NoError(t, err)

	// A schema that does not exist is created and dropped again.
	fresh := b.Schema + "_b"
	t.Cleanup(func() { dropRoles(t, b, fresh) })
	g, err = ensureSchema(ctx, b.Pool, fresh, false)
	require.NoError(t, err)
	require.True(t, g.created)
	g.release(ctx)
	var exists bool
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, fresh).Scan(&exists))
	require.False(t, exists)
}

// TestRunSmoke runs each implementation for a moment: the figures must
// be non-zero and the run must clean up after itself.
func TestRunSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the database")
	}
	b := pgtest.Schema(t, nil)
	ctx := context.Background()
	env := &Env{URL: b.URL, Schema: b.Schema + "_run"}
	t.Cleanup(func() { dropRoles(t, b, env.Schema) })
	for _, impl := range []string{ImplPgmsg, ImplSeed} {
		// Members join a group through heartbeats before they read: give
		// them a warm-up second.
		r, err := RunPubSub(ctx, env, impl, PubSubOptions{Duration: 2 * time.Second, Warmup: time.Second,
			Producers: 2, Batch: 10, Groups: 1, ClaimBatch: 50, Partitions: 2})
		require.NoError(t, err, impl)
		require.Zero(t, r.Errors, r.FirstError)
		require.Positive(t, r.WritesPerSec, impl)
		require.Positive(t, r.ReadsPerSec, impl)
		// The process's CPU over the window, per record written or read.
		require.Positive(t, r.ProcessCPUPerRecordUS, impl)
		// No warm-up: a fast machine finishes 300 prefilled jobs within
		// any warm-up, and then nothing would be measured.
		q, err := RunQueue(ctx, env, impl, QueueOptions{Duration: 700 * time.Millisecond, Warmup: 0,
			Workers: 2, Jobs: 300})
		require.NoError(t, err, impl)
		require.Zero(t, q.Errors, q.FirstError)
		require.Positive(t, q.JobsPerSec, impl)
	}
	// Fair share: the paced jobs are small tenants' beside one tenant's
	// backlog; the check reports their starts from the due time and from
	// the enqueue's return, and the backlog's rate.
	q, err := RunQueue(ctx, env, ImplPgmsgFair, QueueOptions{Duration: time.Second, Warmup: 0, Workers: 2, Jobs: 300,
		Rate: 20, Tenants: 2})
	require.NoError(t, err)
	require.Zero(t, q.Errors, q.FirstError)
	require.Contains(t, q.Checked, "paced jobs (2 small tenants, backlog one tenant's)")
	require.Contains(t, q.Checked, "from their enqueue's return")
	// A handler that takes JobTime: jobs are still done, none fails.
	q, err = RunQueue(ctx, env, ImplPgmsg, QueueOptions{Duration: time.Second, Warmup: 0, Workers: 4, Jobs: 20,
		JobTime: 20 * time.Millisecond})
	require.NoError(t, err)
	require.Zero(t, q.Errors, q.FirstError)
	require.Positive(t, q.JobsDone)
	// Prefilled jobs all done inside the warm-up: an error, not 0 jobs/s.
	// (5 jobs in 30 s; the run ends as soon as they are done.)
	_, err = RunQueue(ctx, env, ImplPgmsg, QueueOptions{Duration: time.Second, Warmup: 30 * time.Second, Workers: 2, Jobs: 5})
	require.ErrorContains(t, err, "nothing was measured")
	// Fewer members than partitions: the membership spreads 8 partitions
	// over 3 members (2 or 3 each) before the run, and the run says how
	// long that took; --members is refused where it means nothing.
	m, err := RunPubSub(ctx, env, ImplPgmsg, PubSubOptions{Duration: time.Second, Warmup: 500 * time.Millisecond,
		Producers: 2, Batch: 10, Groups: 1, Members: 3, ClaimBatch: 50, Partitions: 8})
	require.NoError(t, err)
	require.Zero(t, m.Errors, m.FirstError)
	require.Equal(t, 3, m.Members)
	require.Positive(t, m.SettleS)
	require.Positive(t, m.ReadsPerSec)
	_, err = RunPubSub(ctx, env, ImplSeed, PubSubOptions{Groups: 1, Members: 2, Partitions: 4})
	require.ErrorContains(t, err, "--members is for the pgmsg implementations")
	_, err = RunPubSub(ctx, env, ImplPgmsg, PubSubOptions{Groups: 1, Members: 5, Partitions: 4})
	require.ErrorContains(t, err, "--members must be 1 to --partitions")
	r, err := RunPubSub(ctx, env, ImplPacked, PubSubOptions{Duration: 2 * time.Second, Warmup: 500 * time.Millisecond,
		Producers: 2, Batch: 10, Groups: 1, ClaimBatch: 50, Partitions: 2})
	require.NoError(t, err)
	require.Zero(t, r.Errors, r.FirstError)
	require.Positive(t, r.WritesPerSec)
	require.Positive(t, r.ReadsPerSec)
	r, err = RunPubSub(ctx, env, ImplFloor, PubSubOptions{Duration: 2 * time.Second, Warmup: 500 * time.Millisecond,
		Producers: 2, Batch: 10, Groups: 2, ClaimBatch: 50, Partitions: 2, Rate: 2000})
	require.NoError(t, err)
	require.Zero(t, r.Errors, r.FirstError)
	require.Positive(t, r.WritesPerSec)
	require.Positive(t, r.ReadsPerSec)
	r, err = RunPubSub(ctx, env, ImplCopy, PubSubOptions{Duration: 300 * time.Millisecond, Warmup: 1, Producers: 1, Batch: 100})
	require.NoError(t, err)
	require.Positive(t, r.WritesPerSec)

	var left int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, env.Schema).Scan(&left))
	require.Zero(t, left, "the schema the runs created was left behind")
}

// count is how many values h holds.
func (h *hist) count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Two short fanout runs on the test database: every group reads what was
// published, and the schema the runs created is dropped.
func TestRunFanoutSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the database")
	}
	b := pgtest.Schema(t, nil)
	ctx := context.Background()
	schema := b.Schema + "_fanout"
	t.Cleanup(func() { dropRoles(t, b, schema) })
	r, err := RunFanout(ctx, FanoutOptions{URL: b.URL, Schema: schema, Groups: []int{1, 3}, Partitions: 2,
		Rate: 200, Warmup: time.Second, Duration: 2 * time.Second, PoolSize: 8})
	require.NoError(t, err)
	require.Len(t, r.Rows, 2)
	for _, row := range r.Rows {
		require.Zero(t, row.Errors, row.FirstError)
		require.Positive(t, row.WritesPerSec, "%d groups", row.Groups)
		require.Positive(t, row.DeliveredPerSec, "%d groups", row.Groups)
	}
	var out strings.Builder
	PrintFanout(&out, r)
	require.Contains(t, out.String(), "groups  writes/s")
	if r.Rows[0].PgUSPerRecord > 0 && r.Rows[0].ProcessUSPerRecord > 0 { // the server runs on this machine
		require.Contains(t, out.String(), "CPU per delivered record, 3 groups / 1 groups")
	}
	var left int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&left))
	require.Zero(t, left, "the schema the runs created was left behind")
}

// A small estate with heartbeating members, then the same members as
// consumers in two clients: both rows are measured, the schema dropped.
func TestRunScaleMembersSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the database; waits out 5 heartbeat intervals twice")
	}
	b := pgtest.Schema(t, nil)
	schema := b.Schema + "_scale"
	t.Cleanup(func() { dropRoles(t, b, schema) })
	r, err := RunScale(context.Background(), ScaleOptions{URL: b.URL, Schema: schema, Topics: 2, Partitions: 2, Groups: 1,
		Members: 8, MembersPerGroup: 4, MemberProcesses: 2, HeartbeatFor: time.Second, Repeat: 1})
	require.NoError(t, err)
	var names []string
	for _, row := range r.Rows {
		names = append(names, row.Name)
	}
	require.Contains(t, names, "8 members heartbeating")
	require.Contains(t, names, "8 consumers' memberships in 2 processes")
	var left int
	require.NoError(t, b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&left))
	require.Zero(t, left, "the estate's schema was left behind")
}
