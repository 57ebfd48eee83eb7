package pgmsg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// RetryJob makes a scheduled or retrying job claimable now, keeping its
// attempts, and wakes the queue's workers; running, dead and finished jobs
// are refused.
func TestRetryJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "r", pgmsg.QueueConfig{})
	enqueue := func(p pgmsg.EnqueueParams) int64 {
		res, err := tb.client.Enqueue(tb.ctx, "r", p, nil)
		require.NoError(t, err)
		return res.ID
	}
	claimOne := func() *pgmsg.Job {
		jobs, err := tb.client.ClaimJobs(tb.ctx, "r", nil)
		require.NoError(t, err)
		if len(jobs) == 0 {
			return nil
		}
		require.Len(t, jobs, 1)
		return jobs[0]
	}

	// Scheduled for an hour from now: retried now, claimable at once.
	later := enqueue(pgmsg.EnqueueParams{Payload: []byte("later"), Delay: time.Hour})
	require.Nil(t, claimOne())
	require.NoError(t, tb.client.RetryJob(tb.ctx, later))
	j := claimOne()
	require.NotNil(t, j)
	require.Equal(t, later, j.ID)
	require.Equal(t, 1, j.Attempt)

	// Running: refused.
	err := tb.client.RetryJob(tb.ctx, later)
	require.ErrorIs(t, err, pgmsg.ErrJobNotWaiting)
	require.Equal(t, "PM110", pgmsg.ErrorCode(err))

	// Failed, waiting for an hour's backoff: retried now, attempts kept.
	_, err = tb.client.Fail(tb.ctx, j, errors.New("boom"), &pgmsg.FailOpts{RetryIn: time.Hour})
	require.NoError(t, err)
	require.Nil(t, claimOne())
	got, err := tb.client.GetJob(tb.ctx, later)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateRetrying, got.State)
	require.NoError(t, tb.client.RetryJob(tb.ctx, later))
	j = claimOne()
	require.NotNil(t, j)
	require.Equal(t, 2, j.Attempt, "the retried job keeps its attempts")
	require.Len(t, j.Errors, 1)

	// Finished: refused. Dead: refused, pointing at dead_requeue.
	require.NoError(t, tb.client.Complete(tb.ctx, j))
	require.ErrorIs(t, tb.client.RetryJob(tb.ctx, later), pgmsg.ErrJobNotWaiting)
	dead := enqueue(pgmsg.EnqueueParams{Payload: []byte("dead")})
	j = claimOne()
	_, err = tb.client.Fail(tb.ctx, j, errors.New("fatal"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	err = tb.client.RetryJob(tb.ctx, dead)
	require.ErrorIs(t, err, pgmsg.ErrJobNotWaiting)
	require.Contains(t, err.Error(), "dead_requeue")

	// Available: left as it is. Unknown: ErrUnknownJob.
	avail := enqueue(pgmsg.EnqueueParams{Payload: []byte("now")})
	require.NoError(t, tb.client.RetryJob(tb.ctx, avail))
	require.Equal(t, avail, claimOne().ID)
	require.ErrorIs(t, tb.client.RetryJob(tb.ctx, 1<<50), pgmsg.ErrUnknownJob)

	// An idle worker polling once a minute is woken by the retry.
	soon := enqueue(pgmsg.EnqueueParams{Payload: []byte("soon"), Delay: time.Hour})
	handled := make(chan int64, 1)
	stop := tb.runWorker(t, "r", func(_ context.Context, j *pgmsg.Job) error {
		handled <- j.ID
		return nil
	}, &pgmsg.WorkerOpts{PollInterval: time.Minute})
	defer func() { require.ErrorIs(t, stop(), context.Canceled) }()
	time.Sleep(200 * time.Millisecond) // the worker's first claim finds nothing; it waits
	require.NoError(t, tb.client.RetryJob(tb.ctx, soon))
	select {
	case id := <-handled:
		require.Equal(t, soon, id)
	case <-time.After(30 * time.Second):
		t.Fatal("the worker was not woken by the retry")
	}
}
