package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// The engine's own decisions (how records are cut into batches, when a
// batch goes, the buffer's bounds, which failures are retried) shown
// through its Sink; the publish itself is tested against PostgreSQL in
// the root (producer_test.go, publish_test.go).

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testSink records the batches published, in order. publish, when set,
// answers each attempt (n counts from 1); inFlight catches two publishes
// to one partition at once.
type testSink struct {
	mu       sync.Mutex
	batches  []Batch
	attempts int
	inFlight map[int32]bool
	overlap  bool
	publish  func(n int, b Batch) error
}

func (s *testSink) Partition(rec *pgmsgtype.Record, partitions int, manual bool, spread Spreader) (int32, error) {
	if manual {
		return rec.Partition, nil
	}
	if rec.Key != nil {
		return 0, nil // its key's partition (one in these tests' keyed records)
	}
	return spread.Spread(rec.Topic, partitions), nil
}

func (s *testSink) Publish(_ context.Context, b Batch) error {
	s.mu.Lock()
	if s.inFlight == nil {
		s.inFlight = map[int32]bool{}
	}
	s.overlap = s.overlap || s.inFlight[b.Partition]
	s.inFlight[b.Partition] = true
	s.attempts++
	n, publish := s.attempts, s.publish
	s.mu.Unlock()
	var err error
	if publish != nil {
		err = publish(n, b)
	}
	s.mu.Lock()
	s.inFlight[b.Partition] = false
	if err == nil {
		s.batches = append(s.batches, b)
	}
	s.mu.Unlock()
	return err
}

func testConfig() Config {
	return Config{
		MaxBatchRecords:    1000,
		MaxBatchBytes:      4 << 20,
		RequestTimeout:     time.Second,
		MaxBufferedRecords: 10000,
		DeliveryTimeout:    time.Minute,
	}
}

func record(topic string, value string) *pgmsgtype.Record {
	return &pgmsgtype.Record{Topic: topic, Value: []byte(value)}
}

// promises returns a promise to pass to Produce and a function that waits
// for n calls of it and returns their errors in call order.
func promises(t *testing.T) (func(*pgmsgtype.Record, error), func(n int) []error) {
	ch := make(chan error, 100)
	return func(_ *pgmsgtype.Record, err error) { ch <- err }, func(n int) []error {
		t.Helper()
		out := make([]error, 0, n)
		for range n {
			select {
			case err := <-ch:
				out = append(out, err)
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of %d promises called", len(out), n)
			}
		}
		select {
		case err := <-ch:
			t.Fatalf("a promise called once too often (%v)", err)
		default:
		}
		return out
	}
}

// Records to one partition go in batches of at most MaxBatchRecords (and
// MaxBatchBytes, beyond a batch's first record), one in flight at a time,
// in the order produced.
func TestBatchesCutInOrder(t *testing.T) {
	sink := &testSink{publish: func(int, Batch) error { time.Sleep(time.Millisecond); return nil }}
	cfg := testConfig()
	cfg.MaxBatchRecords = 3
	cfg.MaxBatchBytes = 5 // two 2-byte records, or one larger
	cfg.ManualPartition = true
	p := New(sink, cfg)
	promise, wait := promises(t)
	values := []string{"00", "01", "02", "03", "big-04", "05", "06"}
	for _, v := range values {
		p.Produce(context.Background(), record("t", v), 1, promise)
	}
	for _, err := range wait(len(values)) {
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(context.Background()))

	require.False(t, sink.overlap, "two batches of one partition in flight at once")
	var got []string
	for _, b := range sink.batches {
		require.Equal(t, "t", b.Topic)
		require.LessOrEqual(t, len(b.Records), cfg.MaxBatchRecords)
		bytes := 0
		for _, r := range b.Records {
			bytes += len(r.Value)
			got = append(got, string(r.Value))
		}
		if len(b.Records) > 1 {
			require.LessOrEqual(t, bytes, cfg.MaxBatchBytes)
		}
		require.Empty(t, b.ProducerID)
	}
	require.Equal(t, values, got)
}

// With Linger, a batch that is not full waits for it before it goes; a
// full one goes at once; Flush sends what lingers.
func TestLinger(t *testing.T) {
	sink := &testSink{}
	cfg := testConfig()
	cfg.Linger = 50 * time.Millisecond
	p := New(sink, cfg)
	promise, wait := promises(t)
	start := time.Now()
	p.Produce(context.Background(), record("t", "a"), 1, promise)
	require.NoError(t, wait(1)[0])
	require.GreaterOrEqual(t, time.Since(start), cfg.Linger)

	cfg.Linger = time.Hour
	cfg.MaxBatchRecords = 2
	p2 := New(sink, cfg)
	p2.Produce(context.Background(), record("t", "b"), 1, promise)
	p2.Produce(context.Background(), record("t", "c"), 1, promise) // full: goes now
	require.NoError(t, wait(2)[1])
	p2.Produce(context.Background(), record("t", "d"), 1, promise)
	require.NoError(t, p2.Flush(context.Background()))
	require.NoError(t, wait(1)[0])
	require.NoError(t, p.Close(context.Background()))
	require.NoError(t, p2.Close(context.Background()))
	require.Len(t, sink.batches, 3)
	require.Len(t, sink.batches[1].Records, 2)
}

// A full buffer fails a record at once under FailWhenFull, or makes
// Produce wait for room until its context ends or the producer closes.
func TestBufferFull(t *testing.T) {
	release := make(chan struct{})
	sink := &testSink{publish: func(int, Batch) error { <-release; return nil }}
	cfg := testConfig()
	cfg.MaxBufferedRecords = 1
	cfg.FailWhenFull = true
	p := New(sink, cfg)
	promise, wait := promises(t)
	p.Produce(context.Background(), record("t", "held"), 1, promise)
	p.Produce(context.Background(), record("t", "refused"), 1, promise)
	require.ErrorIs(t, wait(1)[0], errs.BufferFull)

	cfg.FailWhenFull = false
	p2 := New(sink, cfg)
	p2.Produce(context.Background(), record("t", "held"), 1, promise)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	p2.Produce(ctx, record("t", "waits"), 1, promise)
	cancel()
	require.ErrorIs(t, wait(1)[0], context.DeadlineExceeded)

	done := make(chan struct{})
	go func() {
		p2.Produce(context.Background(), record("t", "waits until Close"), 1, promise)
		close(done)
	}()
	// Whether that Produce waits already or comes after Close, it fails.
	closed := make(chan error, 1)
	go func() { closed <- p2.Close(context.Background()) }()
	<-done
	require.ErrorIs(t, wait(1)[0], errs.Closed)
	close(release)
	require.NoError(t, <-closed)
	require.NoError(t, p.Close(context.Background()))
	for _, err := range wait(2) {
		require.NoError(t, err)
	}
}

// A batch is retried while it fails with a retryable error that wrote
// nothing; one whose outcome is unknown fails at once, unless it is
// idempotent, when it is sent again with the same sequence.
func TestRetries(t *testing.T) {
	rolledBack := errs.Map(&pgconn.PgError{Code: "40001"})
	unknown := errors.New("write: broken pipe")
	for _, tc := range []struct {
		name       string
		producerID string
		fail       error
		attempts   int
		wantErr    error
	}{
		{"rolled back", "", rolledBack, 3, nil},
		{"unknown outcome", "", unknown, 1, unknown},
		{"unknown outcome, idempotent", "p1", unknown, 3, nil},
		{"answered, idempotent", "p1", errs.New(errs.InvalidArgument, "no"), 1, errs.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seqs []int64
			sink := &testSink{publish: func(n int, b Batch) error {
				seqs = append(seqs, b.Sequence)
				if n < 3 {
					return tc.fail
				}
				return nil
			}}
			cfg := testConfig()
			cfg.ProducerID = tc.producerID
			p := New(sink, cfg)
			promise, wait := promises(t)
			p.Produce(context.Background(), record("t", "a"), 1, promise)
			err := wait(1)[0]
			if tc.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.wantErr)
			}
			require.NoError(t, p.Close(context.Background()))
			require.Equal(t, tc.attempts, sink.attempts)
			for _, s := range seqs {
				require.Zero(t, s)
			}
		})
	}
}

// An idempotent producer numbers its records per partition: each batch
// starts where the one before ended, failed or not.
func TestIdempotentSequences(t *testing.T) {
	sink := &testSink{}
	cfg := testConfig()
	cfg.ProducerID = "p1"
	cfg.MaxBatchRecords = 2
	cfg.ManualPartition = true
	p := New(sink, cfg)
	promise, wait := promises(t)
	for range 5 {
		p.Produce(context.Background(), record("t", "v"), 1, promise)
	}
	wait(5)
	require.NoError(t, p.Close(context.Background()))
	next := int64(0)
	for _, b := range sink.batches {
		require.Equal(t, "p1", b.ProducerID)
		require.Equal(t, next, b.Sequence)
		next += int64(len(b.Records))
	}
	require.Equal(t, int64(5), next)
}

// The sticky partition of records without key moves on once its batch
// is cut.
func TestStickyPartitionMovesOn(t *testing.T) {
	release := make(chan struct{})
	sink := &testSink{publish: func(int, Batch) error { <-release; return nil }}
	p := New(sink, testConfig())
	promise, wait := promises(t)
	p.Produce(context.Background(), record("t", "a"), 1000, promise)
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		_, ok := p.sticky["t"]
		return !ok
	}, 5*time.Second, time.Millisecond)
	close(release)
	require.NoError(t, wait(1)[0])
	require.NoError(t, p.Close(context.Background()))
}

// The Producer retries a failed batch only when nothing of it can have
// been written: the server answered with an error, or it was never sent.
func TestNothingWritten(t *testing.T) {
	if !nothingWritten(errs.Map(&pgconn.PgError{Code: "55P03"})) {
		t.Error("a server error rolled its transaction back")
	}
	if nothingWritten(errors.New("write: broken pipe")) {
		t.Error("an error of unknown outcome counted as nothing written")
	}
}

// Produce after Close fails the record with errs.Closed.
func TestProduceAfterClose(t *testing.T) {
	p := New(&testSink{}, testConfig())
	require.NoError(t, p.Close(context.Background()))
	promise, wait := promises(t)
	p.Produce(context.Background(), record("t", "a"), 1, promise)
	require.ErrorIs(t, wait(1)[0], errs.Closed)
}

// With Linger 0, a partition whose batch carried several sticky records
// waits for their callers to produce again (adaptiveLinger, a minute
// here) and sends when as many records are pending as the batch carried
// plus those already waiting, not when the timer fires: eight closed-loop
// callers, the first alone in a batch held in flight while the other
// seven queue, then its next record pending while the seven's batch is
// held. The eight next records go in one batch. A batch of keyed records
// (or with Linger set) does not wait.
func TestLingerForCallers(t *testing.T) {
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	sink := &testSink{publish: func(n int, _ Batch) error {
		if n <= len(gates) {
			<-gates[n-1]
		}
		return nil
	}}
	p := New(sink, testConfig())
	p.callersLinger = time.Minute
	ctx := context.Background()
	pending := func(n int) func() bool {
		return func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			b := p.parts[topicPartition{"t", 0}]
			return b != nil && len(b.pending) == n
		}
	}
	errc := make(chan error, 16)
	caller := func(i int) {
		for _, round := range []string{"a", "b"} {
			done := make(chan error, 1)
			p.Produce(ctx, record("t", fmt.Sprintf("%s%d", round, i)), 1, func(_ *pgmsgtype.Record, err error) { done <- err })
			if err := <-done; err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}
	go caller(0)
	require.Eventually(t, func() bool { sink.mu.Lock(); defer sink.mu.Unlock(); return sink.attempts == 1 }, 5*time.Second, time.Millisecond)
	for i := 1; i < 8; i++ {
		go caller(i)
	}
	require.Eventually(t, pending(7), 5*time.Second, time.Millisecond)
	close(gates[0]) // the first batch ends: its caller's next record waits behind the seven
	require.Eventually(t, pending(1), 5*time.Second, time.Millisecond)
	close(gates[1])
	for range 8 {
		select {
		case err := <-errc:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("the callers' second records were not sent before the linger's timer")
		}
	}
	sink.mu.Lock()
	sizes := make([]int, len(sink.batches))
	for i, b := range sink.batches {
		sizes[i] = len(b.Records)
	}
	sink.mu.Unlock()
	require.Equal(t, []int{1, 7, 8}, sizes)
	require.NoError(t, p.Close(ctx))

	// Keyed records: the sender does not wait after their batch.
	held := make(chan struct{})
	sink = &testSink{publish: func(n int, _ Batch) error {
		if n == 1 {
			<-held
		}
		return nil
	}}
	p = New(sink, testConfig())
	p.callersLinger = time.Minute
	promise, wait := promises(t)
	for i := range 3 {
		r := record("t", fmt.Sprint(i))
		r.Key = []byte("k")
		p.Produce(ctx, r, 1, promise)
	}
	p.mu.Lock()
	b := p.parts[topicPartition{"t", 0}]
	p.mu.Unlock()
	close(held)
	for _, err := range wait(3) {
		require.NoError(t, err)
	}
	p.mu.Lock()
	require.False(t, b.lingering)
	p.mu.Unlock()
	require.NoError(t, p.Close(ctx))
}
