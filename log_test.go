package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// Five groups, two members each, read while four producers publish: each
// group gets every record exactly once (no faults here) in offset order
// per partition.
func TestGroupsReadEverythingInOrder(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	const partitions, groups, perProducer = 4, 5, 150
	tb.topic(t, "fanout", partitions)

	producer, err := tb.client.NewProducer(nil)
	require.NoError(t, err)
	var pwg sync.WaitGroup
	for w := 0; w < 4; w++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := 0; i < perProducer; i++ {
				require.NoError(t, producer.ProduceSync(tb.ctx, &pgmsg.Record{Topic: "fanout",
					Key: []byte(fmt.Sprintf("k%d-%d", w, i%7)), Value: []byte(fmt.Sprintf("%d-%d", w, i))}))
			}
		}()
	}
	const total = 4 * perProducer

	type seen struct {
		mu   sync.Mutex
		next map[int32]int64
		n    int
	}
	ctx, cancel := context.WithCancel(tb.ctx)
	defer cancel()
	results := make([]*seen, groups)
	var cwg sync.WaitGroup
	for g := 0; g < groups; g++ {
		results[g] = &seen{next: map[int32]int64{}}
		for m := 0; m < 2; m++ {
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				cn, err := tb.client.NewConsumer("fanout", fmt.Sprintf("g%d", g), &pgmsg.ConsumerOpts{Claim: pgmsg.ClaimOpts{MaxRecords: 37}})
				require.NoError(t, err)
				defer cn.Close()
				err = cn.Run(ctx, func(_ context.Context, cl *pgmsg.Claim) error {
					s := results[g]
					s.mu.Lock()
					defer s.mu.Unlock()
					for _, r := range cl.Records {
						if r.Offset != s.next[r.Partition] {
							return fmt.Errorf("group %d partition %d: got offset %d, want %d", g, r.Partition, r.Offset, s.next[r.Partition])
						}
						s.next[r.Partition]++
						s.n++
					}
					return nil
				})
				if !errors.Is(err, context.Canceled) {
					t.Errorf("consumer of group %d stopped: %v", g, err)
				}
			}()
		}
	}
	pwg.Wait()
	require.NoError(t, producer.Close(tb.ctx))
	// Wait until every group has everything (or the test context ends).
	deadline := time.Now().Add(60 * time.Second)
	for {
		done := true
		for _, s := range results {
			s.mu.Lock()
			if s.n < total {
				done = false
			}
			s.mu.Unlock()
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	cwg.Wait()
	for g, s := range results {
		require.Equal(t, total, s.n, "group %d", g)
	}
	lags, err := tb.client.ListGroups(tb.ctx, "fanout", "")
	require.NoError(t, err)
	require.Len(t, lags, groups*partitions)
	for _, l := range lags {
		require.Zero(t, l.Lag, "group %s partition %d", l.Group, l.Partition)
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

// Kafka's own test vectors for murmur2 (Kafka UtilsTest.testMurmur2), in Go
// and in the SQL API.
func TestMurmur2MatchesKafka(t *testing.T) {
	t.Parallel()
	vectors := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	tb := setup(t, nil)
	fn := pgx.Identifier{tb.Schema, "murmur2"}.Sanitize()
	for in, want := range vectors {
		require.Equal(t, want, pgmsg.Murmur2([]byte(in)), "Go murmur2(%q)", in)
		var got int32
		require.NoError(t, tb.Pool.QueryRow(tb.ctx, "SELECT "+fn+"($1::bytea)", []byte(in)).Scan(&got))
		require.Equal(t, want, got, "SQL murmur2(%q)", in)
	}
	// Go and SQL partition random keys identically.
	pfk := pgx.Identifier{tb.Schema, "partition_for_key"}.Sanitize()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		key := make([]byte, rng.IntN(40))
		for j := range key {
			key[j] = byte(rng.IntN(256))
		}
		parts := 1 + rng.IntN(64)
		var got int32
		require.NoError(t, tb.Pool.QueryRow(tb.ctx, "SELECT "+pfk+"($1::bytea, $2)", key, parts).Scan(&got))
		require.Equal(t, pgmsg.PartitionForKey(key, parts), got, "key %x over %d partitions", key, parts)
	}
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

func TestTopicAdmin(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	topic, err := tb.client.CreateTopic(tb.ctx, "orders.v1", pgmsg.TopicConfig{Partitions: 3, SegmentRecords: 32,
		Settings: map[string]any{"retention_ms": 3600000}})
	require.NoError(t, err)
	require.Equal(t, 3, topic.Partitions)
	require.Equal(t, int64(32), topic.SegmentRecords)
	require.Equal(t, float64(3600000), topic.Settings["retention_ms"])

	_, err = tb.client.CreateTopic(tb.ctx, "orders.v1", pgmsg.TopicConfig{Partitions: 1})
	require.ErrorIs(t, err, pgmsg.ErrTopicExists)
	require.Equal(t, "PM002", pgmsg.ErrorCode(err))

	// 100 records to partition 2 span several 32-record segments, created as needed.
	var recs []*pgmsg.Record
	for i := 0; i < 100; i++ {
		recs = append(recs, &pgmsg.Record{Topic: "orders.v1", Partition: 2, Value: make([]byte, 100)})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	desc, err := tb.client.DescribeTopic(tb.ctx, "orders.v1")
	require.NoError(t, err)
	require.Len(t, desc.PartitionInfo, 3)
	p2 := desc.PartitionInfo[2]
	require.Equal(t, int64(100), p2.NextOffset)
	require.Equal(t, int64(100), p2.Records)
	require.GreaterOrEqual(t, p2.Segments, 4)
	require.Greater(t, p2.ApproxBytes, int64(10000))

	// A group created before new partitions reads them from their start.
	_, err = tb.client.CreateGroup(tb.ctx, "orders.v1", "early", pgmsg.PositionLatest)
	require.NoError(t, err)
	topic, err = tb.client.AddPartitions(tb.ctx, "orders.v1", 5)
	require.NoError(t, err)
	require.Equal(t, 5, topic.Partitions)
	_, err = tb.client.AddPartitions(tb.ctx, "orders.v1", 4)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "orders.v1", Partition: 4, Value: []byte("new")}},
		&pgmsg.PublishOpts{ManualPartition: true}))
	cl, err := tb.client.Claim(tb.ctx, "orders.v1", "early", nil)
	require.NoError(t, err)
	require.Equal(t, int32(4), cl.Partition)
	require.Equal(t, "new", string(cl.Records[0].Value))

	topics, err := tb.client.ListTopics(tb.ctx)
	require.NoError(t, err)
	require.Len(t, topics, 1)
	require.NoError(t, tb.client.DeleteTopic(tb.ctx, "orders.v1"))
	topics, err = tb.client.ListTopics(tb.ctx)
	require.NoError(t, err)
	require.Empty(t, topics)
	require.ErrorIs(t, tb.client.DeleteTopic(tb.ctx, "orders.v1"), pgmsg.ErrUnknownTopic)
	// Dropping the topic dropped its tables.
	var tables int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relname ~ '^record_[0-9]'`,
		tb.Schema).Scan(&tables))
	require.Zero(t, tables)
}

func TestGroupStartAndReset(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "replay", 1)
	var recs []*pgmsg.Record
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 10; i++ {
		recs = append(recs, &pgmsg.Record{Topic: "replay", Value: []byte(fmt.Sprint(i)), Timestamp: base.Add(time.Duration(i) * time.Hour)})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))
	require.True(t, recs[3].Timestamp.Equal(base.Add(3*time.Hour)))

	first := func(group string, opts *pgmsg.ClaimOpts) int64 {
		cl, err := tb.client.Claim(tb.ctx, "replay", group, opts)
		require.NoError(t, err)
		if cl == nil {
			return -1
		}
		require.NoError(t, tb.client.Release(tb.ctx, cl))
		return cl.Records[0].Offset
	}
	require.Equal(t, int64(0), first("from-earliest", nil))
	require.Equal(t, int64(-1), first("from-latest", &pgmsg.ClaimOpts{Start: pgmsg.PositionLatest}))
	require.Equal(t, int64(4), first("from-time", &pgmsg.ClaimOpts{Start: base.Add(210 * time.Minute).Format(time.RFC3339)}))
	require.Equal(t, int64(7), first("from-offset", &pgmsg.ClaimOpts{Start: "7"}))

	_, err := tb.client.ResetGroup(tb.ctx, "replay", "from-latest", "2", nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), first("from-latest", nil))
	_, err = tb.client.ResetGroup(tb.ctx, "replay", "from-latest", base.Add(8*time.Hour).Format(time.RFC3339), nil)
	require.NoError(t, err)
	require.Equal(t, int64(8), first("from-latest", nil))

	// A reset fences the live claim.
	cl, err := tb.client.Claim(tb.ctx, "replay", "from-earliest", nil)
	require.NoError(t, err)
	_, err = tb.client.ResetGroup(tb.ctx, "replay", "from-earliest", pgmsg.PositionLatest, nil)
	require.NoError(t, err)
	require.ErrorIs(t, tb.client.Commit(tb.ctx, cl), pgmsg.ErrClaimNotHeld)
	lags, err := tb.client.ListGroups(tb.ctx, "replay", "from-earliest")
	require.NoError(t, err)
	require.Equal(t, int64(10), lags[0].NextOffset)

	_, err = tb.client.ResetGroup(tb.ctx, "replay", "nope", pgmsg.PositionEarliest, nil)
	require.ErrorIs(t, err, pgmsg.ErrUnknownGroup)
	_, err = tb.client.ResetGroup(tb.ctx, "replay", "from-latest", "-5", nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidOffset)
	_, err = tb.client.ResetGroup(tb.ctx, "replay", "from-latest", "yesterday-ish", nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidOffset)
	ok, err := tb.client.DeleteGroup(tb.ctx, "replay", "from-latest")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = tb.client.DeleteGroup(tb.ctx, "replay", "from-latest")
	require.NoError(t, err)
	require.False(t, ok)
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

// Hostile names never reach SQL as code: the Go validator and the SQL API
// (called directly, bypassing Go) both reject them, and nothing is created.
func TestHostileNames(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	hostile := []string{
		"", `x"; DROP TABLE record; --`, "a'b", "a b", "tab\tname", "ünïcødé", "semi;colon",
		"$$ LANGUAGE sql $$", "a/b", "../../etc", "null\x00byte", strings.Repeat("b", 201),
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	}
	fn := pgx.Identifier{tb.Schema, "topic_create"}.Sanitize()
	for _, name := range hostile {
		_, err := tb.client.CreateTopic(tb.ctx, name, pgmsg.TopicConfig{})
		require.ErrorIs(t, err, pgmsg.ErrInvalidName, "name %q", name)
		if strings.ContainsRune(name, 0) {
			continue // PostgreSQL text cannot hold NUL at all
		}
		_, err = tb.Pool.Exec(tb.ctx, "SELECT "+fn+"($1, 1)", name)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "name %q", name)
		require.Equal(t, "PM003", pgErr.Code, "name %q", name)
	}
	// Valid names with every allowed character work.
	for _, name := range []string{"a", "A.b_c-9", string(make200('z'))} {
		_, err := tb.client.CreateTopic(tb.ctx, name, pgmsg.TopicConfig{})
		require.NoError(t, err, "name %q", name)
		require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: name, Value: []byte("v")}}, nil))
	}
	topics, err := tb.client.ListTopics(tb.ctx)
	require.NoError(t, err)
	require.Len(t, topics, 3)
}

func make200(c byte) []byte {
	b := make([]byte, 200)
	for i := range b {
		b[i] = c
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// Records written under one schema are invisible to a client of another,
// and a client configured for a schema that is not migrated fails clearly.
func TestSchemaIsolation(t *testing.T) {
	t.Parallel()
	a := setup(t, nil)
	b := setup(t, nil)
	a.topic(t, "same", 1)
	b.topic(t, "same", 1)
	require.NoError(t, a.client.Publish(a.ctx, []*pgmsg.Record{{Topic: "same", Value: []byte("a")}}, nil))
	recs, err := b.client.Fetch(b.ctx, "same", 0, 0, 10)
	require.NoError(t, err)
	require.Empty(t, recs)
	_, err = pgmsg.NewClient(a.Pool, &pgmsg.Config{Schema: `bad"schema`})
	require.Error(t, err)
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
