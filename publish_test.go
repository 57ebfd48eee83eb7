package pgmsg_test

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

func idemRecords(topic string, n int) []*pgmsg.Record {
	recs := make([]*pgmsg.Record, n)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", i)}
		if i%3 != 0 { // a third unkeyed, the rest over several partitions
			recs[i].Key = fmt.Appendf(nil, "k%d", i)
		}
	}
	return recs
}

// A retried idempotent publish stores nothing and reports where the first
// attempt stored the records; the next sequence is stored; a sequence
// that goes back is refused with nothing written.
func TestPublishIdempotentStoresOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "idem", 4)

	first := idemRecords("idem", 12)
	dup, err := tb.client.PublishIdempotent(tb.ctx, "p1", 0, first, nil)
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, int64(12), storedRecords(t, tb, "idem"))

	again := idemRecords("idem", 12) // the same records, as a retry sends them
	dup, err = tb.client.PublishIdempotent(tb.ctx, "p1", 0, again, nil)
	require.NoError(t, err)
	require.True(t, dup, "the retry is reported as a duplicate")
	require.Equal(t, int64(12), storedRecords(t, tb, "idem"), "nothing written twice")
	for i := range first {
		require.Equal(t, first[i].Partition, again[i].Partition, "record %d", i)
		require.Equal(t, first[i].Offset, again[i].Offset, "record %d", i)
		require.True(t, first[i].Timestamp.Equal(again[i].Timestamp), "record %d", i)
	}
	// The records read back are the first attempt's, once each.
	for p := int32(0); p < 4; p++ {
		recs, err := tb.client.Fetch(tb.ctx, "idem", p, 0, 100)
		require.NoError(t, err)
		for _, r := range recs {
			require.Equal(t, first[indexOf(t, first, p, r.Offset)].Value, r.Value)
		}
	}

	// The next sequence is stored; another producer has its own numbers.
	dup, err = tb.client.PublishIdempotent(tb.ctx, "p1", 12, idemRecords("idem", 5), nil)
	require.NoError(t, err)
	require.False(t, dup)
	dup, err = tb.client.PublishIdempotent(tb.ctx, "p2", 0, idemRecords("idem", 12), nil)
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, int64(29), storedRecords(t, tb, "idem"))

	// Going back, or overlapping the last batch, is refused: nothing written.
	for _, seq := range []int64{0, 3, 14} {
		_, err = tb.client.PublishIdempotent(tb.ctx, "p1", seq, idemRecords("idem", 5), nil)
		require.ErrorIs(t, err, pgmsg.ErrOutOfOrderSequence, "sequence %d", seq)
		require.Equal(t, "PM015", pgmsg.ErrorCode(err))
	}
	require.Equal(t, int64(29), storedRecords(t, tb, "idem"))

	// Gaps are allowed.
	dup, err = tb.client.PublishIdempotent(tb.ctx, "p1", 1000, idemRecords("idem", 2), nil)
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, int64(31), storedRecords(t, tb, "idem"))
}

func indexOf(t *testing.T, recs []*pgmsg.Record, p int32, off int64) int {
	t.Helper()
	for i, r := range recs {
		if r.Partition == p && r.Offset == off {
			return i
		}
	}
	t.Fatalf("no record at partition %d offset %d", p, off)
	return -1
}

// Bad arguments are refused before anything is written.
func TestPublishIdempotentRefusesBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "idem-bad", 2)
	for _, c := range []struct {
		name     string
		producer string
		seq      int64
		recs     []*pgmsg.Record
		want     error
	}{
		{"empty producer", "", 0, idemRecords("idem-bad", 1), pgmsg.ErrInvalidArgument},
		{"long producer", strings.Repeat("p", 201), 0, idemRecords("idem-bad", 1), pgmsg.ErrInvalidArgument},
		{"negative sequence", "p", -1, idemRecords("idem-bad", 1), pgmsg.ErrInvalidArgument},
		{"sequence overflows", "p", 1<<63 - 2, idemRecords("idem-bad", 3), pgmsg.ErrInvalidArgument},
		{"empty batch", "p", 0, nil, pgmsg.ErrEmptyBatch},
		{"unknown topic", "p", 0, idemRecords("nope", 1), pgmsg.ErrUnknownTopic},
	} {
		_, err := tb.client.PublishIdempotent(tb.ctx, c.producer, c.seq, c.recs, nil)
		require.ErrorIs(t, err, c.want, c.name)
	}
	require.Equal(t, int64(0), storedRecords(t, tb, "idem-bad"))
}

// An Idempotent Producer numbers its records per partition and stores
// each once; the producer ids of two Producers differ.
func TestProducerIdempotent(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "idem-prod", 3)
	p, err := tb.client.NewProducer(&pgmsg.ProducerConfig{Idempotent: true, MaxBatchRecords: 7})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		rec := &pgmsg.Record{Topic: "idem-prod", Key: fmt.Appendf(nil, "k%d", i%17), Value: fmt.Appendf(nil, "%d", i)}
		p.Produce(tb.ctx, rec, func(_ *pgmsg.Record, err error) {
			errs <- err
			wg.Done()
		})
	}
	wg.Wait()
	require.NoError(t, p.Close(context.Background()))
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(200), storedRecords(t, tb, "idem-prod"))
	var producers, partitions int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(DISTINCT producer_id), count(*) FROM `+
		pgx.Identifier{tb.Schema}.Sanitize()+`.producer_state`).Scan(&producers, &partitions))
	require.Equal(t, 1, producers)
	require.Equal(t, 3, partitions)

	_, err = tb.client.NewProducer(&pgmsg.ProducerConfig{Idempotent: true, ProducerID: strings.Repeat("x", 201)})
	require.Error(t, err)
}

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

// requirePublishWaits publishes recs in the background into a topic whose
// backpressure blocks them: the publish must not return before release
// (which makes a group commit, so that there is room), and must succeed
// after it.
func requirePublishWaits(t *testing.T, tb *testBundle, recs []*pgmsg.Record, release func()) {
	t.Helper()
	published := make(chan error, 1)
	go func() { published <- tb.client.Publish(context.Background(), recs, nil) }()
	select {
	case err := <-published:
		t.Fatalf("publish returned before the group made room: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case err := <-published:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("publish still blocked after the group made room")
	}
}

// Backpressure trips when the slowest group is too far behind and releases
// when it catches up; with a zero timeout it rejects at once.
func TestBackpressure(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "bp", pgmsg.TopicConfig{Partitions: 1,
		Settings: map[string]any{"max_lag_records": 10, "backpressure_timeout_ms": 0}})
	require.NoError(t, err)
	_, err = tb.client.CreateGroup(tb.ctx, "bp", "g", pgmsg.PositionEarliest)
	require.NoError(t, err)
	publishN(t, tb, "bp", 10, 10, []byte("x"))
	err = tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "bp", Value: []byte("one too many")}}, nil)
	require.ErrorIs(t, err, pgmsg.ErrBackpressure)
	require.Equal(t, "PM014", pgmsg.ErrorCode(err))
	require.True(t, pgmsg.IsRetryable(err))
	d, err := tb.client.DescribeTopic(tb.ctx, "bp")
	require.NoError(t, err)
	require.Equal(t, int64(10), d.PartitionInfo[0].NextOffset, "nothing written")

	// Blocking mode: the publish waits until the group catches up.
	_, err = tb.client.SetTopicSettings(tb.ctx, "bp", map[string]any{"backpressure_timeout_ms": 10000})
	require.NoError(t, err)
	requirePublishWaits(t, tb, []*pgmsg.Record{{Topic: "bp", Value: []byte("waits")}}, func() {
		cl, err := tb.client.Claim(tb.ctx, "bp", "g", &pgmsg.ClaimOpts{MaxRecords: 5})
		require.NoError(t, err)
		require.NoError(t, tb.client.Commit(tb.ctx, cl))
	})
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
	requirePublishWaits(t, tb, []*pgmsg.Record{{Topic: "bpb", Value: make([]byte, 20)}}, func() {
		cl, err := tb.client.Claim(tb.ctx, "bpb", "slow", &pgmsg.ClaimOpts{MaxRecords: 2})
		require.NoError(t, err)
		require.NoError(t, tb.client.Commit(tb.ctx, cl))
	})
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

// The SQL API's "not now" errors say how long to keep retrying, in their
// DETAIL, so that a client in any language need not read the settings:
// PM014 the topic's backpressure_timeout_ms (5000 unless set), PM109 the
// queue's backpressure_timeout.
func TestBackpressureErrorsCarryTheWait(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	detail := func(err error) string {
		t.Helper()
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "want a PostgreSQL error, got %v", err)
		return pgErr.Detail
	}
	publish := func(topic string) error {
		_, err := tb.Pool.Exec(tb.ctx, "SELECT * FROM "+pgx.Identifier{tb.Schema, "publish"}.Sanitize()+"($1, ARRAY['x'::bytea])", topic)
		return err
	}
	for topic, want := range map[string]string{"set": "backpressure_timeout_ms=1234", "unset": "backpressure_timeout_ms=5000"} {
		settings := map[string]any{"max_lag_records": 1}
		if topic == "set" {
			settings["backpressure_timeout_ms"] = 1234
		}
		_, err := tb.client.CreateTopic(tb.ctx, topic, pgmsg.TopicConfig{Partitions: 1, Settings: settings})
		require.NoError(t, err)
		_, err = tb.client.CreateGroup(tb.ctx, topic, "g", pgmsg.PositionEarliest)
		require.NoError(t, err)
		require.NoError(t, publish(topic))
		err = publish(topic)
		requirePMCode(t, err, "PM014")
		require.Equal(t, want, detail(err), topic)
	}

	_, err := tb.client.CreateQueue(tb.ctx, "capped", pgmsg.QueueConfig{MaxDepth: 1, BackpressureTimeout: 1500 * time.Millisecond})
	require.NoError(t, err)
	enqueue := func() error {
		_, err := tb.Pool.Exec(tb.ctx, "SELECT * FROM "+pgx.Identifier{tb.Schema, "enqueue"}.Sanitize()+"('capped', '{}'::bytea)")
		return err
	}
	require.NoError(t, enqueue())
	err = enqueue()
	requirePMCode(t, err, "PM109")
	require.Equal(t, "backpressure_timeout_ms=1500", detail(err))
}

// BenchmarkPublishBackpressure is BenchmarkPublish (batches of 100 1 KiB
// records on one partition) with each backpressure setting, limits never
// reached, and a group that never reads: the worst case of the check,
// whose cursor stays at offset 0 as the partition grows.
func BenchmarkPublishBackpressure(b *testing.B) {
	for _, setting := range []string{"none", "max_lag_records", "max_lag_bytes"} {
		b.Run(setting, func(b *testing.B) {
			client, topic := benchClient(b, 1)
			ctx := context.Background()
			if setting != "none" {
				if _, err := client.SetTopicSettings(ctx, topic, map[string]any{setting: int64(1) << 62}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := client.CreateGroup(ctx, topic, "idle", pgmsg.PositionEarliest); err != nil {
				b.Fatal(err)
			}
			recs := benchRecords(topic, 100, 1024)
			for _, r := range recs {
				r.Partition = 0
			}
			opts := &pgmsg.PublishOpts{ManualPartition: true}
			b.SetBytes(100 * 1024)
			for b.Loop() {
				if err := client.Publish(ctx, recs, opts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkEnqueueMaxDepth is one Enqueue plus the ClaimJobs and Complete
// that keep the queue's depth steady, on a queue with and without a
// max_depth, above a backlog of jobs scheduled an hour ahead (waiting, so
// counted, but never claimed): the depth check counts backlog+1 jobs.
func BenchmarkEnqueueMaxDepth(b *testing.B) {
	for _, backlog := range []int{0, 10000} {
		for _, depth := range []int64{0, 1 << 40} {
			b.Run(fmt.Sprintf("backlog=%d/max_depth=%t", backlog, depth != 0), func(b *testing.B) {
				bundle := pgtest.Schema(b, nil)
				client, err := pgmsg.NewClient(bundle.Pool, &pgmsg.Config{Schema: bundle.Schema})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(client.Close)
				ctx := context.Background()
				if _, err := client.CreateQueue(ctx, "q", pgmsg.QueueConfig{MaxDepth: depth}); err != nil {
					b.Fatal(err)
				}
				later := make([]pgmsg.EnqueueParams, 1000)
				for i := range later {
					later[i] = pgmsg.EnqueueParams{Payload: []byte(`{}`), Delay: time.Hour}
				}
				for i := 0; i < backlog; i += len(later) {
					if _, err := client.EnqueueMany(ctx, "q", later, nil); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := bundle.Pool.Exec(ctx, fmt.Sprintf("VACUUM ANALYZE %q.job", bundle.Schema)); err != nil {
					b.Fatal(err)
				}
				job := pgmsg.EnqueueParams{Payload: []byte(`{"n":1}`)}
				for b.Loop() {
					if _, err := client.Enqueue(ctx, "q", job, nil); err != nil {
						b.Fatal(err)
					}
					jobs, err := client.ClaimJobs(ctx, "q", nil)
					if err != nil || len(jobs) != 1 {
						b.Fatalf("claim: %v %v", jobs, err)
					}
					if err := client.Complete(ctx, jobs[0]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchClient gives a benchmark a client on its own migrated schema and a
// topic of the given partitions.
func benchClient(b *testing.B, partitions int) (*pgmsg.Client, string) {
	b.Helper()
	bundle := pgtest.Schema(b, nil)
	client, err := pgmsg.NewClient(bundle.Pool, &pgmsg.Config{Schema: bundle.Schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	const topic = "bench"
	if _, err := client.CreateTopic(context.Background(), topic, pgmsg.TopicConfig{Partitions: partitions}); err != nil {
		b.Fatal(err)
	}
	return client, topic
}

func benchRecords(topic string, n, size int) []*pgmsg.Record {
	recs := make([]*pgmsg.Record, n)
	for i := range recs {
		v := make([]byte, size)
		_, _ = crand.Read(v)
		recs[i] = &pgmsg.Record{Topic: topic, Value: v}
	}
	return recs
}

// BenchmarkPublish is one Client.Publish call of a batch of 1 KiB records:
// the round trip, the counter row update and the insert.
func BenchmarkPublish(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			client, topic := benchClient(b, 4)
			recs := benchRecords(topic, batch, 1024)
			ctx := context.Background()
			b.SetBytes(int64(batch * 1024))
			n := 0
			for b.Loop() {
				if err := client.Publish(ctx, recs, nil); err != nil {
					b.Fatal(err)
				}
				n += batch
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkProducerParallel is single-record ProduceSync calls from 64
// concurrent goroutines (8 per CPU on 8 CPUs, SetParallelism on fewer):
// the group commit of the batching Producer.
func BenchmarkProducerParallel(b *testing.B) {
	client, topic := benchClient(b, 4)
	prod, err := client.NewProducer(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = prod.Close(context.Background()) })
	ctx := context.Background()
	b.SetParallelism(max(1, 64/max(1, testingProcs())))
	b.SetBytes(1024)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		v := make([]byte, 1024)
		_, _ = crand.Read(v)
		for pb.Next() {
			if err := prod.ProduceSync(ctx, &pgmsg.Record{Topic: topic, Value: v}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// The volume that holds a topic's segments fills up (a 16 MiB tmpfs as a
// tablespace, filled by a file): publishes fail with ErrDiskFull (PM021)
// and store nothing, every acknowledged record stays readable by a group,
// and publishing resumes by itself once the file is removed. Needs root
// (mount) and a server on this machine; skipped otherwise.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ts, dir := smallTablespace(t, tb)
	t.Cleanup(func() { _ = tb.client.DeleteTopic(tb.ctx, "df") })

	_, err := tb.client.CreateTopic(tb.ctx, "df", pgmsg.TopicConfig{Partitions: 1, SegmentRecords: 1 << 20})
	require.NoError(t, err)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	rows, err := tb.Pool.Query(tb.ctx, fmt.Sprintf(`SELECT sg.relname FROM %[1]s.segment sg JOIN %[1]s.topic t USING (topic_id)
		WHERE t.name = 'df'`, s))
	require.NoError(t, err)
	segs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, rel := range segs {
		_, err := tb.Pool.Exec(tb.ctx, fmt.Sprintf("ALTER TABLE %s.%s SET TABLESPACE %s", s, pgx.Identifier{rel}.Sanitize(), ts))
		require.NoError(t, err)
	}
	filler := fillVolume(t, dir)

	rnd := rand.New(rand.NewChaCha8([32]byte{1}))
	acked := map[int64]string{}
	var full error
	for i := 0; i < 200 && full == nil; i++ {
		v := incompressible(rnd)
		rec := &pgmsg.Record{Topic: "df", Value: v}
		if err := tb.client.Publish(tb.ctx, []*pgmsg.Record{rec}, nil); err != nil {
			full = err
			break
		}
		acked[rec.Offset] = string(v)
	}
	require.Error(t, full, "the volume never filled")
	require.ErrorIs(t, full, pgmsg.ErrDiskFull)
	require.Equal(t, "PM021", pgmsg.ErrorCode(full))
	t.Logf("disk full after %d records: %v", len(acked), full)

	// Every acknowledged record is there, in order, without a gap.
	readAll := func(group string) map[int64]string {
		got := map[int64]string{}
		for {
			cl, err := tb.client.Claim(tb.ctx, "df", group, &pgmsg.ClaimOpts{MaxRecords: 500})
			require.NoError(t, err)
			if cl == nil {
				return got
			}
			for _, r := range cl.Records {
				got[r.Offset] = string(r.Value)
			}
			require.NoError(t, tb.client.Commit(tb.ctx, cl))
		}
	}
	require.Equal(t, acked, readAll("g"))

	// Space returns: publishing resumes, and the group reads on.
	require.NoError(t, os.Remove(filler))
	rec := &pgmsg.Record{Topic: "df", Value: []byte("after")}
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{rec}, nil))
	require.Equal(t, int64(len(acked)), rec.Offset)
	require.Equal(t, map[int64]string{rec.Offset: "after"}, readAll("g"))
}

// smallTablespace mounts a 16 MiB tmpfs and makes it a tablespace,
// dropped at the end of the test; it returns the tablespace and its
// directory. Skips unless the test runs as root (mount) with the server
// on this machine.
func smallTablespace(t *testing.T, tb *testBundle) (ts, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounts a tmpfs: needs root")
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		t.Skip("no postgres user")
	}
	dir, err = os.MkdirTemp("", "pgmsg-diskfull-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	require.NoError(t, os.Chown(dir, uid, gid))
	var local bool // the tablespace's directory must be on the server's machine
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT pg_catalog.inet_server_addr() IS NULL
		OR pg_catalog.host(pg_catalog.inet_server_addr()) IN ('127.0.0.1', '::1')`).Scan(&local))
	if !local {
		t.Skip("the server is not on this machine")
	}
	ts = "pgmsg_diskfull_" + strconv.Itoa(os.Getpid()) + "_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf(`CREATE TABLESPACE %s LOCATION '%s'`, ts, dir))
	require.NoError(t, err)
	// Registered after the test's own clean-ups run: those empty it.
	t.Cleanup(func() { _, _ = tb.Pool.Exec(context.Background(), "DROP TABLESPACE IF EXISTS "+ts) })
	return ts, dir
}

// fillVolume leaves about 2 MiB free in smallTablespace's volume with a
// file, whose path it returns: remove it and space returns.
func fillVolume(t *testing.T, dir string) string {
	t.Helper()
	filler := filepath.Join(dir, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, 14<<20), 0o600))
	return filler
}

// incompressible is 64 KiB that compression cannot shrink.
func incompressible(rnd *rand.Rand) []byte {
	v := make([]byte, 64<<10)
	for j := range v {
		v[j] = byte(rnd.Uint32())
	}
	return v
}

// Eight producers publish in transactions of which about a third roll
// back: every partition's offsets are gapless and every committed record
// is present exactly once, at the offset its publish reported.
func TestPublishConcurrentWithRollbacksIsGapless(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	const partitions, producers, rounds = 4, 8, 25
	tb.topic(t, "gapless", partitions)

	var mu sync.Mutex
	committed := map[string]*pgmsg.Record{}
	var wg sync.WaitGroup
	for w := 0; w < producers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < rounds; i++ {
				var recs []*pgmsg.Record
				for j := 0; j < 1+rng.IntN(5); j++ {
					v := fmt.Sprintf("w%d-r%d-%d", w, i, j)
					r := &pgmsg.Record{Topic: "gapless", Value: []byte(v)}
					if rng.IntN(2) == 0 {
						r.Key = []byte(fmt.Sprintf("k%d", rng.IntN(20)))
					}
					recs = append(recs, r)
				}
				tx, err := tb.Pool.Begin(tb.ctx)
				require.NoError(t, err)
				if err := tb.client.PublishTx(tb.ctx, tx, recs, nil); err != nil {
					_ = tx.Rollback(tb.ctx)
					t.Errorf("publish: %v", err)
					return
				}
				if rng.IntN(3) == 0 {
					require.NoError(t, tx.Rollback(tb.ctx))
					continue
				}
				require.NoError(t, tx.Commit(tb.ctx))
				mu.Lock()
				for _, r := range recs {
					committed[string(r.Value)] = r
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	all := readAll(t, tb, "gapless", partitions)
	requireGapless(t, all)
	seen := map[string]bool{}
	total := 0
	for _, recs := range all {
		for _, r := range recs {
			v := string(r.Value)
			require.False(t, seen[v], "record %s stored twice", v)
			seen[v] = true
			want, ok := committed[v]
			require.True(t, ok, "record %s was rolled back but is stored", v)
			require.Equal(t, want.Partition, r.Partition)
			require.Equal(t, want.Offset, r.Offset)
			if want.Key != nil {
				require.Equal(t, pgmsg.PartitionForKey(want.Key, partitions), r.Partition)
			}
			total++
		}
	}
	require.Equal(t, len(committed), total)
	require.NotZero(t, total)
}

// A publish inside the caller's transaction is invisible until commit, and
// a rolled-back one leaves no record and consumes no offset.
func TestPublishTxVisibleOnlyAfterCommit(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "outbox", 1)

	tx, err := tb.Pool.Begin(tb.ctx)
	require.NoError(t, err)
	r := &pgmsg.Record{Topic: "outbox", Value: []byte("rolled back")}
	require.NoError(t, tb.client.PublishTx(tb.ctx, tx, []*pgmsg.Record{r}, nil))
	require.Equal(t, int64(0), r.Offset)
	require.NoError(t, tx.Rollback(tb.ctx))
	recs, err := tb.client.Fetch(tb.ctx, "outbox", 0, 0, 10)
	require.NoError(t, err)
	require.Empty(t, recs)

	tx, err = tb.Pool.Begin(tb.ctx)
	require.NoError(t, err)
	r = &pgmsg.Record{Topic: "outbox", Value: []byte("committed")}
	require.NoError(t, tb.client.PublishTx(tb.ctx, tx, []*pgmsg.Record{r}, nil))
	require.Equal(t, int64(0), r.Offset, "the rolled-back publish must not consume an offset")
	// Not visible to readers before commit.
	recs, err = tb.client.Fetch(tb.ctx, "outbox", 0, 0, 10)
	require.NoError(t, err)
	require.Empty(t, recs)
	cl, err := tb.client.Claim(tb.ctx, "outbox", "g", nil)
	require.NoError(t, err)
	require.Nil(t, cl)
	require.NoError(t, tx.Commit(tb.ctx))

	cl, err = tb.client.Claim(tb.ctx, "outbox", "g", nil)
	require.NoError(t, err)
	require.Len(t, cl.Records, 1)
	require.Equal(t, "committed", string(cl.Records[0].Value))
	desc, err := tb.client.DescribeTopic(tb.ctx, "outbox")
	require.NoError(t, err)
	require.Equal(t, int64(1), desc.PartitionInfo[0].NextOffset)
	require.Equal(t, int64(1), desc.PartitionInfo[0].Records)
}

// Many publishers cross segment boundaries of tiny segments at once: every
// publish succeeds (segments are created ahead, two segments of headroom)
// and offsets stay gapless. Regression test: with less headroom, inserts
// right after another session attached a segment failed with "no
// partition of relation found for row".
func TestPublishIntoFreshSegmentsConcurrently(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "fresh", pgmsg.TopicConfig{Partitions: 4, SegmentRecords: 16})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var failures atomic.Int64
	for w := 0; w < 24; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				var recs []*pgmsg.Record
				for j := 0; j < 1+(w+i)%7; j++ {
					recs = append(recs, &pgmsg.Record{Topic: "fresh", Partition: int32((w + i) % 4), Value: []byte("x")})
				}
				if err := tb.client.Publish(tb.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}); err != nil {
					failures.Add(1)
					t.Errorf("publish: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, failures.Load())
	requireGapless(t, readAll(t, tb, "fresh", 4))
}

// A transaction that already published to a topic publishes to another
// of its partitions into a segment another session attached after the
// transaction's first publish: the rows must find it. Regression test:
// the later insert routed with the topic table's partition list as of the
// first (its lock was held already, so no invalidation was processed) and
// failed with "no partition of relation record_N found for row". Two
// ways in: the publish waits on the counter row of the session creating
// the segment, or the segment is committed before it starts.
func TestPublishTxIntoSegmentAttachedMeanwhile(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	manual := &pgmsg.PublishOpts{ManualPartition: true}
	recs := func(topic string, p int32, n int, tag string) []*pgmsg.Record {
		var out []*pgmsg.Record
		for i := range n {
			out = append(out, &pgmsg.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprintf("%s-%d", tag, i))})
		}
		return out
	}
	for _, waits := range []bool{true, false} {
		topic := fmt.Sprintf("meanwhile_%v", waits)
		// A partition starts with one segment of 16 offsets: a batch of 20
		// creates the next ones.
		_, err := tb.client.CreateTopic(tb.ctx, topic, pgmsg.TopicConfig{Partitions: 2, SegmentRecords: 16})
		require.NoError(t, err)

		b, err := tb.Pool.Begin(tb.ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Rollback(context.Background()) })
		require.NoError(t, tb.client.PublishTx(tb.ctx, b, recs(topic, 0, 1, "b0"), manual))

		a, err := tb.Pool.Begin(tb.ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Rollback(context.Background()) })
		require.NoError(t, tb.client.PublishTx(tb.ctx, a, recs(topic, 1, 20, "a"), manual))
		var aPID int
		require.NoError(t, a.QueryRow(tb.ctx, "SELECT pg_backend_pid()").Scan(&aPID))

		later := recs(topic, 1, 5, "b1")
		if !waits {
			require.NoError(t, a.Commit(tb.ctx))
			require.NoError(t, tb.client.PublishTx(tb.ctx, b, later, manual))
		} else {
			done := make(chan error, 1)
			go func() { done <- tb.client.PublishTx(tb.ctx, b, later, manual) }()
			// b's publish waits on partition 1's counter row, which a holds.
			require.Eventually(t, func() bool {
				var n int
				err := tb.Pool.QueryRow(tb.ctx,
					"SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", aPID).Scan(&n)
				return err == nil && n > 0
			}, 10*time.Second, 10*time.Millisecond, "the later publish never waited on the counter row")
			require.NoError(t, a.Commit(tb.ctx))
			require.NoError(t, <-done)
		}
		require.NoError(t, b.Commit(tb.ctx))
		require.Equal(t, int64(20), later[0].Offset)

		all := readAll(t, tb, topic, 2)
		requireGapless(t, all)
		require.Len(t, all[0], 1)
		require.Len(t, all[1], 25)
		require.Equal(t, "b1-0", string(all[1][20].Value))
	}
}

// Every kind of bad input returns its typed error and writes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "small", pgmsg.TopicConfig{Partitions: 2, MaxRecordBytes: 1000})
	require.NoError(t, err)
	ctx := tb.ctx
	c := tb.client

	check := func(err, want error) {
		t.Helper()
		require.ErrorIs(t, err, want)
		require.NotEmpty(t, pgmsg.ErrorCode(err), "error %v has no code", err)
	}
	check(c.Publish(ctx, []*pgmsg.Record{{Topic: "missing", Value: []byte("x")}}, nil), pgmsg.ErrUnknownTopic)
	check(c.Publish(ctx, nil, nil), pgmsg.ErrEmptyBatch)
	check(c.Publish(ctx, []*pgmsg.Record{{Topic: "small", Partition: 2, Value: []byte("x")}}, &pgmsg.PublishOpts{ManualPartition: true}), pgmsg.ErrPartitionOutOfRange)
	check(c.Publish(ctx, []*pgmsg.Record{{Topic: "small", Partition: -1, Value: []byte("x")}}, &pgmsg.PublishOpts{ManualPartition: true}), pgmsg.ErrPartitionOutOfRange)
	// An oversize record fails the whole batch.
	check(c.Publish(ctx, []*pgmsg.Record{{Topic: "small", Value: []byte("ok")}, {Topic: "small", Value: make([]byte, 1001)}}, nil), pgmsg.ErrRecordTooLarge)
	// Headers count towards the limit too (checked by the SQL API).
	check(c.Publish(ctx, []*pgmsg.Record{{Topic: "small", Value: make([]byte, 900), Headers: map[string][]byte{"h": make([]byte, 200)}}}, nil), pgmsg.ErrRecordTooLarge)
	check(c.Publish(ctx, []*pgmsg.Record{{Topic: "bad name!", Value: []byte("x")}}, nil), pgmsg.ErrInvalidName)
	_, err = c.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 1025})
	check(err, pgmsg.ErrInvalidArgument)
	_, err = c.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: -1})
	check(err, pgmsg.ErrInvalidArgument)
	_, err = c.Claim(ctx, "missing", "g", nil)
	check(err, pgmsg.ErrUnknownTopic)
	_, err = c.Claim(ctx, "small", "g", &pgmsg.ClaimOpts{Partition: ptr(int32(9))})
	check(err, pgmsg.ErrPartitionOutOfRange)
	_, err = c.Claim(ctx, "small", "bad group;", nil)
	check(err, pgmsg.ErrInvalidName)
	_, err = c.Fetch(ctx, "small", 0, -1, 10)
	check(err, pgmsg.ErrInvalidOffset)
	_, err = c.CreateGroup(ctx, "small", "g2", "-3")
	check(err, pgmsg.ErrInvalidOffset)
	check(c.Commit(ctx, &pgmsg.Claim{Topic: "small", Group: "never", Partition: 0, Epoch: 1}), pgmsg.ErrUnknownGroup)
	_, err = c.CreateGroup(ctx, "small", "g", pgmsg.PositionEarliest)
	require.NoError(t, err)
	check(c.Commit(ctx, &pgmsg.Claim{Topic: "small", Group: "g", Partition: 0, Epoch: 42}), pgmsg.ErrClaimNotHeld)

	// Nothing was written by any of the above.
	desc, err := c.DescribeTopic(ctx, "small")
	require.NoError(t, err)
	for _, p := range desc.PartitionInfo {
		require.Zero(t, p.NextOffset)
	}
	topics, err := c.ListTopics(ctx)
	require.NoError(t, err)
	require.Len(t, topics, 1)
	groups, err := c.ListGroups(ctx, "", "")
	require.NoError(t, err)
	for _, g := range groups {
		require.Equal(t, "g", g.Group)
	}
}
