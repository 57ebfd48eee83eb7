package pgmsg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// A queue's DeadRetention: maintenance (PruneDeadJobs, task
// queue.dead_prune) deletes its dead jobs older than it, payloads
// included; younger dead jobs, other states and queues without a
// retention keep theirs.
func TestDeadRetention(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	q := tb.queue(t, "pruned", pgmsg.QueueConfig{DeadRetention: time.Hour})
	require.Equal(t, time.Hour, q.DeadRetention)
	tb.queue(t, "kept", pgmsg.QueueConfig{})
	kill := func(queue string) int64 {
		res, err := tb.client.Enqueue(tb.ctx, queue, pgmsg.EnqueueParams{Payload: []byte("x")}, nil)
		require.NoError(t, err)
		jobs, err := tb.client.ClaimJobs(tb.ctx, queue, nil)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		_, err = tb.client.Fail(tb.ctx, jobs[0], errors.New("poison"), &pgmsg.FailOpts{Dead: true})
		require.NoError(t, err)
		return res.ID
	}
	old, young, otherQueue := kill("pruned"), kill("pruned"), kill("kept")
	alive, err := tb.client.Enqueue(tb.ctx, "pruned", pgmsg.EnqueueParams{Payload: []byte("y")}, nil)
	require.NoError(t, err)
	// Two of the dead jobs went dead two hours ago (the test moves their
	// clock rather than wait an hour).
	_, err = tb.Pool.Exec(tb.ctx, `UPDATE `+tb.Schema+`.job SET finalized_at = now() - interval '2 hours' WHERE id = ANY ($1)`,
		[]int64{old, otherQueue})
	require.NoError(t, err)

	n, err := tb.client.PruneDeadJobs(tb.ctx, "")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	_, err = tb.client.GetJob(tb.ctx, old)
	require.ErrorIs(t, err, pgmsg.ErrUnknownJob, "pruned")
	var payloads int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM `+tb.Schema+`.job_payload WHERE id = $1`, old).Scan(&payloads))
	require.Zero(t, payloads, "with its payload")
	for _, id := range []int64{young, otherQueue, alive.ID} {
		_, err := tb.client.GetJob(tb.ctx, id)
		require.NoError(t, err, "job %d kept", id)
	}

	// Through maintenance, after the retention is lowered.
	_, err = tb.client.UpdateQueue(tb.ctx, "pruned", pgmsg.QueueConfig{DeadRetention: time.Microsecond})
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond) // past the new retention: a lower bound, not a race
	_, err = tb.client.MaintainOnce(context.Background(), nil)
	require.NoError(t, err)
	_, err = tb.client.GetJob(tb.ctx, young)
	require.ErrorIs(t, err, pgmsg.ErrUnknownJob, "pruned by the maintenance task")

	q, err = tb.client.UpdateQueue(tb.ctx, "pruned", pgmsg.QueueConfig{DeadRetention: pgmsg.QueueDeadRetentionNone})
	require.NoError(t, err)
	require.Zero(t, q.DeadRetention)
	for _, d := range []time.Duration{-2 * time.Second, 36526 * 24 * time.Hour} {
		_, err = tb.client.UpdateQueue(tb.ctx, "pruned", pgmsg.QueueConfig{DeadRetention: d})
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%s", d)
	}
	_, err = tb.Pool.Exec(tb.ctx, `SELECT `+tb.Schema+`.queue_update('pruned', p_dead_retention => '-1 day')`)
	require.ErrorIs(t, pgmsg.MapError(err), pgmsg.ErrInvalidArgument)
	var pruned int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT `+tb.Schema+`.dead_prune('kept')`).Scan(&pruned))
	require.Zero(t, pruned, "a queue without a retention keeps its dead jobs")
}
