package pgmsg_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// readAll fetches every record of every partition of a topic.
func readAll(t *testing.T, tb *testBundle, topic string, partitions int) map[int32][]*pgmsg.Record {
	t.Helper()
	out := map[int32][]*pgmsg.Record{}
	for p := int32(0); p < int32(partitions); p++ {
		var from int64
		for {
			recs, err := tb.client.Fetch(tb.ctx, topic, p, from, 1000)
			require.NoError(t, err)
			if len(recs) == 0 {
				break
			}
			out[p] = append(out[p], recs...)
			from = recs[len(recs)-1].Offset + 1
		}
	}
	return out
}

func requireGapless(t *testing.T, byPartition map[int32][]*pgmsg.Record) {
	t.Helper()
	for p, recs := range byPartition {
		for i, r := range recs {
			require.Equal(t, int64(i), r.Offset, "partition %d: offsets must be gapless from 0", p)
		}
	}
}

// A member claims, then its connection is killed before it commits: the
// records are delivered again once the lease runs out, and not before.
func TestClaimRedeliveredAfterConnectionKilled(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "crash", 1)
	var recs []*pgmsg.Record
	for i := 0; i < 10; i++ {
		recs = append(recs, &pgmsg.Record{Topic: "crash", Value: []byte(fmt.Sprint(i))})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))

	conn, err := tb.Pool.Acquire(tb.ctx)
	require.NoError(t, err)
	pid := conn.Conn().PgConn().PID()
	lease := 1500 * time.Millisecond
	cl, err := tb.client.ClaimTx(tb.ctx, conn, "crash", "g", &pgmsg.ClaimOpts{MaxRecords: 4, Lease: lease})
	require.NoError(t, err)
	require.Len(t, cl.Records, 4)
	claimedAt := time.Now()
	// Kill the member's connection: it never commits.
	_, err = tb.Pool.Exec(tb.ctx, "SELECT pg_terminate_backend($1)", int(pid))
	require.NoError(t, err)
	_ = conn.Conn().Close(tb.ctx)
	conn.Release()

	// While the lease lives, the partition is not claimable.
	again, err := tb.client.Claim(tb.ctx, "crash", "g", nil)
	require.NoError(t, err)
	if time.Since(claimedAt) < lease {
		require.Nil(t, again, "partition claimed again before the lease expired")
	}
	// After it expires, the same records come again, then the rest.
	var got []int64
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < 10 && time.Now().Before(deadline) {
		cl, err := tb.client.Claim(tb.ctx, "crash", "g", &pgmsg.ClaimOpts{MaxRecords: 3})
		require.NoError(t, err)
		if cl == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for _, r := range cl.Records {
			got = append(got, r.Offset)
		}
		require.NoError(t, tb.client.Commit(tb.ctx, cl))
	}
	require.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, got)
	// The dead member's late commit is rejected and changes nothing.
	err = tb.client.Commit(tb.ctx, cl)
	require.ErrorIs(t, err, pgmsg.ErrClaimNotHeld)
}

// A claim made inside a transaction whose connection dies is rolled back
// with it: the records are available again at once.
func TestClaimInTransactionLostWithConnection(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "txcrash", 1)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "txcrash", Value: []byte("x")}}, nil))
	tx, err := tb.Pool.Begin(tb.ctx)
	require.NoError(t, err)
	cl, err := tb.client.ClaimTx(tb.ctx, tx, "txcrash", "g", nil)
	require.NoError(t, err)
	require.NotNil(t, cl)
	var pid int
	require.NoError(t, tx.QueryRow(tb.ctx, "SELECT pg_backend_pid()").Scan(&pid))
	_, err = tb.Pool.Exec(tb.ctx, "SELECT pg_terminate_backend($1)", pid)
	require.NoError(t, err)
	_ = tx.Rollback(tb.ctx)
	cl2, err := tb.client.Claim(tb.ctx, "txcrash", "g", nil)
	require.NoError(t, err)
	require.NotNil(t, cl2)
	require.Equal(t, int64(0), cl2.Records[0].Offset)
}

// Many members claim and commit concurrently: no two ever hold a claim on
// the same partition at once, and every record is read exactly once.
func TestClaimsAreExclusivePerPartition(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	const partitions, records = 2, 400
	tb.topic(t, "exclusive", partitions)
	var recs []*pgmsg.Record
	for i := 0; i < records; i++ {
		recs = append(recs, &pgmsg.Record{Topic: "exclusive", Partition: int32(i % partitions), Value: []byte(fmt.Sprint(i))})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))

	var holders [partitions]atomic.Int32
	var read atomic.Int64
	var violations atomic.Int64
	var wg sync.WaitGroup
	for m := 1; m <= 8; m++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for read.Load() < records {
				cl, err := tb.client.Claim(tb.ctx, "exclusive", "g", &pgmsg.ClaimOpts{MaxRecords: 7, Member: fmt.Sprint(m)})
				require.NoError(t, err)
				if cl == nil {
					time.Sleep(time.Millisecond)
					continue
				}
				if !holders[cl.Partition].CompareAndSwap(0, int32(m)) {
					violations.Add(1)
				}
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
				// Leave before committing: the claim is still held in the
				// database until the commit.
				holders[cl.Partition].Store(0)
				require.NoError(t, tb.client.Commit(tb.ctx, cl))
				read.Add(int64(len(cl.Records)))
			}
		}()
	}
	wg.Wait()
	require.Zero(t, violations.Load(), "two members held the same partition")
	require.Equal(t, int64(records), read.Load())
}

// The transactional handler: its writes and the cursor commit together,
// and a failed handler leaves both untouched.
func TestProcessTxRollbackKeepsCursor(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "eo", 1)
	_, err := tb.Pool.Exec(tb.ctx, fmt.Sprintf(`CREATE TABLE %s (v text)`, pgx.Identifier{tb.Schema, "effects"}.Sanitize()))
	require.NoError(t, err)
	effects := pgx.Identifier{tb.Schema, "effects"}.Sanitize()
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "eo", Value: []byte("a")}, {Topic: "eo", Value: []byte("b")}}, nil))

	_, err = tb.client.CreateGroup(tb.ctx, "eo", "g", pgmsg.PositionEarliest)
	require.NoError(t, err)
	cn, err := tb.client.NewConsumer("eo", "g", nil)
	require.NoError(t, err)
	defer cn.Close()
	boom := errors.New("boom")
	ok, err := cn.ProcessTx(tb.ctx, func(ctx context.Context, tx pgx.Tx, cl *pgmsg.Claim) error {
		for _, r := range cl.Records {
			if _, err := tx.Exec(ctx, "INSERT INTO "+effects+" VALUES ($1)", string(r.Value)); err != nil {
				return err
			}
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.False(t, ok)
	lags, err := tb.client.ListGroups(tb.ctx, "eo", "g")
	require.NoError(t, err)
	require.Equal(t, int64(0), lags[0].NextOffset)
	var n int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, "SELECT count(*) FROM "+effects).Scan(&n))
	require.Zero(t, n)

	ok, err = cn.ProcessTx(tb.ctx, func(ctx context.Context, tx pgx.Tx, cl *pgmsg.Claim) error {
		for _, r := range cl.Records {
			if _, err := tx.Exec(ctx, "INSERT INTO "+effects+" VALUES ($1)", string(r.Value)); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, ok)
	lags, err = tb.client.ListGroups(tb.ctx, "eo", "g")
	require.NoError(t, err)
	require.Equal(t, int64(2), lags[0].NextOffset)
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, "SELECT count(*) FROM "+effects).Scan(&n))
	require.Equal(t, 2, n)
	ok, err = cn.ProcessTx(tb.ctx, func(context.Context, pgx.Tx, *pgmsg.Claim) error { return boom })
	require.NoError(t, err)
	require.False(t, ok, "nothing left to process")
}

// An idle consumer is woken by the publish notification long before its
// poll interval.
func TestConsumerWokenByNotification(t *testing.T) {
	t.Parallel()
	tb := setup(t, &pgmsg.Config{PollInterval: time.Minute})
	tb.topic(t, "wake", 1)
	cn, err := tb.client.NewConsumer("wake", "g", nil)
	require.NoError(t, err)
	defer cn.Close()
	got := make(chan *pgmsg.Claim, 1)
	go func() {
		cl, err := cn.Poll(tb.ctx)
		require.NoError(t, err)
		got <- cl
	}()
	// Publish repeatedly until the poll returns: the first publish may race
	// the listener's LISTEN.
	for i := 0; ; i++ {
		require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "wake", Value: []byte("hi")}}, nil))
		select {
		case cl := <-got:
			require.NotEmpty(t, cl.Records)
			return
		case <-time.After(200 * time.Millisecond):
			require.Less(t, i, 100, "consumer not woken within 20s while its poll interval is 1 minute")
		}
	}
}

// With notifications disabled (as behind PgBouncer), polling alone delivers
// everything.
func TestConsumerWithoutNotificationsPolls(t *testing.T) {
	t.Parallel()
	tb := setup(t, &pgmsg.Config{DisableNotify: true, PollInterval: 20 * time.Millisecond})
	tb.topic(t, "poll", 2)
	var recs []*pgmsg.Record
	for i := 0; i < 50; i++ {
		recs = append(recs, &pgmsg.Record{Topic: "poll", Value: []byte(fmt.Sprint(i))})
	}
	cn, err := tb.client.NewConsumer("poll", "g", nil)
	require.NoError(t, err)
	defer cn.Close()
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))
	n := 0
	for n < 50 {
		cl, err := cn.Poll(tb.ctx)
		require.NoError(t, err)
		n += len(cl.Records)
		require.NoError(t, tb.client.Commit(tb.ctx, cl))
	}
	require.Equal(t, 50, n)
}

func TestClaimLimitsAndLifecycle(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "limits", 1)
	var recs []*pgmsg.Record
	for i := 0; i < 10; i++ {
		recs = append(recs, &pgmsg.Record{Topic: "limits", Value: make([]byte, 100), Headers: map[string][]byte{"i": {byte(i)}}})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))

	cl, err := tb.client.Claim(tb.ctx, "limits", "g", &pgmsg.ClaimOpts{MaxBytes: 350})
	require.NoError(t, err)
	require.Len(t, cl.Records, 3, "max bytes 350 fits three 100-byte records")
	require.Equal(t, []byte{2}, cl.Records[2].Headers["i"])
	// One record is always handed out, even above max bytes.
	require.NoError(t, tb.client.Release(tb.ctx, cl))
	cl, err = tb.client.Claim(tb.ctx, "limits", "g", &pgmsg.ClaimOpts{MaxBytes: 10})
	require.NoError(t, err)
	require.Len(t, cl.Records, 1)
	require.NoError(t, tb.client.Extend(tb.ctx, cl, time.Minute))
	require.WithinDuration(t, time.Now().Add(time.Minute), cl.ExpiresAt, 30*time.Second)
	// Partial commit: the cursor moves within the claim.
	require.ErrorIs(t, tb.client.CommitOffset(tb.ctx, cl, 5), pgmsg.ErrInvalidOffset)
	require.NoError(t, tb.client.CommitOffset(tb.ctx, cl, 1))
	require.ErrorIs(t, tb.client.Commit(tb.ctx, cl), pgmsg.ErrClaimNotHeld, "a claim commits once")
	require.ErrorIs(t, tb.client.Release(tb.ctx, cl), pgmsg.ErrClaimNotHeld)

	// An expired claim cannot commit; its records come again.
	cl, err = tb.client.Claim(tb.ctx, "limits", "g", &pgmsg.ClaimOpts{MaxRecords: 2, Lease: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, int64(1), cl.Records[0].Offset)
	// Wait out the lease (database and test share this machine's clock).
	time.Sleep(time.Until(cl.ExpiresAt) + 100*time.Millisecond)
	require.ErrorIs(t, tb.client.Commit(tb.ctx, cl), pgmsg.ErrClaimExpired)
	again, err := tb.client.Claim(tb.ctx, "limits", "g", nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), again.Records[0].Offset)
	require.NotEqual(t, cl.Epoch, again.Epoch)
	require.ErrorIs(t, tb.client.Extend(tb.ctx, cl, time.Second), pgmsg.ErrClaimNotHeld)
}

func make200(c byte) []byte {
	b := make([]byte, 200)
	for i := range b {
		b[i] = c
	}
	return b
}

func ptr[T any](v T) *T { return &v }

func testingProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkClaimCommit is one Claim of up to max 1 KiB records and its
// Commit: the consumer's two round trips. The commit goes back to the
// claim's first offset (a commit that moves nothing costs the same), so
// every iteration claims the same records and the topic need not grow
// with b.N.
func BenchmarkClaimCommit(b *testing.B) {
	for _, max := range []int{100, 1000} {
		b.Run(fmt.Sprintf("records=%d", max), func(b *testing.B) {
			client, topic := benchClient(b, 1)
			ctx := context.Background()
			if err := client.Publish(ctx, benchRecords(topic, max, 1024), nil); err != nil {
				b.Fatal(err)
			}
			opts := &pgmsg.ClaimOpts{MaxRecords: max}
			n := 0
			for b.Loop() {
				cl, err := client.Claim(ctx, topic, "g", opts)
				if err != nil {
					b.Fatal(err)
				}
				if cl == nil || len(cl.Records) != max {
					b.Fatalf("claimed %v, want %d records", cl, max)
				}
				if err := client.CommitOffset(ctx, cl, cl.Records[0].Offset); err != nil {
					b.Fatal(err)
				}
				n += len(cl.Records)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkClaimEmpty is a claim that finds nothing new: what every idle
// consumer pays per poll. It writes nothing.
func BenchmarkClaimEmpty(b *testing.B) {
	client, topic := benchClient(b, 4)
	ctx := context.Background()
	if _, err := client.CreateGroup(ctx, topic, "g", "earliest"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		cl, err := client.Claim(ctx, topic, "g", nil)
		if err != nil || cl != nil {
			b.Fatalf("claim: %v %v", cl, err)
		}
	}
}

// Consumer.Run commits a handled claim along with the next claim, and the
// last claim when Run returns: every record is handled once and the group
// ends with no lag.
func TestConsumerRunCommitsLastClaimOnExit(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "runexit", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	recs := make([]*pgmsg.Record, 25)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: "runexit", Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))

	cn, err := tb.client.NewConsumer("runexit", "g", &pgmsg.ConsumerOpts{Claim: pgmsg.ClaimOpts{MaxRecords: 3}})
	require.NoError(t, err)
	defer cn.Close()
	ctx, cancel := context.WithCancel(tb.ctx)
	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(ctx, func(_ context.Context, cl *pgmsg.Claim) error {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range cl.Records {
				seen[string(r.Value)]++
			}
			if len(seen) == len(recs) {
				cancel()
			}
			return nil
		})
	}()
	requireRunHandledOnce(t, tb, done, seen, len(recs), "runexit")
}

// requireRunHandledOnce waits for Run's result on done (it must end with
// context.Canceled, the handler having cancelled it once every record
// was seen), then checks that want records were each handled once and
// that the group g of topic has no lag left.
func requireRunHandledOnce(t *testing.T, tb *testBundle, done <-chan error, seen map[string]int, want int, topic string) {
	t.Helper()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(time.Minute):
		t.Fatal("Run did not read every record")
	}
	require.Len(t, seen, want)
	for v, n := range seen {
		require.Equal(t, 1, n, "record %s handled %d times", v, n)
	}
	gs, err := tb.client.ListGroups(tb.ctx, topic, "g")
	require.NoError(t, err)
	for _, g := range gs {
		require.Zero(t, g.Lag, "partition %d", g.Partition)
	}
}

// A first Poll whose context ends during the group join does not break the
// consumer: the next Poll joins and claims.
func TestConsumerStartRetriedAfterFailedFirstPoll(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "retrystart", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "retrystart", Value: []byte("x")}}, nil))
	cn, err := tb.client.NewConsumer("retrystart", "g", nil)
	require.NoError(t, err)
	defer cn.Close()
	dead, cancel := context.WithCancel(tb.ctx)
	cancel()
	_, err = cn.Poll(dead)
	require.ErrorIs(t, err, context.Canceled)
	ctx, cancel2 := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel2()
	cl, err := cn.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, cl.Records, 1)
	require.NoError(t, tb.client.Commit(tb.ctx, cl))
}

// BenchmarkConsumerRun is Consumer.Run of one member reading a backlog of
// 10000 records of 1 KiB from one partition, 1000 records a claim: the
// claim loop, the commit riding on the next claim, the handler's
// supervision. The backlog is published once; each op is a new group
// (and member) reading it from the start, so the topic need not grow with
// b.N. An op ends when the handler has seen every record.
func BenchmarkConsumerRun(b *testing.B) {
	const backlog, batch = 10000, 1000
	client, topic := benchClient(b, 1)
	ctx := context.Background()
	for i := 0; i < backlog; i += batch {
		if err := client.Publish(ctx, benchRecords(topic, batch, 1024), nil); err != nil {
			b.Fatal(err)
		}
	}
	opts := &pgmsg.ConsumerOpts{Claim: pgmsg.ClaimOpts{MaxRecords: batch}}
	n, op := 0, 0
	for b.Loop() {
		op++
		cn, err := client.NewConsumer(topic, fmt.Sprintf("g%d", op), opts)
		if err != nil {
			b.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		var seen atomic.Int64
		err = cn.Run(runCtx, func(_ context.Context, cl *pgmsg.Claim) error {
			if seen.Add(int64(len(cl.Records))) >= backlog {
				stop()
			}
			return nil
		})
		stop()
		cn.Close()
		if err != context.Canceled {
			b.Fatalf("Run: %v", err)
		}
		if got := seen.Load(); got != backlog {
			b.Fatalf("handled %d records, want %d", got, backlog)
		}
		n += backlog
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

// ClaimCooldown above ClaimCooldownMax is refused with a clear error; a
// negative one (none) and the longest are accepted.
func TestConsumerClaimCooldownChecked(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.NewConsumer("cooldownchecked", "g", &pgmsg.ConsumerOpts{ClaimCooldown: pgmsg.ClaimCooldownMax + time.Nanosecond})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	require.ErrorContains(t, err, "claim cooldown")
	for _, d := range []time.Duration{-time.Nanosecond, pgmsg.ClaimCooldownMax} {
		cn, err := tb.client.NewConsumer("cooldownchecked", "g", &pgmsg.ConsumerOpts{ClaimCooldown: d})
		require.NoError(t, err, "ClaimCooldown %s", d)
		cn.Close()
	}
}

// A consumer whose claims the cooldown holds loses and repeats nothing:
// records published one at a time by several publishers while it runs
// are each handled once, in offset order per partition, and the group
// ends with no lag.
func TestConsumerClaimCooldownHandlesEveryRecordOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "cooldown", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	cn, err := tb.client.NewConsumer("cooldown", "g", &pgmsg.ConsumerOpts{
		// At any rate: the cooldown must hold these claims.
		ClaimCooldown: 100 * time.Millisecond, ClaimCooldownMinRate: -1, PollInterval: time.Hour,
	})
	require.NoError(t, err)
	defer cn.Close()

	const publishers, each = 3, 10
	ctx, cancel := context.WithCancel(tb.ctx)
	var mu sync.Mutex
	seen := map[string]int{}
	last := map[int32]int64{0: -1, 1: -1}
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(ctx, func(_ context.Context, cl *pgmsg.Claim) error {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range cl.Records {
				if r.Offset <= last[r.Partition] {
					return fmt.Errorf("partition %d: offset %d after %d", r.Partition, r.Offset, last[r.Partition])
				}
				last[r.Partition] = r.Offset
				seen[string(r.Value)]++
			}
			if len(seen) == publishers*each {
				cancel()
			}
			return nil
		})
	}()
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				v := fmt.Sprintf("%d-%d", p, i)
				if err := tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "cooldown", Key: []byte(v), Value: []byte(v)}}, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	requireRunHandledOnce(t, tb, done, seen, publishers*each, "cooldown")
}

// member runs one group consumer in the background.
type member struct {
	c      *pgmsg.Consumer
	cancel context.CancelFunc
	done   chan error
}

func startMember(t *testing.T, client *pgmsg.Client, topic, group string, opts pgmsg.ConsumerOpts,
	handler func(ctx context.Context, cl *pgmsg.Claim) error) *member {
	t.Helper()
	c, err := client.NewConsumer(topic, group, &opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- c.Run(ctx, handler) }()
	return m
}

// stop ends the member gracefully: Run returns, then Close leaves the group.
func (m *member) stop(t *testing.T) {
	t.Helper()
	m.cancel()
	require.ErrorIs(t, <-m.done, context.Canceled)
	m.c.Close()
}

// owners returns partition -> owner and whether every partition is owned
// and the counts per member differ by at most one.
func owners(t *testing.T, tb *testBundle, topic, group string) (map[int32]string, bool) {
	t.Helper()
	parts, err := tb.client.ListGroups(tb.ctx, topic, group)
	require.NoError(t, err)
	out := map[int32]string{}
	counts := map[string]int{}
	for _, p := range parts {
		out[p.Partition] = p.Owner
		if p.Owner == "" {
			return out, false
		}
		counts[p.Owner]++
	}
	lo, hi := 1<<30, 0
	for _, n := range counts {
		lo, hi = min(lo, n), max(hi, n)
	}
	return out, hi-lo <= 1
}

// balanceBound is how long waitBalanced waits for an assignment to
// converge before it fails. Convergence is a liveness property, checked
// here; how fast it happens is measured by BenchmarkRebalanceJoin, not
// asserted: on a loaded machine (the suite under -race beside other
// packages) heartbeats run late and a 5 s bound failed runs whose
// assignment converged a little later.
const balanceBound = time.Minute

func waitBalanced(t *testing.T, tb *testBundle, topic, group string, members int) map[int32]string {
	t.Helper()
	start := time.Now()
	within := balanceBound
	deadline := start.Add(within)
	for {
		own, ok := owners(t, tb, topic, group)
		distinct := map[string]bool{}
		for _, o := range own {
			distinct[o] = true
		}
		if ok && len(distinct) == members {
			t.Logf("balanced over %d members in %s", members, time.Since(start).Round(time.Millisecond))
			return own
		}
		require.True(t, time.Now().Before(deadline), "assignment not balanced over %d members within %s: %v", members, within, own)
		time.Sleep(20 * time.Millisecond)
	}
}

// 1 -> 4 -> 2 members on an 8-partition topic under continuous publishing:
// no two members ever process a partition at once, the assignment
// converges evenly after each change, and the group reads every record at
// least once, in order per partition, skipping none.
func TestMembershipScaleUpAndDown(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	const partitions = 8
	tb.topic(t, "scale", partitions)

	// Continuous publishing.
	pctx, pstop := context.WithCancel(tb.ctx)
	var published atomic.Int64
	pdone := make(chan struct{})
	go func() {
		defer close(pdone)
		for i := 0; pctx.Err() == nil; i++ {
			var recs []*pgmsg.Record
			for j := 0; j < 8; j++ {
				recs = append(recs, &pgmsg.Record{Topic: "scale", Key: []byte(fmt.Sprint(i*8 + j)), Value: []byte("v")})
			}
			if err := tb.client.Publish(context.Background(), recs, nil); err != nil {
				t.Errorf("publish: %v", err)
				return
			}
			published.Add(8)
			time.Sleep(2 * time.Millisecond)
		}
	}()

	var mu sync.Mutex
	next := map[int32]int64{} // next offset expected per partition (at-least-once: may repeat)
	var holders [partitions]atomic.Value
	var overlaps, skips atomic.Int64
	handler := func(name string) func(context.Context, *pgmsg.Claim) error {
		return func(_ context.Context, cl *pgmsg.Claim) error {
			if prev := holders[cl.Partition].Swap(name); prev != nil && prev.(string) != "" {
				overlaps.Add(1)
			}
			mu.Lock()
			first := cl.Records[0].Offset
			if first > next[cl.Partition] {
				skips.Add(1)
			}
			for i, r := range cl.Records {
				if r.Offset != first+int64(i) {
					skips.Add(1)
				}
			}
			if end := cl.NextOffset(); end > next[cl.Partition] {
				next[cl.Partition] = end
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
			holders[cl.Partition].Store("")
			return nil
		}
	}
	opts := func(i int) pgmsg.ConsumerOpts {
		return pgmsg.ConsumerOpts{MemberID: fmt.Sprintf("m%d", i), HeartbeatInterval: 100 * time.Millisecond,
			SessionTimeout: time.Second, Claim: pgmsg.ClaimOpts{MaxRecords: 50}}
	}

	members := []*member{startMember(t, tb.client, "scale", "g", opts(0), handler("m0"))}
	waitBalanced(t, tb, "scale", "g", 1)
	for i := 1; i < 4; i++ {
		members = append(members, startMember(t, tb.client, "scale", "g", opts(i), handler(fmt.Sprintf("m%d", i))))
	}
	own := waitBalanced(t, tb, "scale", "g", 4)
	counts := map[string]int{}
	for _, o := range own {
		counts[o]++
	}
	for m, n := range counts {
		require.Equal(t, 2, n, "member %s", m)
	}
	members[3].stop(t)
	members[2].stop(t)
	members = members[:2]
	waitBalanced(t, tb, "scale", "g", 2)

	pstop()
	<-pdone
	total := published.Load()
	// Drain: every partition read to its end.
	deadline := time.Now().Add(30 * time.Second)
	for {
		lags, err := tb.client.ListGroups(tb.ctx, "scale", "g")
		require.NoError(t, err)
		var lag int64
		for _, l := range lags {
			lag += l.Lag
		}
		if lag == 0 {
			break
		}
		if !time.Now().Before(deadline) {
			d, _ := tb.client.DescribeGroup(tb.ctx, "scale", "g")
			for _, p := range d.Partitions {
				t.Logf("partition %d: next %d end %d owner %q epoch %d claim %d owner %q until %v", p.Partition, p.NextOffset,
					p.EndOffset, p.Owner, p.OwnerEpoch, p.ClaimEpoch, p.ClaimOwner, p.ClaimExpiresAt)
			}
			for _, m := range d.Members {
				t.Logf("member %s alive %v partitions %v", m.MemberID, m.Alive, m.Partitions)
			}
			for i, m := range members {
				t.Logf("member m%d local assignment %v", i, m.c.Assignment())
			}
		}
		require.True(t, time.Now().Before(deadline), "group did not catch up, lag %d", lag)
		time.Sleep(20 * time.Millisecond)
	}
	for _, m := range members {
		m.stop(t)
	}
	require.Zero(t, overlaps.Load(), "two members processed one partition at once")
	require.Zero(t, skips.Load(), "a record was skipped or out of order")
	var read int64
	mu.Lock()
	for _, n := range next {
		read += n
	}
	mu.Unlock()
	require.Equal(t, total, read, "every published record read")
}

// A member whose connections die without Close loses its partitions within
// the session timeout (plus a heartbeat), and the survivor reads them from
// the committed cursor.
func TestMembershipKilledMemberPartitionsMove(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "kill", 4)

	// The victim has its own pool, so "killing" it drops only its connections.
	victimPool, err := pgxpool.New(tb.ctx, tb.Pool.Config().ConnString())
	require.NoError(t, err)
	victimClient, err := pgmsg.NewClient(victimPool, &pgmsg.Config{Schema: tb.Schema, DisableNotify: true})
	require.NoError(t, err)
	session, heartbeat := time.Second, 100*time.Millisecond
	mopts := func(id string) pgmsg.ConsumerOpts {
		return pgmsg.ConsumerOpts{MemberID: id, HeartbeatInterval: heartbeat, SessionTimeout: session}
	}
	noop := func(context.Context, *pgmsg.Claim) error { return nil }
	victim := startMember(t, victimClient, "kill", "g", mopts("victim"), noop)
	survivor := startMember(t, tb.client, "kill", "g", mopts("survivor"), noop)
	waitBalanced(t, tb, "kill", "g", 2)

	killed := time.Now()
	victimPool.Close() // every heartbeat and claim of the victim now fails
	deadline := killed.Add(session + heartbeat + 3*time.Second)
	for {
		own, _ := owners(t, tb, "kill", "g")
		all := true
		for _, o := range own {
			all = all && o == "survivor"
		}
		if all {
			break
		}
		require.True(t, time.Now().Before(deadline), "partitions did not move within the bound: %v", own)
		time.Sleep(20 * time.Millisecond)
	}
	moved := time.Since(killed)
	t.Logf("partitions moved %s after the kill (session %s, heartbeat %s)", moved.Round(time.Millisecond), session, heartbeat)

	// The survivor reads records published to any partition.
	for p := int32(0); p < 4; p++ {
		require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "kill", Partition: p, Value: []byte("x")}},
			&pgmsg.PublishOpts{ManualPartition: true}))
	}
	require.Eventually(t, func() bool {
		lags, err := tb.client.ListGroups(tb.ctx, "kill", "g")
		require.NoError(t, err)
		for _, l := range lags {
			if l.Lag != 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond)
	survivor.stop(t)
	victim.cancel()
	t.Logf("the victim's Run returned %v", <-victim.done)
	victim.c.Close()
	victimClient.Close()
}

// Members learn of a join and of a completed hand-over from the group's
// notifications, not their heartbeat interval (an hour here: neither
// member's loop ticks during the test). A holds a claim on partition 1
// when B joins: A is told to give it up (OnRevoked, woken by B's join),
// finishes and commits the claim, and B is told it owns it (OnAssigned,
// woken by the hand-over A's heartbeat completed). Without the
// notifications neither would learn for minutes.
func TestMembershipChangesWakeMembers(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "wake", 2)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{
		{Topic: "wake", Partition: 0, Value: []byte("0")}, {Topic: "wake", Partition: 1, Value: []byte("1")},
	}, &pgmsg.PublishOpts{ManualPartition: true}))
	events := make(chan string, 10)
	opts := func(id string) pgmsg.ConsumerOpts {
		return pgmsg.ConsumerOpts{MemberID: id, HeartbeatInterval: time.Hour, SessionTimeout: 2 * time.Hour,
			OnRevoked:  func(_ string, ps []int32) { events <- fmt.Sprintf("%s revoked %v", id, ps) },
			OnAssigned: func(_ string, ps []int32) { events <- fmt.Sprintf("%s assigned %v", id, ps) }}
	}
	next := func() string {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(30 * time.Second):
			t.Fatal("no callback within 30s")
			return ""
		}
	}
	holding, gate := make(chan struct{}), make(chan struct{})
	a := startMember(t, tb.client, "wake", "g", opts("a"), func(ctx context.Context, cl *pgmsg.Claim) error {
		if cl.Partition == 1 {
			close(holding)
			<-gate
		}
		return nil
	})
	require.Equal(t, "a assigned [0 1]", next())
	<-holding
	b := startMember(t, tb.client, "wake", "g", opts("b"), func(context.Context, *pgmsg.Claim) error { return nil })
	require.Equal(t, "a revoked [1]", next(), "a learns of b's join while it holds its claim")
	close(gate)
	require.Equal(t, "b assigned [1]", next(), "b learns of the completed hand-over")
	require.Equal(t, map[string][]int32{"wake": {0}}, a.c.Assignment())
	require.Equal(t, map[string][]int32{"wake": {1}}, b.c.Assignment())
	b.stop(t)
	require.Equal(t, "a assigned [1]", next(), "a learns of b's leave")
	a.stop(t)
}

// A member paused past its session timeout is fenced: the group moves its
// partition, the new owner claims it, and the paused member's late commit
// is rejected, writing nothing.
func TestMembershipPausedMemberFenced(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "pause", 1)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "pause", Value: []byte("a")}, {Topic: "pause", Value: []byte("b")}}, nil))

	var lost atomic.Int32
	// "Paused": after joining it never heartbeats again (interval of an
	// hour, and no notifications to wake it, as none reach a paused
	// process).
	quiet, err := pgmsg.NewClient(tb.Pool, &pgmsg.Config{Schema: tb.Schema, DisableNotify: true})
	require.NoError(t, err)
	defer quiet.Close()
	paused, err := quiet.NewConsumer("pause", "g", &pgmsg.ConsumerOpts{MemberID: "paused",
		HeartbeatInterval: time.Hour, SessionTimeout: 500 * time.Millisecond,
		OnLost: func(string, []int32) { lost.Add(1) }})
	require.NoError(t, err)
	defer paused.Close()
	stale, err := paused.Poll(tb.ctx)
	require.NoError(t, err)
	require.Len(t, stale.Records, 2)

	var got atomic.Int64
	other := startMember(t, tb.client, "pause", "g", pgmsg.ConsumerOpts{MemberID: "other",
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 5 * time.Second},
		func(_ context.Context, cl *pgmsg.Claim) error { got.Add(int64(len(cl.Records))); return nil })
	defer other.stop(t)
	// The other member takes over once the paused one's session expires,
	// and re-reads the uncommitted records.
	require.Eventually(t, func() bool { return got.Load() == 2 }, 20*time.Second, 20*time.Millisecond)

	// The paused member wakes up and commits: fenced.
	require.ErrorIs(t, tb.client.Commit(tb.ctx, stale), pgmsg.ErrClaimNotHeld)
	// The new owner commits what it handled (Run sends that commit with
	// its next claim, or on its own within logconsumer.CommitLingerMax).
	require.Eventually(t, func() bool {
		lags, err := tb.client.ListGroups(tb.ctx, "pause", "g")
		return err == nil && lags[0].Owner == "other" && lags[0].NextOffset == 2
	}, 10*time.Second, 10*time.Millisecond, "the cursor is the new owner's")
	// And it may not claim the partition again.
	_, err = tb.client.Claim(tb.ctx, "pause", "g", &pgmsg.ClaimOpts{Member: "paused", RequireOwner: true})
	require.ErrorIs(t, err, pgmsg.ErrNotMember)
}

// A handler slower than both the claim lease and the session timeout keeps
// its partition and claim, because the consumer keeps heartbeating and
// extending; nothing is delivered twice.
func TestMembershipSlowHandlerKeepsPartition(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "slow", 1)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "slow", Value: []byte("a")}}, nil))

	var deliveries atomic.Int32
	release := make(chan struct{})
	// Session and lease are short, but not so short that a loaded CI
	// machine (load average 20 on 2 cores seen) misses a whole session.
	slow := startMember(t, tb.client, "slow", "g", pgmsg.ConsumerOpts{MemberID: "slow",
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: time.Second,
		Claim: pgmsg.ClaimOpts{Lease: time.Second}},
		func(ctx context.Context, cl *pgmsg.Claim) error {
			deliveries.Add(1)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	defer slow.stop(t)
	require.Eventually(t, func() bool { return deliveries.Load() == 1 }, 10*time.Second, 10*time.Millisecond)
	var otherGot atomic.Int32
	other := startMember(t, tb.client, "slow", "g", pgmsg.ConsumerOpts{MemberID: "other",
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: time.Second},
		func(context.Context, *pgmsg.Claim) error { otherGot.Add(1); return nil })
	defer other.stop(t)

	// Hold the record for several leases and sessions.
	time.Sleep(3 * time.Second)
	close(release)
	require.Eventually(t, func() bool {
		lags, err := tb.client.ListGroups(tb.ctx, "slow", "g")
		require.NoError(t, err)
		return lags[0].NextOffset == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, int32(1), deliveries.Load(), "the slow record was delivered again")
	require.Zero(t, otherGot.Load())
	own, _ := owners(t, tb, "slow", "g")
	require.Equal(t, "slow", own[0])
}

// Callbacks report assignment, hand-over and describe shows members.
func TestMembershipCallbacksAndDescribe(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "cb", 4)
	var mu sync.Mutex
	var events []string
	record := func(kind string) func(string, []int32) {
		return func(topic string, ps []int32) {
			mu.Lock()
			events = append(events, fmt.Sprintf("%s %v", kind, ps))
			mu.Unlock()
		}
	}
	a := startMember(t, tb.client, "cb", "g", pgmsg.ConsumerOpts{MemberID: "a", HeartbeatInterval: 50 * time.Millisecond,
		SessionTimeout: 2 * time.Second, OnAssigned: record("assigned"), OnRevoked: record("revoked")},
		func(context.Context, *pgmsg.Claim) error { return nil })
	waitBalanced(t, tb, "cb", "g", 1)
	b := startMember(t, tb.client, "cb", "g", pgmsg.ConsumerOpts{MemberID: "b", HeartbeatInterval: 50 * time.Millisecond,
		SessionTimeout: 2 * time.Second}, func(context.Context, *pgmsg.Claim) error { return nil })
	own := waitBalanced(t, tb, "cb", "g", 2)
	require.Equal(t, map[int32]string{0: "a", 1: "a", 2: "b", 3: "b"}, own, "sticky: a keeps its lowest partitions")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) == 2
	}, 5*time.Second, 10*time.Millisecond)
	mu.Lock()
	require.Equal(t, []string{"assigned [0 1 2 3]", "revoked [2 3]"}, events)
	mu.Unlock()

	d, err := tb.client.DescribeGroup(tb.ctx, "cb", "g")
	require.NoError(t, err)
	require.Len(t, d.Members, 2)
	require.Equal(t, "a", d.Members[0].MemberID)
	require.Equal(t, []int32{0, 1}, d.Members[0].Partitions)
	require.True(t, d.Members[1].Alive)
	require.Len(t, d.Partitions, 4)
	_, err = tb.client.DescribeGroup(tb.ctx, "cb", "nope")
	require.ErrorIs(t, err, pgmsg.ErrUnknownGroup)

	b.stop(t) // leaves at once, without waiting for its session to time out
	d, err = tb.client.DescribeGroup(tb.ctx, "cb", "g")
	require.NoError(t, err)
	require.Len(t, d.Members, 1)
	waitBalanced(t, tb, "cb", "g", 1)
	a.stop(t)
	d, err = tb.client.DescribeGroup(tb.ctx, "cb", "g")
	require.NoError(t, err)
	require.Empty(t, d.Members)
}

// A consumer with manual partitions claims only those and joins no balancing.
func TestManualAssignment(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "manual", 3)
	var recs []*pgmsg.Record
	for p := int32(0); p < 3; p++ {
		recs = append(recs, &pgmsg.Record{Topic: "manual", Partition: p, Value: []byte(fmt.Sprint(p))})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	c, err := tb.client.NewConsumer("manual", "g", &pgmsg.ConsumerOpts{Partitions: []int32{1}})
	require.NoError(t, err)
	defer c.Close()
	cl, err := c.Poll(tb.ctx)
	require.NoError(t, err)
	require.Equal(t, int32(1), cl.Partition)
	require.NoError(t, tb.client.Commit(tb.ctx, cl))
	d, err := tb.client.DescribeGroup(tb.ctx, "manual", "g")
	require.NoError(t, err)
	require.Empty(t, d.Members)
	for _, p := range d.Partitions {
		require.Empty(t, p.Owner)
		if p.Partition == 1 {
			require.Zero(t, p.Lag)
		} else {
			require.Equal(t, int64(1), p.Lag)
		}
	}
}

// BenchmarkRebalanceJoin is how long a member joining a busy group waits
// for its first records: member A owns the topic's four partitions and is
// handling claims of records published every few milliseconds (each
// claim taking the handler's time); B joins,
// and the hand-over of its two partitions completes when A's claims on
// them end and the members heartbeat. One op is a join until B's handler
// has run and B owns its two partitions (then B leaves, and A owns all
// four again before the next).
func BenchmarkRebalanceJoin(b *testing.B) {
	for _, handle := range []time.Duration{2 * time.Millisecond, 100 * time.Millisecond} {
		b.Run("handler="+handle.String(), func(b *testing.B) { benchmarkRebalanceJoin(b, handle) })
	}
}

func benchmarkRebalanceJoin(b *testing.B, handle time.Duration) {
	client, topic := benchClient(b, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_ = client.Publish(ctx, benchRecords(topic, 8, 100), nil)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-done }()
	a, err := client.NewConsumer(topic, "g", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_ = a.Run(ctx, func(context.Context, *pgmsg.Claim) error {
			time.Sleep(handle)
			return nil
		})
	}()
	defer func() { cancel(); <-aDone }()
	ownsAll := func() {
		for len(a.Assignment()[topic]) != 4 {
			if ctx.Err() != nil {
				b.Fatal("stopped")
			}
			time.Sleep(time.Millisecond)
		}
	}
	ownsAll()
	var waited time.Duration
	for b.Loop() {
		bc, err := client.NewConsumer(topic, "g", nil)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		first := make(chan time.Duration, 1)
		runCtx, stop := context.WithCancel(ctx)
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			_ = bc.Run(runCtx, func(context.Context, *pgmsg.Claim) error {
				select {
				case first <- time.Since(start):
				default:
				}
				return nil
			})
		}()
		<-first
		for len(bc.Assignment()[topic]) != 2 {
			time.Sleep(100 * time.Microsecond)
		}
		waited += time.Since(start)
		b.StopTimer()
		stop()
		<-ran
		bc.Close()
		ownsAll()
		b.StartTimer()
	}
	b.ReportMetric(float64(waited.Milliseconds())/float64(b.N), "ms/join")
}

// gatherTestClient returns a test's bundle (setup) with ClaimGatherWait
// wait (0: the default) and topic "t" of one partition.
func gatherTestClient(t *testing.T, wait time.Duration) (*testBundle, *pgmsg.Client, context.Context) {
	t.Helper()
	tb := setup(t, &pgmsg.Config{ClaimGatherWait: wait})
	_, err := tb.client.CreateTopic(tb.ctx, "t", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	return tb, tb.client, tb.ctx
}

// Consumers of several groups in one client, woken together, claim
// through one gathered statement: every group gets every record once and
// in order, and each its own copies (a handler that changes its records
// changes no other group's).
func TestConsumersGatherClaims(t *testing.T) {
	t.Parallel()
	// A long gather wait: a claim waits until the other groups' join it
	// (they are woken together), however slow the machine.
	_, c, ctx := gatherTestClient(t, 2*time.Second)
	groups := []string{"a", "b", "c"}
	var (
		mu  sync.Mutex
		got = map[string][]int64{}
		bad []string // records a group was given changed
	)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, g := range groups {
		cn, err := c.NewConsumer("t", g, nil)
		require.NoError(t, err)
		t.Cleanup(cn.Close)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cn.Run(runCtx, func(_ context.Context, cl *pgmsg.Claim) error {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range cl.Records {
					if !bytes.Equal(r.Value, []byte(fmt.Sprint(r.Offset))) {
						// Recorded, not returned: a failed handler's records
						// are read again from the table, which would hide it.
						bad = append(bad, fmt.Sprintf("group %s offset %d: value %q", g, r.Offset, r.Value))
					}
					got[g] = append(got[g], r.Offset)
					// Change what we were given: no other group may see it.
					for i := range r.Value {
						r.Value[i] = 'x'
					}
				}
				return nil
			})
		}()
	}
	// Publish one record at a time, each after every group has read the
	// previous one, until some claims went out gathered (the first claims
	// of a partition learn its segment and go alone).
	var next int64
	caughtUp := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range groups {
			if int64(len(got[g])) < next {
				return false
			}
		}
		return true
	}
	for next < 200 && (next < 10 || c.GatheredClaims() == 0) {
		require.NoError(t, c.Publish(ctx, []*pgmsg.Record{{Topic: "t", Value: []byte(fmt.Sprint(next))}}, nil))
		next++
		require.Eventually(t, caughtUp, time.Minute, time.Millisecond)
	}
	stop()
	wg.Wait()
	require.Positive(t, c.GatheredClaims(), "claims went out gathered")
	require.Empty(t, bad, "each group gets records of its own")
	for _, g := range groups {
		want := make([]int64, next)
		for i := range want {
			want[i] = int64(i)
		}
		require.Equal(t, want, got[g], "group %s: every record once, in order", g)
	}
}

// A claim that no other group of the client makes of its partition goes
// out at once, whatever ClaimGatherWait says.
func TestClaimGatherAloneDoesNotWait(t *testing.T) {
	t.Parallel()
	_, c, ctx := gatherTestClient(t, time.Minute)
	cn, err := c.NewConsumer("t", "g", nil)
	require.NoError(t, err)
	t.Cleanup(cn.Close)
	for i := range 20 {
		require.NoError(t, c.Publish(ctx, []*pgmsg.Record{{Topic: "t", Value: []byte(fmt.Sprint(i))}}, nil))
		cl, err := cn.Poll(ctx) // past the test's deadline if claims waited
		require.NoError(t, err)
		require.Len(t, cl.Records, 1)
		require.Equal(t, int64(i), cl.Records[0].Offset)
		require.NoError(t, c.Commit(ctx, cl))
	}
	require.Zero(t, c.GatheredClaims())
}

// ClaimGatherWait: negative is accepted (gathering off: see
// TestRecordCacheConfig), over a minute is refused.
func TestClaimGatherWaitConfig(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connected
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pgmsg.NewClient(pool, &pgmsg.Config{ClaimGatherWait: time.Minute + time.Nanosecond})
	require.ErrorContains(t, err, "Config.ClaimGatherWait must be at most 1m")
	c, err := pgmsg.NewClient(pool, &pgmsg.Config{ClaimGatherWait: -1})
	require.NoError(t, err)
	c.Close()
}

// The record cache (Config.RecordCacheBytes): once two groups of a client
// claim a partition, the records one group's claim read are not read
// again for the other's, which takes them from the cache; each gets
// copies of its own. A topic deleted and created again under the same
// name is read anew, never served from what the cache held of the old
// one.
func TestRecordCacheServesOtherGroups(t *testing.T) {
	t.Parallel()
	// No gathering: each claim goes out on its own, one after the other.
	_, c, ctx := gatherTestClient(t, -1)
	publish := func(tag string, from, n int) {
		recs := make([]*pgmsg.Record, n)
		for i := range recs {
			recs[i] = &pgmsg.Record{Topic: "t", Value: []byte(fmt.Sprint(tag, from+i))}
		}
		require.NoError(t, c.Publish(ctx, recs, nil))
	}
	consumers := map[string]*pgmsg.Consumer{}
	for _, g := range []string{"a", "b"} {
		cn, err := c.NewConsumer("t", g, nil)
		require.NoError(t, err)
		t.Cleanup(cn.Close)
		consumers[g] = cn
	}
	// poll claims as g, checks the values are tag+offset, commits, and
	// then overwrites the values it was given.
	poll := func(g, tag string, first, last int64) {
		t.Helper()
		cl, err := consumers[g].Poll(ctx)
		require.NoError(t, err)
		require.Len(t, cl.Records, int(last-first+1), g)
		for i, r := range cl.Records {
			require.Equal(t, first+int64(i), r.Offset, g)
			require.Equal(t, fmt.Sprint(tag, r.Offset), string(r.Value), "group %s offset %d", g, r.Offset)
		}
		require.NoError(t, c.Commit(ctx, cl))
		for _, r := range cl.Records {
			for i := range r.Value {
				r.Value[i] = 'x'
			}
		}
	}

	publish("v", 0, 10)
	poll("a", "v", 0, 9) // learns the partition's segment
	poll("b", "v", 0, 9) // reads it in the claim's round trip; one group so far
	require.Zero(t, c.CachedRecordsServed())

	publish("v", 10, 10)
	poll("a", "v", 10, 19) // both groups claim the partition now: a's records are kept
	poll("b", "v", 10, 19) // taken from the cache, as published (a changed its copies)
	require.Equal(t, int64(10), c.CachedRecordsServed())

	publish("v", 20, 5)
	poll("b", "v", 20, 24)
	poll("a", "v", 20, 24)
	require.Equal(t, int64(15), c.CachedRecordsServed())

	// The same topic name, a new topic: offsets 0.. again, other values.
	for _, cn := range consumers {
		cn.Close()
	}
	require.NoError(t, c.DeleteTopic(ctx, "t"))
	_, err := c.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	for _, g := range []string{"a", "b"} {
		cn, err := c.NewConsumer("t", g, nil)
		require.NoError(t, err)
		t.Cleanup(cn.Close)
		consumers[g] = cn
	}
	publish("new", 0, 25)
	poll("a", "new", 0, 24)
	poll("b", "new", 0, 24)
	publish("new", 25, 5)
	poll("a", "new", 25, 29)
	poll("b", "new", 25, 29)
	// b's claims of the new topic came from the cache (its first claim,
	// which names no segment yet, reads through it too), with the new
	// topic's values (poll checks them): none of the old topic's.
	require.Equal(t, int64(45), c.CachedRecordsServed(), "the new topic's 0..24 and 25..29 came from the cache")
}

// A member that owns several partitions claims without naming one
// (ClaimAnyDirect): its claims' records come from the record cache too,
// with no statement at all when the cache holds the whole claim, so a
// process's groups read each record once whatever they own.
func TestClaimAnyUsesRecordCache(t *testing.T) {
	t.Parallel()
	tb := setup(t, &pgmsg.Config{ClaimGatherWait: -1})
	c, ctx := tb.client, tb.ctx
	_, err := c.CreateTopic(ctx, "t2", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	key := []byte("k")
	part := pgmsg.PartitionForKey(key, 2)
	publish := func(from, n int) {
		recs := make([]*pgmsg.Record, n)
		for i := range recs {
			recs[i] = &pgmsg.Record{Topic: "t2", Key: key, Value: []byte(fmt.Sprint("v", from+i))}
		}
		require.NoError(t, c.Publish(ctx, recs, nil))
	}
	consumers := map[string]*pgmsg.Consumer{}
	for _, g := range []string{"a", "b"} {
		cn, err := c.NewConsumer("t2", g, nil)
		require.NoError(t, err)
		t.Cleanup(cn.Close)
		consumers[g] = cn
	}
	poll := func(g string, first, last int64) {
		t.Helper()
		cl, err := consumers[g].Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, part, cl.Partition, g)
		require.Len(t, cl.Records, int(last-first+1), g)
		for i, r := range cl.Records {
			require.Equal(t, first+int64(i), r.Offset, g)
			require.Equal(t, fmt.Sprint("v", r.Offset), string(r.Value), "group %s offset %d", g, r.Offset)
			r.Value[0] = 'x' // the next group's copy is its own
		}
		require.NoError(t, c.Commit(ctx, cl))
	}
	publish(0, 10)
	poll("a", 0, 9)
	require.Equal(t, map[string][]int32{"t2": {0, 1}}, consumers["a"].Assignment(), "one member owns both partitions")
	poll("b", 0, 9)
	require.Zero(t, c.CachedRecordsServed())
	publish(10, 10)
	poll("a", 10, 19) // both groups claim the partition now: a's records are kept
	poll("b", 10, 19) // all taken from the cache
	require.Equal(t, int64(10), c.CachedRecordsServed())
	publish(20, 5)
	poll("b", 20, 24)
	poll("a", 20, 24)
	require.Equal(t, int64(15), c.CachedRecordsServed())
}

// RecordCacheBytes negative: no cache, every claim reads its records;
// ClaimGatherWait negative: no claim goes out gathered.
func TestRecordCacheConfig(t *testing.T) {
	t.Parallel()
	b, _, ctx := gatherTestClient(t, -1)
	off, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema, RecordCacheBytes: -1, ClaimGatherWait: -1})
	require.NoError(t, err)
	defer off.Close()
	consumers := map[string]*pgmsg.Consumer{}
	for _, g := range []string{"a", "b"} {
		cn, err := off.NewConsumer("t", g, nil)
		require.NoError(t, err)
		defer cn.Close()
		consumers[g] = cn
	}
	for round := range 3 {
		require.NoError(t, off.Publish(ctx, []*pgmsg.Record{{Topic: "t", Value: []byte(fmt.Sprint(round))}}, nil))
		for _, g := range []string{"a", "b"} {
			cl, err := consumers[g].Poll(ctx)
			require.NoError(t, err)
			require.Len(t, cl.Records, 1, "round %d group %s", round, g)
			require.Equal(t, fmt.Sprint(round), string(cl.Records[0].Value))
			require.NoError(t, off.Commit(ctx, cl))
		}
	}
	require.Zero(t, off.CachedRecordsServed())
	require.Zero(t, off.GatheredClaims())
}

// Claimed records keep the difference between an empty key or value and
// none (NULL): read from the segment's raw binary rows, an empty value at
// the start of a claim came back as nil (found by TestHTTPProperty).
func TestClaimKeepsEmptyApartFromNull(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	c, ctx := tb.client, tb.ctx
	_, err := c.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, c.Publish(ctx, []*pgmsg.Record{
		{Topic: "t", Key: []byte{}, Value: []byte{}},
		{Topic: "t", Value: nil},
		{Topic: "t", Key: []byte("k"), Value: []byte("v")},
	}, nil))
	cl, err := c.Claim(ctx, "t", "g", &pgmsg.ClaimOpts{MaxRecords: 10})
	require.NoError(t, err)
	require.Len(t, cl.Records, 3)
	require.NotNil(t, cl.Records[0].Key, "empty key")
	require.NotNil(t, cl.Records[0].Value, "empty value")
	require.Empty(t, cl.Records[0].Value)
	require.Nil(t, cl.Records[1].Key)
	require.Nil(t, cl.Records[1].Value, "no value")
	require.Equal(t, []byte("v"), cl.Records[2].Value)
}

// Through Consumer.Run (one member, so it owns the topic's only
// partition and claims it directly): every record once, in order, across
// the segment boundary, with keys, empty values and headers intact.
// (internal/logread's TestClaimFetch tests the direct claims that read
// their records.)
func TestClaimFetchThroughConsumer(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	c, ctx := tb.client, tb.ctx
	var batch []*pgmsg.Record
	for i := 0; i < 100; i++ {
		r := &pgmsg.Record{Topic: "t", Partition: 0, Value: []byte(fmt.Sprint(i))}
		switch i % 3 {
		case 0:
			r.Key, r.Value = []byte{}, []byte{}
		case 1:
			r.Key, r.Headers = []byte("k"), map[string][]byte{"h": []byte(fmt.Sprint(i))}
		}
		batch = append(batch, r)
	}
	check := func(recs []*pgmsg.Record, first, last int64) {
		t.Helper()
		require.Len(t, recs, int(last-first+1))
		for i, r := range recs {
			want := batch[first+int64(i)]
			require.Equal(t, first+int64(i), r.Offset)
			require.Equal(t, "t", r.Topic)
			require.Equal(t, int32(0), r.Partition)
			require.Equal(t, want.Key, r.Key, "offset %d", r.Offset)
			require.Equal(t, want.Value, r.Value, "offset %d", r.Offset)
			require.Equal(t, len(want.Headers), len(r.Headers), "offset %d", r.Offset)
			for k, v := range want.Headers {
				require.Equal(t, v, r.Headers[k])
			}
			require.False(t, r.Timestamp.IsZero())
		}
	}

	_, err := c.CreateTopic(ctx, "one", pgmsg.TopicConfig{Partitions: 1, SegmentRecords: 64})
	require.NoError(t, err)
	for _, r := range batch {
		r.Topic = "one"
	}
	require.NoError(t, c.Publish(ctx, batch, nil))
	cn, err := c.NewConsumer("one", "g", &pgmsg.ConsumerOpts{Claim: pgmsg.ClaimOpts{MaxRecords: 7}})
	require.NoError(t, err)
	t.Cleanup(cn.Close)
	var got []*pgmsg.Record
	runCtx, stop := context.WithCancel(ctx)
	err = cn.Run(runCtx, func(_ context.Context, cl *pgmsg.Claim) error {
		got = append(got, cl.Records...)
		if len(got) >= len(batch) {
			stop()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	for _, r := range got {
		r.Topic = "t" // as check expects
	}
	check(got, 0, 99)
	// That these claims learn the partition's segment is internal/logread's
	// TestClaimLearnsSegment.
}
