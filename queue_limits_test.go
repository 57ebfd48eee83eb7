package pgmsg_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// A queue's rate limit: a token bucket of one second's worth (at least
// one job), refilled at the rate. The test moves the
// bucket's clock instead of waiting.
func TestQueueRateLimit(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	q := tb.queue(t, "rl", pgmsg.QueueConfig{RateLimit: 0.001}) // one job per 1000 s
	require.Equal(t, 0.001, q.RateLimit)
	tb.enqueueN(t, "rl", 20, nil)
	claim := func(opts *pgmsg.ClaimJobsOpts) int {
		t.Helper()
		jobs, err := tb.client.ClaimJobs(tb.ctx, "rl", opts)
		require.NoError(t, err)
		return len(jobs)
	}
	require.Equal(t, 1, claim(&pgmsg.ClaimJobsOpts{Max: 10}), "a full bucket: one job")
	require.Zero(t, claim(&pgmsg.ClaimJobsOpts{Max: 10}), "empty for the next 1000 s")
	require.Zero(t, claim(&pgmsg.ClaimJobsOpts{Max: 10, MaxBytes: 1 << 20}), "job_claim() with a byte cap too")
	var n int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM `+pgx.Identifier{tb.Schema}.Sanitize()+`.job_claim('rl', 10)`).Scan(&n))
	require.Zero(t, n, "SQL job_claim")
	back := func(d time.Duration) {
		_, err := tb.Pool.Exec(tb.ctx, `UPDATE `+pgx.Identifier{tb.Schema}.Sanitize()+`.queue SET rate_at = rate_at - $1::interval WHERE name = 'rl'`, d.String())
		require.NoError(t, err)
	}
	back(1001 * time.Second)
	require.Equal(t, 1, claim(&pgmsg.ClaimJobsOpts{Max: 10}), "1000 s later: one more")

	// 100 jobs/s: bursts of 100, then the rate.
	_, err := tb.client.UpdateQueue(tb.ctx, "rl", pgmsg.QueueConfig{RateLimit: 100})
	require.NoError(t, err)
	tb.enqueueN(t, "rl", 300, nil)
	start := time.Now()
	got := claim(&pgmsg.ClaimJobsOpts{Max: 500})
	require.GreaterOrEqual(t, got, 100, "a full bucket")
	require.LessOrEqual(t, float64(got), 100+100*time.Since(start).Seconds()+1, "no more than the bucket and its refill")
	back(time.Hour)
	require.Equal(t, 100, claim(&pgmsg.ClaimJobsOpts{Max: 500}), "a bucket holds one second's worth")

	_, err = tb.client.UpdateQueue(tb.ctx, "rl", pgmsg.QueueConfig{RateLimit: pgmsg.QueueRateLimitNone})
	require.NoError(t, err)
	st, err := tb.client.QueueStats(tb.ctx, "rl")
	require.NoError(t, err)
	require.Greater(t, st.Available, int64(100))
	require.Equal(t, int(st.Available), claim(&pgmsg.ClaimJobsOpts{Max: 500}), "no limit: every available job")

	for _, r := range []float64{-2, 2e6} {
		_, err := tb.client.UpdateQueue(tb.ctx, "rl", pgmsg.QueueConfig{RateLimit: r})
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%v", r)
	}
	_, err = tb.Pool.Exec(tb.ctx, `SELECT `+pgx.Identifier{tb.Schema}.Sanitize()+`.queue_update('rl', p_rate_limit => 'NaN')`)
	require.ErrorIs(t, pgmsg.MapError(err), pgmsg.ErrInvalidArgument)
}

// MaxRunning caps the queue's running jobs across every claimer and
// worker process.
func TestQueueMaxRunning(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "mr", pgmsg.QueueConfig{MaxRunning: 2})
	tb.enqueueN(t, "mr", 40, nil)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "mr", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	more, err := tb.client.ClaimJobs(tb.ctx, "mr", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Empty(t, more)
	require.NoError(t, tb.client.Complete(tb.ctx, jobs[0]))
	more, err = tb.client.ClaimJobs(tb.ctx, "mr", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, more, 1)
	// An expired lease does not hold a slot: the claim rescues its job.
	_, err = tb.Pool.Exec(tb.ctx, `UPDATE `+pgx.Identifier{tb.Schema}.Sanitize()+`.job SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, jobs[1].ID)
	require.NoError(t, err)
	more, err = tb.client.ClaimJobs(tb.ctx, "mr", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, more, 1)
	_, err = tb.Pool.Exec(tb.ctx, `UPDATE `+pgx.Identifier{tb.Schema}.Sanitize()+`.job SET state = 'available', lease_expires_at = NULL WHERE state = 'running'`)
	require.NoError(t, err)

	// Three worker processes (clients) of 8 handlers each: never more than
	// 2 handlers at once, and every job done.
	var running, peak, done atomic.Int32
	ctx, cancel := context.WithCancel(tb.ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range 3 {
		c, err := pgmsg.NewClient(tb.Pool, &pgmsg.Config{Schema: tb.Schema, PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		defer c.Close()
		w, err := c.NewWorker("mr", func(context.Context, *pgmsg.Job) error {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
			running.Add(-1)
			done.Add(1)
			return nil
		}, &pgmsg.WorkerOpts{Concurrency: 8})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Run(ctx)
		}()
	}
	require.Eventually(t, func() bool {
		st, err := tb.client.QueueStats(tb.ctx, "mr")
		require.NoError(t, err)
		return st.Available+st.Running == 0
	}, time.Minute, 20*time.Millisecond)
	cancel()
	wg.Wait()
	require.LessOrEqual(t, peak.Load(), int32(2), "handlers at once across the workers")
	require.Equal(t, int32(40-1), done.Load(), "every job but the one completed by hand")

	q, err := tb.client.UpdateQueue(tb.ctx, "mr", pgmsg.QueueConfig{MaxRunning: pgmsg.QueueMaxRunningNone})
	require.NoError(t, err)
	require.Zero(t, q.MaxRunning)
	_, err = tb.client.UpdateQueue(tb.ctx, "mr", pgmsg.QueueConfig{MaxRunning: -5})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
}

// A worker held back by a running cap claims again as soon as one of its
// handlers finishes, not at its poll interval (here an hour).
func TestQueueMaxRunningClaimsOnFreedSlot(t *testing.T) {
	t.Parallel()
	tb := setup(t, &pgmsg.Config{PollInterval: time.Hour})
	tb.queue(t, "mf", pgmsg.QueueConfig{MaxRunning: 2})
	tb.enqueueN(t, "mf", 30, nil)
	var done atomic.Int32
	w, err := tb.client.NewWorker("mf", func(context.Context, *pgmsg.Job) error {
		done.Add(1)
		return nil
	}, &pgmsg.WorkerOpts{Concurrency: 8})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(tb.ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	require.Eventually(t, func() bool { return done.Load() == 30 }, time.Minute, 10*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
}
