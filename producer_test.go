package pgmsg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// holdPartition locks topic's partition 0 counter row, as a long
// PublishTx would, until the returned function is called: publishes to it
// wait meanwhile.
func holdPartition(t *testing.T, tb *testBundle, topic string) func() {
	t.Helper()
	tx, err := tb.Pool.Begin(tb.ctx)
	require.NoError(t, err)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	_, err = tx.Exec(tb.ctx, `SELECT 1 FROM `+s+`.topic_partition tp JOIN `+s+`.topic t USING (topic_id)
WHERE t.name = $1 AND tp.partition = 0 FOR UPDATE OF tp`, topic)
	require.NoError(t, err)
	return func() { require.NoError(t, tx.Rollback(context.WithoutCancel(tb.ctx))) }
}

func storedRecords(t *testing.T, tb *testBundle, topic string) int64 {
	t.Helper()
	info, err := tb.client.DescribeTopic(tb.ctx, topic)
	require.NoError(t, err)
	var n int64
	for _, p := range info.PartitionInfo {
		n += p.NextOffset
	}
	return n
}

type promised struct {
	rec *pgmsg.Record
	err error
}

// A Producer holds at most MaxBufferedRecords records, queued or in
// flight: Produce then waits for room until its context ends, or fails at
// once under FailWhenFull, and a Produce waiting when Close is called
// fails with ErrClosed. Nothing of a refused record is written.
func TestProducerBufferBound(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "bound", 1)
	release := holdPartition(t, tb, "bound")
	done := make(chan promised, 16)
	promise := func(r *pgmsg.Record, err error) { done <- promised{r, err} }
	rec := func(v string) *pgmsg.Record { return &pgmsg.Record{Topic: "bound", Value: []byte(v)} }

	// Waiting for room, bounded by the context.
	p, err := tb.client.NewProducer(&pgmsg.ProducerConfig{MaxBufferedRecords: 2})
	require.NoError(t, err)
	p.Produce(tb.ctx, rec("a"), promise)
	p.Produce(tb.ctx, rec("b"), promise)
	ctx, cancel := context.WithTimeout(tb.ctx, 200*time.Millisecond)
	p.Produce(ctx, rec("late"), promise)
	cancel()
	got := <-done
	require.Equal(t, "late", string(got.rec.Value))
	require.ErrorIs(t, got.err, context.DeadlineExceeded)

	// Failing fast.
	fast, err := tb.client.NewProducer(&pgmsg.ProducerConfig{MaxBufferedRecords: 1, FailWhenFull: true})
	require.NoError(t, err)
	fast.Produce(tb.ctx, rec("c"), promise)
	fast.Produce(tb.ctx, rec("refused"), promise)
	got = <-done
	require.Equal(t, "refused", string(got.rec.Value))
	require.ErrorIs(t, got.err, pgmsg.ErrBufferFull)
	require.True(t, pgmsg.IsRetryable(got.err), "a full buffer is a 'not now'")

	// A byte bound, and Close waking a Produce that waits for room.
	byBytes, err := tb.client.NewProducer(&pgmsg.ProducerConfig{MaxBufferedBytes: 4})
	require.NoError(t, err)
	byBytes.Produce(tb.ctx, rec("larger than four"), promise) // alone, it is taken
	waiting := make(chan struct{})
	go func() {
		defer close(waiting)
		byBytes.Produce(tb.ctx, rec("x"), promise)
	}()
	select {
	case <-waiting:
		t.Fatal("Produce did not wait for room")
	case <-time.After(100 * time.Millisecond):
	}
	closed := make(chan error, 1)
	go func() { closed <- byBytes.Close(tb.ctx) }()
	<-waiting
	got = <-done
	require.Equal(t, "x", string(got.rec.Value))
	require.ErrorIs(t, got.err, pgmsg.ErrClosed)

	require.Zero(t, storedRecords(t, tb, "bound"))
	release()
	committed := map[string]bool{}
	for range 4 {
		got := <-done
		require.NoError(t, got.err, string(got.rec.Value))
		committed[string(got.rec.Value)] = true
	}
	require.Equal(t, map[string]bool{"a": true, "b": true, "c": true, "larger than four": true}, committed)
	require.NoError(t, <-closed)
	require.NoError(t, p.Close(tb.ctx))
	require.NoError(t, fast.Close(tb.ctx))
	require.Equal(t, int64(4), storedRecords(t, tb, "bound"), "refused records were not written")
}

// A batch that fails with a retryable error that wrote nothing (here
// lock_timeout while another transaction holds the partition) is retried
// until DeliveryTimeout, and stored once; with retries off it fails.
func TestProducerRetriesRetryableErrors(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "retry", 1)
	cfg, err := pgxpool.ParseConfig(tb.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "50ms"
	pool, err := pgxpool.NewWithConfig(tb.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: tb.Schema})
	require.NoError(t, err)
	t.Cleanup(client.Close)

	noRetry, err := client.NewProducer(&pgmsg.ProducerConfig{DeliveryTimeout: -1})
	require.NoError(t, err)
	release := holdPartition(t, tb, "retry")
	err = noRetry.ProduceSync(tb.ctx, &pgmsg.Record{Topic: "retry", Value: []byte("fails")})
	require.Error(t, err)
	require.True(t, pgmsg.IsRetryable(err), "lock_timeout: %v", err)
	require.NoError(t, noRetry.Close(tb.ctx))

	p, err := client.NewProducer(&pgmsg.ProducerConfig{DeliveryTimeout: time.Minute})
	require.NoError(t, err)
	start := time.Now()
	go func() {
		time.Sleep(400 * time.Millisecond)
		release()
	}()
	r := &pgmsg.Record{Topic: "retry", Value: []byte("retried")}
	require.NoError(t, p.ProduceSync(tb.ctx, r))
	require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "it was held, so it was retried")
	require.Equal(t, int64(0), r.Offset)
	require.NoError(t, p.Close(tb.ctx))
	require.Equal(t, int64(1), storedRecords(t, tb, "retry"), "stored once")
	recs, err := tb.client.Fetch(tb.ctx, "retry", 0, 0, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "retried", string(recs[0].Value))
}

func TestProducerConfigBounds(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for _, cfg := range []pgmsg.ProducerConfig{{MaxBufferedRecords: -1}, {MaxBufferedBytes: -1}} {
		_, err := tb.client.NewProducer(&cfg)
		require.Error(t, err, fmt.Sprintf("%+v", cfg))
	}
}

// 64 concurrent single-record callers through the Producer: every record
// committed once with its offset reported, gapless per partition.
func TestProducerManyCallers(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "prod", 4)
	p, err := tb.client.NewProducer(&pgmsg.ProducerConfig{Linger: time.Millisecond})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	offsets := map[[2]int64]string{}
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				r := &pgmsg.Record{Topic: "prod", Value: []byte(fmt.Sprintf("%d-%d", w, i))}
				require.NoError(t, p.ProduceSync(tb.ctx, r))
				mu.Lock()
				k := [2]int64{int64(r.Partition), r.Offset}
				_, dup := offsets[k]
				require.False(t, dup, "offset %v reported twice", k)
				offsets[k] = string(r.Value)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.NoError(t, p.Close(tb.ctx))
	all := readAll(t, tb, "prod", 4)
	requireGapless(t, all)
	n := 0
	for part, recs := range all {
		for _, r := range recs {
			require.Equal(t, offsets[[2]int64{int64(part), r.Offset}], string(r.Value))
			n++
		}
	}
	require.Equal(t, 64*20, n)
	// Produce after Close fails and writes nothing.
	err = p.ProduceSync(tb.ctx, &pgmsg.Record{Topic: "prod", Value: []byte("late")})
	require.ErrorIs(t, err, pgmsg.ErrClosed)
	require.Empty(t, pgmsg.ErrorCode(err), "ErrClosed is the Go library's own: no SQL code")
}
