package pgmsg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// requirePMCode asserts that a plain SQL call failed with the SQLSTATE code.
func requirePMCode(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a PostgreSQL error %s, got %v", code, err)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
}

func nextOffset(t *testing.T, tb *testBundle, topic string) int64 {
	t.Helper()
	d, err := tb.client.DescribeTopic(tb.ctx, topic)
	require.NoError(t, err)
	return d.PartitionInfo[0].NextOffset
}

// Byte backpressure trips when the keys and values the slowest group has
// not committed would exceed max_lag_bytes, exactly at the threshold, and
// releases as that group commits; a publish that waits goes through once
// the group makes room.
func TestBackpressureBytes(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "bpb", pgmsg.TopicConfig{Partitions: 1,
		Settings: map[string]any{"max_lag_bytes": 100, "backpressure_timeout_ms": 0}})
	require.NoError(t, err)
	for _, g := range []string{"fast", "slow"} {
		_, err := tb.client.CreateGroup(tb.ctx, "bpb", g, pgmsg.PositionEarliest)
		require.NoError(t, err)
	}
	// Ten 10-byte records in batches of 4, 4 and 2: exactly the limit.
	publishN(t, tb, "bpb", 10, 4, []byte("0123456789"))
	one := []*pgmsg.Record{{Topic: "bpb", Value: []byte("!")}}
	err = tb.client.Publish(tb.ctx, one, nil)
	require.ErrorIs(t, err, pgmsg.ErrBackpressure)
	require.Equal(t, "PM014", pgmsg.ErrorCode(err))
	require.True(t, pgmsg.IsRetryable(err))
	require.Contains(t, err.Error(), `101 bytes ahead of group 'fast'`)
	require.Equal(t, int64(10), nextOffset(t, tb, "bpb"), "nothing written")

	// The slowest group counts: the fast one catching up changes nothing.
	commitTo(t, tb, "bpb", "fast", 10)
	err = tb.client.Publish(tb.ctx, one, nil)
	require.ErrorIs(t, err, pgmsg.ErrBackpressure)
	require.Contains(t, err.Error(), `group 'slow'`)

	// slow commits 3 records (30 bytes): 70 unread, room for exactly 30
	// bytes of key and value, not 31.
	commitTo(t, tb, "bpb", "slow", 3)
	err = tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "bpb", Key: []byte("k"), Value: make([]byte, 30)}}, nil)
	require.ErrorIs(t, err, pgmsg.ErrBackpressure, "31 bytes do not fit")
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "bpb", Key: []byte("k"), Value: make([]byte, 29)}}, nil))
	require.ErrorIs(t, tb.client.Publish(tb.ctx, one, nil), pgmsg.ErrBackpressure)

	// The same refusal through the SQL API, with its stable code.
	_, err = tb.Pool.Exec(tb.ctx, tb.sqlAPI(`SELECT * FROM {s}.publish('bpb', ARRAY['x'::bytea])`))
	requirePMCode(t, err, "PM014")

	// Blocking mode: the publish waits until the slow group commits.
	_, err = tb.client.SetTopicSettings(tb.ctx, "bpb", map[string]any{"backpressure_timeout_ms": 20000})
	require.NoError(t, err)
	published := make(chan error, 1)
	go func() {
		published <- tb.client.Publish(context.Background(), []*pgmsg.Record{{Topic: "bpb", Value: make([]byte, 20)}}, nil)
	}()
	select {
	case err := <-published:
		t.Fatalf("publish returned before the group made room: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	cl, err := tb.client.Claim(tb.ctx, "bpb", "slow", &pgmsg.ClaimOpts{MaxRecords: 2})
	require.NoError(t, err)
	require.NoError(t, tb.client.Commit(tb.ctx, cl))
	select {
	case err := <-published:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("publish still blocked after the group committed")
	}
	require.Equal(t, int64(12), nextOffset(t, tb, "bpb"))

	// Removing the setting removes the limit.
	_, err = tb.client.SetTopicSettings(tb.ctx, "bpb", map[string]any{"max_lag_bytes": nil})
	require.NoError(t, err)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "bpb", Value: make([]byte, 1000)}}, nil))
}

// Byte positions survive partitions, multi-partition publishes and keys:
// each record's byte_position is the partition's bytes before it.
func TestBackpressureBytePositions(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "pos", pgmsg.TopicConfig{Partitions: 2,
		Settings: map[string]any{"max_lag_bytes": 1 << 20}})
	require.NoError(t, err)
	var recs []*pgmsg.Record
	for i := 0; i < 6; i++ {
		recs = append(recs, &pgmsg.Record{Topic: "pos", Partition: int32(i % 2), Key: []byte("kk"), Value: make([]byte, i)})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	rows, err := tb.Pool.Query(tb.ctx, tb.sqlAPI(`SELECT partition, "offset", byte_position FROM {s}.record ORDER BY 1, 2`))
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Partition int32
		Offset    int64
		Pos       int64
	}])
	require.NoError(t, err)
	// partition 0 holds values of 0, 2, 4 bytes, partition 1 of 1, 3, 5,
	// each with a 2-byte key.
	want := [][3]int64{{0, 0, 0}, {0, 1, 2}, {0, 2, 6}, {1, 0, 0}, {1, 1, 3}, {1, 2, 8}}
	require.Len(t, got, len(want))
	for i, w := range want {
		require.Equal(t, w, [3]int64{int64(got[i].Partition), got[i].Offset, got[i].Pos})
	}
	var nextBytes []int64
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, tb.sqlAPI(`SELECT array_agg(next_byte ORDER BY partition) FROM {s}.topic_partition`)).Scan(&nextBytes))
	require.Equal(t, []int64{12, 15}, nextBytes)
}

// A topic without max_lag_bytes keeps no byte accounting at all, and a
// group far behind never refuses its publishes.
func TestBackpressureUnsetCostsNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "free", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	_, err = tb.client.CreateGroup(tb.ctx, "free", "idle", pgmsg.PositionEarliest)
	require.NoError(t, err)
	publishN(t, tb, "free", 2000, 500, make([]byte, 1024))
	var positioned, nextByte int64
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, tb.sqlAPI(`SELECT count(byte_position), (SELECT sum(next_byte) FROM {s}.topic_partition)
		FROM {s}.record`)).Scan(&positioned, &nextByte))
	require.Zero(t, positioned)
	require.Zero(t, nextByte)
}

// Backpressure settings are checked when they are set.
func TestBackpressureSettingsValidated(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "v", 1)
	for _, bad := range []map[string]any{
		{"max_lag_bytes": -1}, {"max_lag_bytes": 0}, {"max_lag_bytes": "lots"}, {"max_lag_bytes": 1.5},
		{"max_lag_records": 0}, {"max_lag_records": true}, {"backpressure_timeout_ms": -1},
	} {
		_, err := tb.client.SetTopicSettings(tb.ctx, "v", bad)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%v", bad)
		require.Equal(t, "PM004", pgmsg.ErrorCode(err))
	}
	_, err := tb.client.CreateTopic(tb.ctx, "v2", pgmsg.TopicConfig{Partitions: 1, Settings: map[string]any{"max_lag_bytes": -5}})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	top, err := tb.client.SetTopicSettings(tb.ctx, "v", map[string]any{"max_lag_bytes": 1 << 30, "backpressure_timeout_ms": 0})
	require.NoError(t, err)
	require.EqualValues(t, 1<<30, top.Settings["max_lag_bytes"])
	_, err = tb.client.SetTopicSettings(tb.ctx, "v", map[string]any{"max_lag_bytes": nil})
	require.NoError(t, err, "null removes")
}

// Queue max depth: an enqueue that would put more than max_depth jobs
// waiting or running fails with ErrQueueFull (dead jobs do not count), and
// room comes back as jobs complete.
func TestQueueMaxDepth(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	q := tb.queue(t, "capped", pgmsg.QueueConfig{MaxDepth: 3, BackpressureTimeout: pgmsg.QueueBackpressureNoWait, MaxAttempts: 1})
	require.Equal(t, int64(3), q.MaxDepth)
	require.Equal(t, pgmsg.QueueBackpressureNoWait, q.BackpressureTimeout)
	job := pgmsg.EnqueueParams{Payload: []byte(`{}`)}

	_, err := tb.client.EnqueueMany(tb.ctx, "capped", []pgmsg.EnqueueParams{job, job, job, job}, nil)
	requireCode(t, err, pgmsg.ErrQueueFull, "PM109")
	tb.enqueueN(t, "capped", 3, nil)
	_, err = tb.client.Enqueue(tb.ctx, "capped", job, nil)
	requireCode(t, err, pgmsg.ErrQueueFull, "PM109")
	require.True(t, pgmsg.IsRetryable(err))
	require.Contains(t, err.Error(), "max_depth of 3")
	require.Equal(t, int64(3), tb.stats(t, "capped").Available, "nothing written")

	// Running jobs count; completed and dead ones do not.
	claimed, err := tb.client.ClaimJobs(tb.ctx, "capped", &pgmsg.ClaimJobsOpts{Max: 2})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	_, err = tb.client.Enqueue(tb.ctx, "capped", job, nil)
	require.ErrorIs(t, err, pgmsg.ErrQueueFull)
	require.NoError(t, tb.client.Complete(tb.ctx, claimed[0]))
	_, err = tb.client.Enqueue(tb.ctx, "capped", job, nil)
	require.NoError(t, err, "a completed job makes room")
	_, err = tb.client.Enqueue(tb.ctx, "capped", job, nil)
	require.ErrorIs(t, err, pgmsg.ErrQueueFull)
	fr, err := tb.client.Fail(tb.ctx, claimed[1], errors.New("boom"), nil)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateDead, fr.State)
	_, err = tb.client.Enqueue(tb.ctx, "capped", job, nil)
	require.NoError(t, err, "a dead job makes room")

	// The SQL API refuses with the same code.
	_, err = tb.Pool.Exec(tb.ctx, tb.sqlAPI(`SELECT * FROM {s}.enqueue('capped', '{}')`))
	requirePMCode(t, err, "PM109")

	// EnqueueTx never waits inside the caller's transaction, whatever the
	// queue's timeout.
	_, err = tb.client.UpdateQueue(tb.ctx, "capped", pgmsg.QueueConfig{BackpressureTimeout: 20 * time.Second})
	require.NoError(t, err)
	tx, err := tb.Pool.Begin(tb.ctx)
	require.NoError(t, err)
	start := time.Now()
	_, err = tb.client.EnqueueTx(tb.ctx, tx, "capped", job, nil)
	require.ErrorIs(t, err, pgmsg.ErrQueueFull)
	require.Less(t, time.Since(start), 5*time.Second, "EnqueueTx fails at once")
	require.NoError(t, tx.Rollback(tb.ctx))

	// Enqueue waits for room: it returns once a worker completes a job.
	enqueued := make(chan error, 1)
	go func() {
		_, err := tb.client.Enqueue(context.Background(), "capped", job, nil)
		enqueued <- err
	}()
	select {
	case err := <-enqueued:
		t.Fatalf("enqueue returned before a job completed: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	next, err := tb.client.ClaimJobs(tb.ctx, "capped", nil)
	require.NoError(t, err)
	require.Len(t, next, 1)
	require.NoError(t, tb.client.Complete(tb.ctx, next[0]))
	select {
	case err := <-enqueued:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("enqueue still blocked after a job completed")
	}
	s := tb.stats(t, "capped")
	require.Equal(t, int64(3), s.Available+s.Running)

	// Lifting the limit.
	q, err = tb.client.UpdateQueue(tb.ctx, "capped", pgmsg.QueueConfig{MaxDepth: pgmsg.QueueMaxDepthNone})
	require.NoError(t, err)
	require.Zero(t, q.MaxDepth)
	require.Equal(t, 20*time.Second, q.BackpressureTimeout, "unchanged")
	tb.enqueueN(t, "capped", 10, nil)
}

// Queue depth settings are checked when they are set, in Go and in SQL.
func TestQueueMaxDepthValidated(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{MaxDepth: -2})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{BackpressureTimeout: -time.Second})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	q := tb.queue(t, "q", pgmsg.QueueConfig{})
	require.Zero(t, q.MaxDepth, "no limit by default")
	require.Equal(t, pgmsg.QueueBackpressureTimeoutDefault, q.BackpressureTimeout)
	_, err = tb.Pool.Exec(tb.ctx, tb.sqlAPI(`SELECT * FROM {s}.queue_update('q', p_max_depth => -1)`))
	requirePMCode(t, err, "PM004")
	_, err = tb.Pool.Exec(tb.ctx, tb.sqlAPI(`SELECT * FROM {s}.queue_update('q', p_backpressure_timeout => '-1 second')`))
	requirePMCode(t, err, "PM004")
	var depth int64
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, tb.sqlAPI(
		`SELECT max_depth FROM {s}.queue_update('q', p_max_depth => 7, p_backpressure_timeout => '0')`)).Scan(&depth))
	require.Equal(t, int64(7), depth)
	qs, err := tb.client.ListQueues(tb.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(7), qs[0].MaxDepth)
	require.Equal(t, pgmsg.QueueBackpressureNoWait, qs[0].BackpressureTimeout)
}
