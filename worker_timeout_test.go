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
