package pgmsg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// A handler that runs past WorkerOpts.JobTimeout has its context
// cancelled with ErrJobTimeout as the cause and its attempt failed as a
// timeout; one that finishes in time completes; one that ignores the
// cancellation no longer has its lease extended.
func TestWorkerJobTimeout(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "slow", pgmsg.QueueConfig{Lease: time.Second, RetryBackoff: time.Hour})
	ids := tb.enqueueN(t, "slow", 3, func(i int) pgmsg.EnqueueParams {
		return pgmsg.EnqueueParams{Payload: []byte{byte('a' + i)}}
	})
	hung := make(chan struct{})
	causes := make(chan error, 3)
	stop := tb.runWorker(t, "slow", func(ctx context.Context, j *pgmsg.Job) error {
		switch j.Payload[0] {
		case 'a': // quick
			return nil
		case 'b': // waits for its context
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		default: // ignores its context for three leases
			select {
			case <-hung:
			case <-time.After(3 * time.Second):
			}
			return errors.New("too late")
		}
	}, &pgmsg.WorkerOpts{Concurrency: 3, JobTimeout: 200 * time.Millisecond})
	defer func() { require.ErrorIs(t, stop(), context.Canceled) }()
	defer close(hung)

	require.ErrorIs(t, <-causes, pgmsg.ErrJobTimeout)
	waitFor(t, 30*time.Second, "the quick job completed, the waiting one failed", func() bool {
		a, err := tb.client.GetJob(tb.ctx, ids[0])
		require.NoError(t, err)
		b, err := tb.client.GetJob(tb.ctx, ids[1])
		require.NoError(t, err)
		return a.State == pgmsg.JobStateCompleted && b.State == pgmsg.JobStateRetrying
	})
	b, err := tb.client.GetJob(tb.ctx, ids[1])
	require.NoError(t, err)
	require.Len(t, b.Errors, 1)
	require.Contains(t, b.Errors[0].Error, "ran longer than its timeout of 200ms")

	// The hung job's lease (1 s) is not extended past the timeout.
	waitFor(t, 30*time.Second, "the hung job's lease ran out", func() bool {
		c, err := tb.client.GetJob(tb.ctx, ids[2])
		require.NoError(t, err)
		return c.State != pgmsg.JobStateRunning || c.LeaseExpiresAt.Before(time.Now())
	})
	_, err = tb.client.NewWorker("slow", func(context.Context, *pgmsg.Job) error { return nil }, &pgmsg.WorkerOpts{JobTimeout: -1})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
}

// A queue's JobTimeout and a job's own Timeout (which wins) bound the
// handler as WorkerOpts.JobTimeout does; claims, GetJob and the SQL API
// carry them, and bad values are refused on every path.
func TestJobTimeoutPerQueueAndJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	q := tb.queue(t, "tq", pgmsg.QueueConfig{JobTimeout: 300 * time.Millisecond, RetryBackoff: time.Hour})
	require.Equal(t, 300*time.Millisecond, q.JobTimeout)
	ids := tb.enqueueN(t, "tq", 3, func(i int) pgmsg.EnqueueParams {
		p := pgmsg.EnqueueParams{Payload: []byte{byte('a' + i)}}
		switch i {
		case 1:
			p.Timeout = time.Hour // its own, longer than the queue's
		case 2:
			p.Timeout = 100 * time.Millisecond
		}
		return p
	})
	for i, want := range []time.Duration{300 * time.Millisecond, time.Hour, 100 * time.Millisecond} {
		j, err := tb.client.GetJob(tb.ctx, ids[i])
		require.NoError(t, err)
		require.Equal(t, want, j.Timeout, "job %d", i)
	}

	timeouts := make(chan time.Duration, 3)
	causes := make(chan error, 2)
	stop := tb.runWorker(t, "tq", func(ctx context.Context, j *pgmsg.Job) error {
		timeouts <- j.Timeout
		if j.Payload[0] == 'b' {
			return nil
		}
		<-ctx.Done() // the queue's timeout (a), its own (c)
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, &pgmsg.WorkerOpts{Concurrency: 3})
	defer func() { require.ErrorIs(t, stop(), context.Canceled) }()
	require.ErrorIs(t, <-causes, pgmsg.ErrJobTimeout)
	require.ErrorIs(t, <-causes, pgmsg.ErrJobTimeout)
	got := []time.Duration{<-timeouts, <-timeouts, <-timeouts}
	require.ElementsMatch(t, []time.Duration{300 * time.Millisecond, time.Hour, 100 * time.Millisecond}, got, "claims carry each job's timeout")
	waitFor(t, 30*time.Second, "a and c failed as timeouts, b completed", func() bool {
		var states []pgmsg.JobState
		for _, id := range ids {
			j, err := tb.client.GetJob(tb.ctx, id)
			require.NoError(t, err)
			states = append(states, j.State)
		}
		return states[0] == pgmsg.JobStateRetrying && states[1] == pgmsg.JobStateCompleted && states[2] == pgmsg.JobStateRetrying
	})
	c, err := tb.client.GetJob(tb.ctx, ids[2])
	require.NoError(t, err)
	require.Contains(t, c.Errors[0].Error, "ran longer than its timeout of 100ms")

	// Removed from the queue: jobs without their own have none.
	q, err = tb.client.UpdateQueue(tb.ctx, "tq", pgmsg.QueueConfig{JobTimeout: pgmsg.QueueJobTimeoutNone})
	require.NoError(t, err)
	require.Zero(t, q.JobTimeout)
	a, err := tb.client.GetJob(tb.ctx, ids[0])
	require.NoError(t, err)
	require.Zero(t, a.Timeout)

	for _, d := range []time.Duration{-2 * time.Millisecond, 367 * 24 * time.Hour} {
		_, err = tb.client.UpdateQueue(tb.ctx, "tq", pgmsg.QueueConfig{JobTimeout: d})
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%s", d)
		_, err = tb.client.Enqueue(tb.ctx, "tq", pgmsg.EnqueueParams{Timeout: d}, nil)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%s", d)
	}
	// The SQL API (a queue without a worker): enqueue's p_timeout,
	// queue_create's and queue_update's p_job_timeout.
	var timeout time.Duration
	_, err = tb.Pool.Exec(tb.ctx, `SELECT `+tb.Schema+`.queue_create('sq', p_job_timeout => '1 minute')`)
	require.NoError(t, err)
	var id int64
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT id FROM `+tb.Schema+`.enqueue('sq', 'x', p_timeout => '2 minutes')`).Scan(&id))
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT timeout FROM `+tb.Schema+`.job_get($1)`, id).Scan(&timeout))
	require.Equal(t, 2*time.Minute, timeout)
	for _, bad := range []string{
		`SELECT * FROM ` + tb.Schema + `.enqueue('sq', 'x', p_timeout => '0')`,
		`SELECT * FROM ` + tb.Schema + `.enqueue('sq', 'x', p_timeout => '400 days')`,
		`SELECT * FROM ` + tb.Schema + `.queue_update('sq', p_job_timeout => '-1 second')`,
	} {
		_, err := tb.Pool.Exec(tb.ctx, bad)
		require.ErrorIs(t, pgmsg.MapError(err), pgmsg.ErrInvalidArgument, bad)
	}
	res, err := tb.client.Enqueue(tb.ctx, "sq", pgmsg.EnqueueParams{UniqueKey: "u1", Timeout: 3 * time.Second}, nil)
	require.NoError(t, err)
	keyed, err := tb.client.GetJob(tb.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, keyed.Timeout, "a job with a unique key keeps its timeout")
	var claimed time.Duration
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT timeout FROM `+tb.Schema+`.job_claim('sq')`).Scan(&claimed))
	require.Equal(t, 2*time.Minute, claimed, "job_claim hands out the job's own timeout")
}
