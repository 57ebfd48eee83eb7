package pgmsg_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// Migration 013: job_claim starts reading the claim index where the
// session's previous claim ended. These tests run every claim on one
// connection (one session), as the position is kept per session.

func (tb *testBundle) claimOn(t *testing.T, conn *pgxpool.Conn, queue string, limit int) []int64 {
	t.Helper()
	rows, err := conn.Query(tb.ctx, tb.sqlAPI(`SELECT id FROM {s}.job_claim($1, $2)`), queue, limit)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

func (tb *testBundle) enqueueSQL(t *testing.T, queue string, priority int, runAt *time.Time) int64 {
	t.Helper()
	var id int64
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, tb.sqlAPI(`SELECT id FROM {s}.enqueue($1, 'x', p_priority => $2, p_run_at => $3)`),
		queue, priority, runAt).Scan(&id))
	return id
}

// A job that becomes claimable behind the session's position (here: run_at
// in the past, enqueued after the claims passed it) is still claimed, first,
// by the next claim that finds fewer jobs ahead of the position than it
// asks for.
func TestJobClaimFindsJobsBehindThePosition(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	conn, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()

	a := b.enqueueSQL(t, "q", 0, nil)
	bID := b.enqueueSQL(t, "q", 0, nil)
	require.Equal(t, []int64{a}, b.claimOn(t, conn, "q", 1))
	past := time.Now().Add(-time.Hour)
	late := b.enqueueSQL(t, "q", 0, &past)
	require.Equal(t, []int64{late, bID}, b.claimOn(t, conn, "q", 10), "the late job sorts first and is not skipped")
	require.Empty(t, b.claimOn(t, conn, "q", 10))
}

// A job of a higher priority than the position's is claimed first at once,
// even when jobs ahead of the position would fill the claim.
func TestJobClaimPositionHigherPriorityFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	conn, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()

	low := make([]int64, 5)
	for i := range low {
		low[i] = b.enqueueSQL(t, "q", 0, nil)
	}
	require.Equal(t, low[:1], b.claimOn(t, conn, "q", 1))
	urgent := b.enqueueSQL(t, "q", 7, nil)
	require.Equal(t, []int64{urgent, low[1]}, b.claimOn(t, conn, "q", 2))
	// And a lower priority comes after the position's own.
	lower := b.enqueueSQL(t, "q", -3, nil)
	require.Equal(t, []int64{low[2], low[3], low[4], lower}, b.claimOn(t, conn, "q", 4))
}

// A job behind the position is claimed within about a second even while
// jobs ahead of the position would fill every claim: the claim reads the
// whole index at least once a second per session.
func TestJobClaimBehindPositionNotStarvedByBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	b.enqueueN(t, "q", 200, nil)
	conn, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()

	require.Len(t, b.claimOn(t, conn, "q", 1), 1)
	past := time.Now().Add(-time.Hour)
	late := b.enqueueSQL(t, "q", 0, &past)
	start := time.Now()
	for {
		ids := b.claimOn(t, conn, "q", 1)
		require.Len(t, ids, 1, "the backlog is not exhausted")
		if ids[0] == late {
			break
		}
		// At most 199 claims pass it over; each takes a while, so a
		// bound on claims would depend on speed. The bound is in time,
		// from the other side: it is found once a new second starts.
		require.Less(t, time.Since(start), 30*time.Second, "the late job was never claimed")
		time.Sleep(20 * time.Millisecond)
	}
}

// The point of the position: with a snapshot held open (vacuum can remove
// nothing), a claim reads the few index entries ahead of the position, not
// one entry per job claimed since the snapshot was taken. A session without
// a position (the old behaviour) still reads them all.
func TestJobClaimUnderHeldSnapshotReadsFewIndexEntries(t *testing.T) {
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})

	holder, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer holder.Rollback(b.ctx)
	_, err = holder.Exec(b.ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	require.NoError(t, err)
	var one int
	require.NoError(t, holder.QueryRow(b.ctx, "SELECT 1").Scan(&one))

	const claimed = 2000
	b.enqueueN(t, "q", claimed+200, nil)
	conn, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	for i := 0; i < claimed/100; i++ {
		require.Len(t, b.claimOn(t, conn, "q", 100), 100)
	}

	// Index entries of job_claim read by one claim of 10: the backend's
	// not yet flushed count (pg_stat_get_xact_tuples_returned, idx_tup_read
	// in pg_stat_user_indexes once flushed) before and after the claim, in
	// one transaction (stats are flushed between transactions only).
	entriesRead := func(c *pgxpool.Conn) int64 {
		tx, err := c.Begin(b.ctx)
		require.NoError(t, err)
		defer tx.Rollback(b.ctx)
		count := b.sqlAPI(`SELECT pg_catalog.pg_stat_get_xact_tuples_returned('{s}.job_claim'::regclass)`)
		var before, after int64
		require.NoError(t, tx.QueryRow(b.ctx, count).Scan(&before))
		var n int
		require.NoError(t, tx.QueryRow(b.ctx, b.sqlAPI(`SELECT count(*) FROM {s}.job_claim('q', 10)`)).Scan(&n))
		require.Equal(t, 10, n)
		require.NoError(t, tx.QueryRow(b.ctx, count).Scan(&after))
		return after - before
	}
	// A claim uses its position within the second of the session's last
	// full read: a committed claim just before makes sure of one, unless a
	// second boundary falls in between (then try again).
	var read int64
	for i := 0; i < 5; i++ {
		require.Len(t, b.claimOn(t, conn, "q", 1), 1)
		if read = entriesRead(conn); read < claimed {
			break
		}
	}
	require.Less(t, read, int64(100), "a positioned claim walked the claimed jobs' index entries")

	fresh, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer fresh.Release()
	// Make sure this is a different session than conn.
	var pidA, pidB int
	require.NoError(t, conn.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&pidA))
	require.NoError(t, fresh.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&pidB))
	require.NotEqual(t, pidA, pidB)
	require.GreaterOrEqual(t, entriesRead(fresh), int64(claimed), "without a position the claim reads every dead entry (the test would prove nothing)")
}

// p_async lets a standalone claim commit without waiting for its WAL
// flush (ClaimJobs passes it); a claim inside the caller's transaction
// (ClaimJobsTx, or the SQL API's default) leaves the caller's
// synchronous_commit alone.
func TestJobClaimAsyncOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	b.enqueueN(t, "q", 3, nil)
	setting := func(tx pgx.Tx) string {
		var v string
		require.NoError(t, tx.QueryRow(b.ctx, "SELECT pg_catalog.current_setting('synchronous_commit')").Scan(&v))
		return v
	}
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	// The test clusters may run with synchronous_commit off: start from on.
	_, err = tx.Exec(b.ctx, "SET LOCAL synchronous_commit = on")
	require.NoError(t, err)
	require.Equal(t, "on", setting(tx))
	jobs, err := b.client.ClaimJobsTx(b.ctx, tx, "q", &pgmsg.ClaimJobsOpts{Max: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, "on", setting(tx), "ClaimJobsTx changed the caller's synchronous_commit")
	var n int
	require.NoError(t, tx.QueryRow(b.ctx, b.sqlAPI(`SELECT count(*) FROM {s}.job_claim('q', 1)`)).Scan(&n))
	require.Equal(t, "on", setting(tx))
	require.NoError(t, tx.QueryRow(b.ctx, b.sqlAPI(`SELECT count(*) FROM {s}.job_claim('q', 1, p_async => true)`)).Scan(&n))
	require.Equal(t, 1, n)
	require.Equal(t, "off", setting(tx))
	require.NoError(t, tx.Commit(b.ctx))
}
