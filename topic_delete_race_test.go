package pgmsg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// deleteTopicUnder deletes topic in a transaction of its own, runs op
// concurrently, waits until op's session is blocked on a lock the delete
// holds, then commits the delete and returns op's error.
func (tb *testBundle) deleteTopicUnder(t *testing.T, topic string, op func(ctx context.Context) error) error {
	t.Helper()
	tx, err := tb.Pool.Begin(tb.ctx)
	require.NoError(t, err)
	defer tx.Rollback(tb.ctx)
	_, err = tx.Exec(tb.ctx, tb.sqlAPI(`SELECT {s}.topic_delete($1, true)`), topic)
	require.NoError(t, err)
	var deleter int
	require.NoError(t, tx.QueryRow(tb.ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&deleter))

	done := make(chan error, 1)
	go func() { done <- op(tb.ctx) }()
	waitFor(t, 30*time.Second, "the operation to wait for the delete's locks", func() bool {
		var n int
		require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))`, deleter).Scan(&n))
		return n > 0
	})
	require.NoError(t, tx.Commit(tb.ctx))
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the operation did not return after the delete committed")
		return nil
	}
}

// A publish that looked its topic up just before a concurrent delete
// committed fails with ErrUnknownTopic (PM001; HTTP 404), not with
// PostgreSQL's "no partition of relation record found for row" (HTTP 500).
// Found by the HTTP property test.
func TestPublishRacingTopicDeleteIsUnknownTopic(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.topic(t, "t", 1)
	require.NoError(t, b.client.Publish(b.ctx, []*pgmsg.Record{{Topic: "t", Value: []byte("warm the topic cache")}}, nil))
	err := b.deleteTopicUnder(t, "t", func(ctx context.Context) error {
		return b.client.Publish(ctx, []*pgmsg.Record{{Topic: "t", Value: []byte("v")}}, nil)
	})
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic)
	require.Equal(t, "PM001", pgmsg.ErrorCode(err))
}

// segment_ensure (background segment creation) waiting for the segment
// lock of a topic being deleted answers PM001, or -1 (busy, when its 200 ms
// lock_timeout ran out first), never 42P01 (undefined table).
func TestSegmentEnsureRacingTopicDeleteIsUnknownTopic(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.topic(t, "t", 1)
	var got int
	err := b.deleteTopicUnder(t, "t", func(ctx context.Context) error {
		return b.Pool.QueryRow(ctx, b.sqlAPI(`SELECT {s}.segment_ensure('t', 0)`)).Scan(&got)
	})
	var pgErr *pgconn.PgError
	if err == nil {
		require.Equal(t, -1, got, "segment_ensure succeeded on a deleted topic")
		return
	}
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, "PM001", pgErr.Code, "%v", err)
}
