package pgmsg_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// A paused queue takes jobs and hands none out, through every claim path
// (direct statement, job_claim(), a worker); resumed, its idle worker is
// woken and runs them.
func TestPauseQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t, &pgmsg.Config{PollInterval: time.Hour}) // only the resume's notification wakes the worker
	tb.queue(t, "pq", pgmsg.QueueConfig{})
	require.ErrorIs(t, tb.client.PauseQueue(tb.ctx, "nope"), pgmsg.ErrUnknownQueue)
	require.ErrorIs(t, tb.client.ResumeQueue(tb.ctx, "nope"), pgmsg.ErrUnknownQueue)

	// A first claim (job_claim()) and a second (the direct statement) on
	// the unpaused queue, so both paths are exercised below.
	_, err := tb.client.Enqueue(tb.ctx, "pq", pgmsg.EnqueueParams{Payload: []byte("0")}, nil)
	require.NoError(t, err)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "pq", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, tb.client.Complete(tb.ctx, jobs[0]))

	require.NoError(t, tb.client.PauseQueue(tb.ctx, "pq"))
	require.NoError(t, tb.client.PauseQueue(tb.ctx, "pq"), "idempotent")
	for i := range 3 {
		_, err := tb.client.Enqueue(tb.ctx, "pq", pgmsg.EnqueueParams{Payload: []byte{byte('a' + i)}}, nil)
		require.NoError(t, err, "a paused queue takes jobs")
	}
	st, err := tb.client.QueueStats(tb.ctx, "pq")
	require.NoError(t, err)
	require.True(t, st.Paused)
	require.Equal(t, int64(3), st.Available)
	jobs, err = tb.client.ClaimJobs(tb.ctx, "pq", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Empty(t, jobs, "direct claim")
	jobs, err = tb.client.ClaimJobs(tb.ctx, "pq", &pgmsg.ClaimJobsOpts{Max: 10, MaxBytes: 1 << 20})
	require.NoError(t, err)
	require.Empty(t, jobs, "job_claim()")
	var n int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM `+pgx.Identifier{tb.Schema}.Sanitize()+
		`.job_claim('pq', 10)`).Scan(&n))
	require.Zero(t, n, "SQL job_claim")

	var done atomic.Int32
	w, err := tb.client.NewWorker("pq", func(context.Context, *pgmsg.Job) error { done.Add(1); return nil }, nil)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(tb.ctx)
	defer cancel()
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()
	time.Sleep(300 * time.Millisecond)
	require.Zero(t, done.Load(), "the worker runs nothing while paused")

	require.NoError(t, tb.client.ResumeQueue(tb.ctx, "pq"))
	require.Eventually(t, func() bool { return done.Load() == 3 }, 30*time.Second, 10*time.Millisecond,
		"resumed: the notification wakes the worker (its poll interval is an hour)")
	st, err = tb.client.QueueStats(tb.ctx, "pq")
	require.NoError(t, err)
	require.False(t, st.Paused)
	cancel()
	require.ErrorIs(t, <-werr, context.Canceled)
}
