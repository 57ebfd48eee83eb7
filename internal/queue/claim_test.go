package queue

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// newTestQueues is an engine on b's schema. The root's rules it is handed
// (names, times) are tested with the root's Client; these tests give
// valid names and times.
func newTestQueues(b *pgtest.Bundle) *Queues {
	return New(store.New(b.Schema), b.Pool, Config{
		Logger:       slog.Default(),
		ValidateName: func(string, string) error { return nil },
		CheckTime:    func(string, time.Time) error { return nil },
		DurationMax:  366 * 24 * time.Hour,
	})
}

// enqueueOne enqueues p to queue "q", created if missing.
func enqueueOne(ctx context.Context, q *Queues, p pgmsgtype.EnqueueParams) (*pgmsgtype.EnqueueResult, error) {
	res, err := q.Enqueue(ctx, q.pool, "q", []pgmsgtype.EnqueueParams{p}, true)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// newClaimQueue is the claim tests' setup: a schema of the test's own
// with a pool of maxConns connections, an engine on it, queue "q"
// created with cfg, and a context that ends after a minute (or with the
// test).
func newClaimQueue(t *testing.T, maxConns int32, cfg pgmsgtype.QueueConfig) (*pgtest.Bundle, *Queues, context.Context) {
	t.Helper()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: maxConns})
	c := newTestQueues(b)
	ctx := pgtest.Context(t, time.Minute)
	_, err := c.Create(ctx, b.Pool, "q", cfg, false)
	require.NoError(t, err)
	return b, c, ctx
}

// The worker's direct claim statement (internal/store/job_claim.go) claims as
// job_claim() does: claim order across priorities from the client's
// position, jobs behind the position once the positioned reads run short,
// future jobs left alone, the queue's or the given lease, a fresh token per
// job; an unknown queue and the periodic lease probe go to job_claim().
func TestJobClaimDirect(t *testing.T) {
	t.Parallel()
	b, c, ctx := newClaimQueue(t, 4, pgmsgtype.QueueConfig{Lease: 40 * time.Second})
	enqueue := func(priority int, runAt time.Time) int64 {
		t.Helper()
		res, err := enqueueOne(ctx, c, pgmsgtype.EnqueueParams{Payload: []byte("p"), Priority: priority, RunAt: runAt})
		require.NoError(t, err)
		return res.ID
	}
	ids := func(jobs []*pgmsgtype.Job) []int64 {
		out := make([]int64, len(jobs))
		for i, j := range jobs {
			out[i] = j.ID
		}
		return out
	}
	direct := func(max int, lease time.Duration) []*pgmsgtype.Job {
		t.Helper()
		jobs, ok, err := c.claimDirect(ctx, "q", &ClaimOpts{Max: max, Lease: lease, Worker: "w"}, true)
		require.NoError(t, err)
		require.True(t, ok, "the direct statement answered")
		return jobs
	}

	a0, a1, a2 := enqueue(0, time.Time{}), enqueue(0, time.Time{}), enqueue(0, time.Time{})
	future := enqueue(5, time.Now().Add(time.Hour))
	// No claim through job_claim() yet: the direct statement does not claim.
	_, ok, err := c.claimDirect(ctx, "q", &ClaimOpts{Max: 1}, true)
	require.NoError(t, err)
	require.False(t, ok)
	jobs, err := c.Claim(ctx, b.Pool, "q", ClaimOpts{Max: 1}, true)
	require.NoError(t, err)
	require.Equal(t, []int64{a0}, ids(jobs), "through job_claim()")

	jobs = direct(1, 0)
	require.Equal(t, []int64{a1}, ids(jobs), "after the position")
	j := jobs[0]
	require.Equal(t, pgmsgtype.JobStateRunning, j.State)
	require.Equal(t, "q", j.Queue)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "w", j.Worker)
	require.Equal(t, []byte("p"), j.Payload)
	require.WithinDuration(t, time.Now().Add(40*time.Second), *j.LeaseExpiresAt, 5*time.Second, "the queue's lease")
	got, err := c.Get(ctx, a1)
	require.NoError(t, err)
	require.Equal(t, pgmsgtype.JobStateRunning, got.State)
	require.Equal(t, j.LeaseToken, got.LeaseToken)
	require.Equal(t, "w", got.Worker)

	// A higher priority is claimed first, then the rest after the
	// position; a job behind the position (run_at in the past, enqueued
	// now) is found by the whole read once the positioned reads run short;
	// the future job stays.
	hi := enqueue(3, time.Time{})
	late := enqueue(0, time.Now().Add(-time.Hour))
	jobs = direct(10, 2*time.Minute)
	require.Equal(t, []int64{hi, a2, late}, ids(jobs))
	require.Len(t, map[int64]bool{jobs[0].LeaseToken: true, jobs[1].LeaseToken: true, jobs[2].LeaseToken: true}, 3)
	for _, j := range jobs {
		require.WithinDuration(t, time.Now().Add(2*time.Minute), *j.LeaseExpiresAt, 5*time.Second, "the given lease")
	}
	require.Empty(t, direct(10, 0))
	got, err = c.Get(ctx, future)
	require.NoError(t, err)
	require.Equal(t, pgmsgtype.JobStateScheduled, got.State)

	// Claimed jobs complete with their tokens (the direct completion).
	completed, notHeld, err := c.CompleteMany(ctx, b.Pool, jobs, nil)
	require.NoError(t, err)
	require.ElementsMatch(t, ids(jobs), completed)
	require.Empty(t, notHeld)
	completed, notHeld, err = c.CompleteMany(ctx, b.Pool, jobs, nil)
	require.NoError(t, err)
	require.Empty(t, completed)
	require.ElementsMatch(t, ids(jobs), notHeld)

	// An unknown queue is job_claim()'s to report.
	require.NoError(t, c.Delete(ctx, "q", true))
	_, ok, err = c.claimDirect(ctx, "q", &ClaimOpts{Max: 1}, true)
	require.NoError(t, err)
	require.False(t, ok)
	_, err = c.Claim(ctx, b.Pool, "q", ClaimOpts{}, true)
	require.ErrorIs(t, err, errs.UnknownQueue)

	// A deleted queue's state goes; a name never claimed from gets none.
	require.Nil(t, c.claimState("q", false))
	_, err = c.Claim(ctx, b.Pool, "never-created", ClaimOpts{}, true)
	require.ErrorIs(t, err, errs.UnknownQueue)
	require.Nil(t, c.claimState("never-created", false))

	// Once claimFullEvery has passed, a claim reads the whole index (no
	// position) and probes for expired leases, once.
	st := c.claimState("q", true)
	st.mu.Lock()
	st.valid, st.id = true, 42
	st.mu.Unlock()
	now := time.Now()
	id, probe, rescue := st.next(now)
	require.False(t, rescue)
	require.False(t, id.Valid, "no position: the whole index")
	require.True(t, probe)
	id, probe, _ = st.next(now.Add(time.Millisecond))
	require.True(t, id.Valid)
	require.Equal(t, int64(42), id.ID)
	require.False(t, probe)
}

// A lease that expired is found by the direct claim's probe, and the next
// claim rescues the job before it claims.
func TestJobClaimDirectProbesExpiredLeases(t *testing.T) {
	t.Parallel()
	b, c, ctx := newClaimQueue(t, 4, pgmsgtype.QueueConfig{})
	var ids []int64
	for i := 0; i < 3; i++ {
		res, err := enqueueOne(ctx, c, pgmsgtype.EnqueueParams{Payload: []byte{byte(i)}})
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}
	// Through job_claim(): a lease that is over at once.
	jobs, err := c.Claim(ctx, b.Pool, "q", ClaimOpts{Max: 1, Lease: time.Microsecond}, true)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, ids[0], jobs[0].ID)
	time.Sleep(5 * time.Millisecond)

	st := c.claimState("q", false)
	require.NotNil(t, st)
	st.mu.Lock()
	st.probed = time.Time{} // a probe is due
	st.mu.Unlock()
	jobs, ok, err := c.claimDirect(ctx, "q", &ClaimOpts{Max: 1}, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, jobs, 1, "the claim's own jobs are handed out")
	require.Equal(t, ids[1], jobs[0].ID)
	st.mu.Lock()
	rescue := st.rescue
	st.mu.Unlock()
	require.True(t, rescue, "the probe found the expired lease")

	// The next claim rescues the job first (attempt counted), then claims
	// in order.
	jobs, ok, err = c.claimDirect(ctx, "q", &ClaimOpts{Max: 10}, true)
	require.NoError(t, err)
	require.True(t, ok)
	got := map[int64]int{}
	for _, j := range jobs {
		got[j.ID] = j.Attempt
	}
	require.Equal(t, map[int64]int{ids[0]: 2, ids[2]: 1}, got)
	st.mu.Lock()
	rescue = st.rescue
	st.mu.Unlock()
	require.False(t, rescue)
}

// The direct job claim's settings (plan pinning, asynchronous commit) apply
// to the claim and end with its own transaction: the pool's connection
// keeps the caller's.
func TestJobClaimDirectSettings(t *testing.T) {
	t.Parallel()
	b, c, ctx := newClaimQueue(t, 1, pgmsgtype.QueueConfig{})
	for i := 0; i < 3; i++ {
		_, err := enqueueOne(ctx, c, pgmsgtype.EnqueueParams{Payload: []byte("p")})
		require.NoError(t, err)
	}
	settings := func() string {
		var s string
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT current_setting('enable_bitmapscan') || current_setting('enable_seqscan') ||
			current_setting('synchronous_commit')`).Scan(&s))
		return s
	}
	_, err := b.Pool.Exec(ctx, "SET synchronous_commit = on")
	require.NoError(t, err)
	before := settings()
	require.Equal(t, "ononon", before)
	_, err = c.Claim(ctx, b.Pool, "q", ClaimOpts{}, true) // through job_claim()
	require.NoError(t, err)
	jobs, ok, err := c.claimDirect(ctx, "q", &ClaimOpts{Max: 1}, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, jobs, 1)
	require.Equal(t, before, settings())

	// And they apply to the statement queued after them in the same batch
	// (pgx sends a batch with one Sync: one implicit transaction).
	var bt pgx.Batch
	bt.Queue(store.JobClaimSettingsSQL, true)
	bt.Queue(`SELECT current_setting('enable_bitmapscan') || current_setting('enable_seqscan') || current_setting('synchronous_commit')`)
	br := b.Pool.SendBatch(ctx, &bt)
	_, err = br.Exec()
	require.NoError(t, err)
	var inBatch string
	require.NoError(t, br.QueryRow().Scan(&inBatch))
	require.NoError(t, br.Close())
	require.Equal(t, "offoffoff", inBatch)
	require.Equal(t, before, settings())
}

// A fair queue's positioned reads start at the tag the client claimed one
// to two claimFairLag steps ago, never at its latest: the virtual time a
// job is tagged with when its enqueue starts is at most the latest tag,
// and the claims made while the enqueue runs move on past it. The deep
// read (one in claimFairDeepEvery) starts one to two claimFairDeepLag
// steps back, or reads the whole index while there is no such position.
func TestClaimFairPositionLags(t *testing.T) {
	t.Parallel()
	var st claimState
	t0 := time.Now()
	st.full = t0.Add(time.Hour) // no read of the whole index in this test
	st.deepRead = st.full       // nor a deep read in this part
	claim := func(tag float64) { st.fairValid, st.fairTag = true, tag }
	pos := func(at time.Duration) store.JobClaimPosition {
		p, _, _ := st.next(t0.Add(at))
		return p
	}
	claim(10)
	p := pos(0)
	require.False(t, p.FairValid, "no position a step old yet: the whole read (fr)")
	claim(20)
	require.False(t, pos(claimFairLag/2).FairValid)
	claim(30)
	p = pos(claimFairLag) // a step: the position of the step before (10), not 30
	require.True(t, p.FairValid)
	require.Equal(t, 10.0, p.FairTag)
	claim(40)
	p = pos(claimFairLag + claimFairLag/2)
	require.Equal(t, 10.0, p.FairTag, "between steps the old position holds")
	p = pos(2 * claimFairLag)
	require.Equal(t, 30.0, p.FairTag, "the position one step ago")

	// The deep read: its position is a claimFairDeepLag step behind, and
	// one claim per claimFairDeepEvery reads from it.
	var dt claimState
	dt.full = t0.Add(time.Hour)
	dt.fairValid, dt.fairTag = true, 5
	_, _, _ = dt.next(t0) // steps both at t0 (deep: mid 5)
	dt.fairTag = 50
	p, _, _ = dt.next(t0.Add(claimFairLag)) // fair step: old 5
	require.False(t, p.FairValid, "no position a deep step old yet: a deep read reads the whole index")
	dt.fairTag = 500
	p, _, _ = dt.next(t0.Add(claimFairDeepLag)) // deep step: old 5, and a deep read is due
	require.Equal(t, 5.0, p.FairTag)
	dt.fairTag = 600
	p, _, _ = dt.next(t0.Add(claimFairDeepLag + claimFairDeepEvery/2))
	require.True(t, p.FairValid)
	require.NotEqual(t, 5.0, p.FairTag, "not a deep read: the next is due claimFairDeepEvery after the last")
	p, _, _ = dt.next(t0.Add(claimFairDeepLag + claimFairDeepEvery))
	require.Equal(t, 5.0, p.FairTag, "a deep read")
}

// A straggler, a job of a fair queue whose enqueue committed after the
// claims moved past its tag, is not found by the positioned reads but by
// the next deep read, before the next read of the whole index.
func TestClaimFairStragglerFoundByDeepRead(t *testing.T) {
	t.Parallel()
	b, c, ctx := newClaimQueue(t, 4, pgmsgtype.QueueConfig{})
	big := make([]pgmsgtype.EnqueueParams, 20)
	for i := range big {
		big[i] = pgmsgtype.EnqueueParams{Payload: []byte("big"), Tenant: "big"}
	}
	_, err := c.Enqueue(ctx, b.Pool, "q", big, true)
	require.NoError(t, err)
	jobs, err := c.Claim(ctx, b.Pool, "q", ClaimOpts{Max: 1}, true) // job_claim(): the client's state
	require.NoError(t, err)
	require.Len(t, jobs, 1)

	// The small tenant's enqueue tags its job at the virtual time and
	// stays open while the claims go on past that tag.
	tx, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := c.Enqueue(ctx, tx, "q", []pgmsgtype.EnqueueParams{{Payload: []byte("small"), Tenant: "small"}}, true)
	require.NoError(t, err)
	straggler := res[0].ID
	st := c.claimState("q", false)
	require.NotNil(t, st)
	future := time.Now().Add(time.Hour) // no step, no whole read, no deep read in this test unless set
	st.mu.Lock()
	st.full, st.deepRead = future, future
	st.fair, st.deep = lagged{at: future}, lagged{at: future}
	st.mu.Unlock()
	direct := func() []*pgmsgtype.Job {
		t.Helper()
		jobs, ok, err := c.claimDirect(ctx, "q", &ClaimOpts{Max: 5}, true)
		require.NoError(t, err)
		require.True(t, ok)
		return jobs
	}
	require.Len(t, direct(), 5, "the whole read (no position yet)")
	st.mu.Lock()
	passed := st.fairTag
	st.fair = lagged{at: future, oldValid: true, old: passed, midValid: true, mid: passed}
	st.deep = lagged{at: future, oldValid: true, old: 0, midValid: true, mid: 0}
	st.mu.Unlock()
	require.NoError(t, tx.Commit(ctx))

	for _, j := range direct() {
		require.NotEqual(t, straggler, j.ID, "behind the positioned read's start")
	}
	st.mu.Lock()
	st.deepRead = time.Time{} // a deep read is due
	st.mu.Unlock()
	jobs = direct()
	require.NotEmpty(t, jobs)
	require.Equal(t, straggler, jobs[0].ID, "the deep read claims the straggler first (the lowest tag)")
}
