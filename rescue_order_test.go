package pgmsg_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// A rescue that kills jobs of several limit keys takes the keys' locks in
// lock key order before it updates a row, as every other path does, not
// in the order its UPDATE meets the rows (the dead triggers' order, with
// which two rescues, or a rescue and an enqueue, could each hold a key
// the other waits for). Here the job of the key with the larger lock key
// expired first, so an UPDATE in expiry order meets it first: while
// another transaction holds that larger key, the rescue must hold the
// smaller one and wait for the larger.
func TestRescueLocksKeysInOrder(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "rk", pgmsg.QueueConfig{KeyLimit: 1})
	s := pgx.Identifier{tb.Schema}.Sanitize()
	hash := map[string]int64{}
	for _, k := range []string{"a", "b"} {
		_, err := tb.client.Enqueue(tb.ctx, "rk", pgmsg.EnqueueParams{Payload: []byte(k), LimitKey: k, MaxAttempts: 1}, nil)
		require.NoError(t, err)
		var h int64
		require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT hashtextextended($1 || '.limit.' || q.queue_id || '.' || $2, 0)
			FROM `+s+`.queue q WHERE q.name = 'rk'`, tb.Schema, k).Scan(&h))
		hash[k] = h
	}
	small, large := "a", "b"
	if hash[small] > hash[large] {
		small, large = large, small
	}
	jobs, err := tb.client.ClaimJobs(tb.ctx, "rk", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	_, err = tb.Pool.Exec(tb.ctx, `UPDATE `+s+`.job SET lease_expires_at = now() - CASE limit_key WHEN $1 THEN interval '2 minutes' ELSE interval '1 minute' END
		WHERE limit_key IN ('a', 'b')`, large)
	require.NoError(t, err)

	holder, err := tb.Pool.Begin(tb.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(tb.ctx) }()
	_, err = holder.Exec(tb.ctx, `SELECT pg_advisory_xact_lock($1)`, hash[large])
	require.NoError(t, err)

	conn, err := tb.Pool.Acquire(tb.ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pid int32
	require.NoError(t, conn.QueryRow(tb.ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	rescued := make(chan error, 1)
	go func() {
		_, err := conn.Exec(tb.ctx, `SELECT `+s+`.job_rescue('rk')`)
		rescued <- err
	}()
	// The advisory locks of the rescue's backend, granted or awaited.
	locks := func(granted bool) []int64 {
		rows, err := tb.Pool.Query(tb.ctx, `SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks
			WHERE pid = $1 AND locktype = 'advisory' AND granted = $2`, pid, granted)
		require.NoError(t, err)
		ks, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return ks
	}
	require.Eventually(t, func() bool { return len(locks(false)) > 0 }, 30*time.Second, 10*time.Millisecond,
		"the rescue never waited for the key held elsewhere")
	require.Equal(t, []int64{hash[large]}, locks(false))
	require.Equal(t, []int64{hash[small]}, locks(true), "the rescue waits for the larger key holding the smaller")

	require.NoError(t, holder.Rollback(tb.ctx))
	require.NoError(t, <-rescued)
	for _, j := range jobs {
		got, err := tb.client.GetJob(context.WithoutCancel(tb.ctx), j.ID)
		require.NoError(t, err)
		require.Equal(t, pgmsg.JobStateDead, got.State)
	}
}
