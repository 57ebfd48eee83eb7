package logpublish

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// laneState reports whether a publish to the partition is in flight and
// how many calls wait behind it.
func (p *Publisher) laneState(topic string, partition int32) (busy bool, queued int) {
	l := p.lane(topic, partition)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.busy, len(l.queue)
}

// waitUntil polls cond every 5 ms until it holds, failing the test when
// ctx ends first.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Calls to one partition that queue behind a send in flight go in one
// statement: their records share a transaction (xmin), each call's are
// contiguous and in order, and a call whose record the server refuses
// fails alone while the others of its merged send are stored. The send in
// flight is held deterministically: another transaction holds the
// partition's counter row lock (PublishTx, not yet committed).
func TestPublishMergesQueuedCalls(t *testing.T) {
	t.Parallel()
	c := newTestPublisher(t, 8, 2*time.Minute)
	b, ctx := c.b, c.ctx
	c.createTopic("t", 1, map[string]any{"max_record_bytes": 1000})

	calls := func(n, size int, tag byte) [][]*Record {
		out := make([][]*Record, n)
		for i := range out {
			for j := 0; j < 3; j++ {
				out[i] = append(out[i], &Record{Topic: "t", Value: append(make([]byte, size), tag, byte(i), byte(j))})
			}
		}
		return out
	}
	// round holds the partition's lock, starts a leader call and then
	// queued, waits until all queued wait in the lane, releases the lock
	// and returns each call's error (leader first).
	round := func(leader []*Record, queued [][]*Record) []error {
		tx, err := b.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		require.NoError(t, c.PublishTx(ctx, tx, []*Record{{Topic: "t", Value: []byte("holder")}}, false))
		all := append([][]*Record{leader}, queued...)
		errc := make([]chan error, len(all))
		for i, recs := range all {
			errc[i] = make(chan error, 1)
			go func() { errc[i] <- c.publish(ctx, recs) }()
			if i == 0 {
				waitUntil(t, ctx, "the leader's send", func() bool { busy, _ := c.laneState("t", 0); return busy })
			} else {
				waitUntil(t, ctx, "a queued call", func() bool { _, q := c.laneState("t", 0); return q == i })
			}
		}
		require.NoError(t, tx.Commit(ctx))
		out := make([]error, len(all))
		for i := range errc {
			out[i] = <-errc[i]
		}
		return out
	}
	s := pgx.Identifier{b.Schema}.Sanitize()
	xmins := func(recs []*Record) map[string]bool {
		t.Helper()
		out := map[string]bool{}
		for _, r := range recs {
			var x string
			require.NoError(t, b.Pool.QueryRow(ctx, `SELECT xmin::text FROM `+s+`.record WHERE partition = 0 AND "offset" = $1`, r.Offset).Scan(&x))
			out[x] = true
		}
		return out
	}
	contiguous := func(recs []*Record) {
		t.Helper()
		for i := range recs {
			require.Equal(t, recs[0].Offset+int64(i), recs[i].Offset)
			require.Equal(t, int32(0), recs[i].Partition)
		}
	}

	// Three calls queue behind the leader: one statement for the three.
	leader := calls(1, 10, 'L')[0]
	queued := calls(3, 10, 'Q')
	for i, err := range round(leader, queued) {
		require.NoError(t, err, "call %d", i)
	}
	contiguous(leader)
	var merged []*Record
	for _, recs := range queued {
		contiguous(recs)
		merged = append(merged, recs...)
	}
	require.Len(t, xmins(merged), 1, "the queued calls were not merged into one transaction")
	require.NotEqual(t, xmins(leader), xmins(merged))

	// One queued call has a record over max_record_bytes: the merged
	// send is refused, each call goes alone, only that call fails.
	leader = calls(1, 10, 'l')[0]
	queued = calls(3, 10, 'q')
	bad := calls(1, 2000, 'x')[0]
	queued = append(queued[:1], append([][]*Record{bad}, queued[1:]...)...)
	res := round(leader, queued)
	require.NoError(t, res[0])
	for i, recs := range queued {
		if i == 1 {
			require.True(t, errors.Is(res[i+1], errs.RecordTooLarge), "call %d: %v", i, res[i+1])
			continue
		}
		require.NoError(t, res[i+1], "call %d", i)
		contiguous(recs)
	}
	var n int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.record WHERE value LIKE '%x%'::bytea`).Scan(&n))
	require.Zero(t, n, "a record of the refused call was stored")
	// Every record of the successful calls is stored once: holder ×2,
	// 4 + 3 calls of 3 records, and the leader's 3 each round.
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.record`).Scan(&n))
	require.Equal(t, 2+3+9+3+9, n)
}

// A call that waits in a lane and whose context ends before its turn
// returns the context's error and stores nothing; the calls around it are
// unaffected.
func TestPublishMergeCancelledWhileQueued(t *testing.T) {
	t.Parallel()
	c := newTestPublisher(t, 8, 2*time.Minute)
	b, ctx := c.b, c.ctx
	c.createTopic("t", 1, nil)
	tx, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, c.PublishTx(ctx, tx, []*Record{{Topic: "t", Value: []byte("holder")}}, false))

	lead := make(chan error, 1)
	go func() { lead <- c.publish(ctx, []*Record{{Topic: "t", Value: []byte("lead")}}) }()
	waitUntil(t, ctx, "the leader's send", func() bool { busy, _ := c.laneState("t", 0); return busy })
	qctx, qcancel := context.WithCancel(ctx)
	queued := make(chan error, 1)
	go func() { queued <- c.publish(qctx, []*Record{{Topic: "t", Value: []byte("gone")}}) }()
	waitUntil(t, ctx, "the queued call", func() bool { _, q := c.laneState("t", 0); return q == 1 })
	qcancel()
	require.ErrorIs(t, <-queued, context.Canceled)
	_, q := c.laneState("t", 0)
	require.Zero(t, q)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-lead)
	var n int
	s := pgx.Identifier{b.Schema}.Sanitize()
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.record WHERE value = 'gone'::bytea`).Scan(&n))
	require.Zero(t, n)
	// The lane is idle again: the next call sends at once.
	require.NoError(t, c.publish(ctx, []*Record{{Topic: "t", Value: []byte("after")}}))
	busy, _ := c.laneState("t", 0)
	require.False(t, busy)
}

// A merged send whose session is terminated while it runs (FATAL 57P01,
// which may come after a commit) is not sent again call by call: every
// call of it gets the error, as each would alone, and nothing is stored
// twice. The send is held in flight deterministically: tx1 holds the
// partition's counter row, the leader's statement waits for it and two
// calls queue in the lane; the leader's context is cancelled, which
// cancels its statement and hands the lane to the two calls, whose merged
// send then waits for tx1 too, where its backend is terminated.
func TestPublishMergedSendTerminated(t *testing.T) {
	t.Parallel()
	c := newTestPublisher(t, 8, 2*time.Minute)
	b, ctx := c.b, c.ctx
	c.createTopic("t", 1, nil)
	s := pgx.Identifier{b.Schema}.Sanitize()
	// Warm the topic's metadata cache (its lookup is not under test).
	require.NoError(t, c.publish(ctx, []*Record{{Topic: "t", Value: []byte("warm")}}))

	conn, err := b.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	// lockWaiters lists the backends waiting for a lock on this schema's
	// counter rows (publish statements: _publish_direct(), publish()).
	lockWaiters := func() []int32 {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
			  AND (query LIKE '%' || $1 || '.topic_partition%' OR query LIKE '%' || $1 || '._publish_direct(%'
			       OR query LIKE '%' || $1 || '.publish(%')`, s)
		require.NoError(t, err)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		require.NoError(t, err)
		return pids
	}

	tx1, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx1.Rollback(ctx) }()
	require.NoError(t, c.PublishTx(ctx, tx1, []*Record{{Topic: "t", Value: []byte("tx1")}}, false))

	leadCtx, leadCancel := context.WithCancel(ctx)
	lead := make(chan error, 1)
	go func() { lead <- c.publish(leadCtx, []*Record{{Topic: "t", Value: []byte("lead")}}) }()
	var leader []int32
	waitUntil(t, ctx, "the leader's statement to wait for tx1", func() bool { leader = lockWaiters(); return len(leader) == 1 })

	queued := make([]chan error, 2)
	for i := range queued {
		queued[i] = make(chan error, 1)
		go func() { queued[i] <- c.publish(ctx, []*Record{{Topic: "t", Value: []byte{'q', byte(i)}}}) }()
		waitUntil(t, ctx, "a queued call", func() bool { _, q := c.laneState("t", 0); return q == i+1 })
	}

	leadCancel()
	require.ErrorIs(t, <-lead, context.Canceled)
	var merged []int32
	waitUntil(t, ctx, "the merged send to wait for tx1", func() bool {
		_, q := c.laneState("t", 0)
		merged = lockWaiters()
		return q == 0 && len(merged) == 1 && merged[0] != leader[0]
	})
	var terminated bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, merged[0]).Scan(&terminated))
	require.True(t, terminated)
	for i, ch := range queued {
		err := <-ch
		require.Error(t, err, "call %d: the terminated merged send was reported as stored", i)
		require.False(t, errs.IsStatementError(err), "call %d: %v", i, err)
	}
	require.NoError(t, tx1.Rollback(ctx))

	// Nothing of the cancelled or the terminated send was stored, nor sent
	// again; the lane is idle and the next call goes through.
	busy, _ := c.laneState("t", 0)
	require.False(t, busy)
	require.NoError(t, c.publish(ctx, []*Record{{Topic: "t", Value: []byte("after")}}))
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+s+`.record`).Scan(&n))
	require.Equal(t, 2, n, "warm and after only")
}
