// Package conformance is the one test suite of pgmsg's log interfaces
// (pgmsg.Backend, LogProducer, LogConsumer, LogAdmin), run against every
// backend: PostgreSQL from the root package's tests, Kafka from
// pgmsgkafka's. A behaviour the interfaces promise is checked here, once,
// so the backends cannot drift apart.
//
// Waits are for conditions (polled against a generous deadline), never
// for a fixed time: no check depends on the machine's speed.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// Harness describes a backend to the suite.
type Harness struct {
	// New returns a backend for one test; the test closes it. Topic and
	// group names are unique per test, so backends may share a server.
	New func(t *testing.T) pgmsg.Backend
	// Consumer are the options of every consumer the suite starts (short
	// heartbeats for quick rebalances); the suite sets Start and MaxRecords
	// where a test needs them.
	Consumer pgmsg.LogConsumerOpts
}

// wait bounds every wait for a condition; generous, as the machine may be
// loaded: the condition is met long before on a healthy run.
const wait = 60 * time.Second

// Run runs the suite's tests as parallel subtests of t.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"PartitionOrder", testPartitionOrder},
		{"KeyedPlacement", testKeyedPlacement},
		{"ManualPartition", testManualPartition},
		{"HeadersAndTimestamps", testHeadersAndTimestamps},
		{"ProducerBatching", testProducerBatching},
		{"GroupFanOut", testGroupFanOut},
		{"RedeliveryAfterFailedHandler", testRedeliveryAfterFailedHandler},
		{"RedeliveryAfterMemberDies", testRedeliveryAfterMemberDies},
		{"RedeliveryAcrossRebalance", testRedeliveryAcrossRebalance},
		{"Rebalance", testRebalance},
		{"ResetByOffsetAndTimestamp", testReset},
		{"StartPosition", testStartPosition},
		{"Admin", testAdmin},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
			t.Cleanup(cancel)
			b := h.New(t)
			t.Cleanup(b.Close)
			tc.fn(t, &suite{h: h, b: b, ctx: ctx})
		})
	}
}

type suite struct {
	h   Harness
	b   pgmsg.Backend
	ctx context.Context
}

// name returns a name unique to this run: prefix and random hex.
func name(prefix string) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return prefix + "-" + hex.EncodeToString(r[:])
}

func (s *suite) topic(t *testing.T, partitions int) string {
	t.Helper()
	n := name("conf")
	_, err := s.b.CreateTopic(s.ctx, n, pgmsg.TopicConfig{Partitions: partitions})
	require.NoError(t, err)
	return n
}

// member is a running consumer: Run in a goroutine, the records its
// handler was given in order.
type member struct {
	c      pgmsg.LogConsumer
	cancel context.CancelFunc
	done   chan error

	mu      sync.Mutex
	records []*pgmsg.Record
}

// start starts a consumer of group on topic whose handler records every
// record it is given, then calls fn (nil: succeed). The member is stopped
// when the test ends, if not before.
func (s *suite) start(t *testing.T, group, topic string, opts *pgmsg.LogConsumerOpts, fn func(ctx context.Context, cl *pgmsg.Claim) error) *member {
	t.Helper()
	o := s.h.Consumer
	if opts != nil {
		o.Start, o.MaxRecords = opts.Start, opts.MaxRecords
	}
	c, err := s.b.NewLogConsumer(group, []string{topic}, &o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(s.ctx)
	m := &member{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() {
		m.done <- c.Run(ctx, func(ctx context.Context, cl *pgmsg.Claim) error {
			m.mu.Lock()
			m.records = append(m.records, cl.Records...)
			m.mu.Unlock()
			if fn != nil {
				return fn(ctx, cl)
			}
			return nil
		})
	}()
	t.Cleanup(func() { m.stop(t) })
	return m
}

// stop cancels Run, checks it ended with the cancellation, and closes
// the consumer (it leaves the group). Stopping twice is a no-op.
func (m *member) stop(t *testing.T) {
	t.Helper()
	if m.cancel == nil {
		return
	}
	m.cancel()
	m.cancel = nil
	select {
	case err := <-m.done:
		require.ErrorIs(t, err, context.Canceled, "Run must end with its context's error")
	case <-time.After(wait):
		t.Fatal("Run did not return after its context was cancelled")
	}
	m.c.Close()
}

func (m *member) got() []*pgmsg.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*pgmsg.Record(nil), m.records...)
}

// eventually polls cond until it holds or the wait runs out.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", wait, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// distinct returns the distinct (partition, offset) pairs of recs.
func distinct(recs []*pgmsg.Record) map[[2]int64]*pgmsg.Record {
	out := map[[2]int64]*pgmsg.Record{}
	for _, r := range recs {
		out[[2]int64{int64(r.Partition), r.Offset}] = r
	}
	return out
}

func keyed(topic string, n, keys int) []*pgmsg.Record {
	recs := make([]*pgmsg.Record, n)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: topic, Key: []byte("key-" + strconv.Itoa(i%keys)), Value: []byte(strconv.Itoa(i))}
	}
	return recs
}

// testPartitionOrder: a consumer gets each partition's records in offset
// order, and each key's records in the order they were published.
func testPartitionOrder(t *testing.T, s *suite) {
	topic := s.topic(t, 3)
	recs := keyed(topic, 90, 9)
	for i := 0; i < len(recs); i += 10 { // several publishes: several batches
		require.NoError(t, s.b.Publish(s.ctx, recs[i:i+10], nil))
	}
	m := s.start(t, name("g"), topic, &pgmsg.LogConsumerOpts{MaxRecords: 7}, nil)
	eventually(t, "all records consumed", func() bool { return len(distinct(m.got())) == len(recs) })
	m.stop(t)
	got := m.got()
	require.Len(t, got, len(recs), "no record delivered twice without a failure")
	last := map[int32]int64{}
	lastValue := map[string]int{}
	for _, r := range got {
		if prev, ok := last[r.Partition]; ok {
			require.Greater(t, r.Offset, prev, "partition %d out of order", r.Partition)
		}
		last[r.Partition] = r.Offset
		v, err := strconv.Atoi(string(r.Value))
		require.NoError(t, err)
		if prev, ok := lastValue[string(r.Key)]; ok {
			require.Greater(t, v, prev, "key %s out of order", r.Key)
		}
		lastValue[string(r.Key)] = v
	}
	require.Len(t, last, 3, "nine keys spread over all three partitions")
}

// testKeyedPlacement: a key lands on the partition PartitionForKey picks
// (Kafka's murmur2), through Publish and through a LogProducer, and the
// consumer sees it there.
func testKeyedPlacement(t *testing.T, s *suite) {
	const partitions = 7
	topic := s.topic(t, partitions)
	recs := keyed(topic, 50, 50)
	require.NoError(t, s.b.Publish(s.ctx, recs, nil))
	p, err := s.b.NewLogProducer(nil)
	require.NoError(t, err)
	more := keyed(topic, 50, 50)
	require.NoError(t, p.ProduceSync(s.ctx, more...))
	require.NoError(t, p.Close(s.ctx))
	want := map[string]int32{}
	for _, r := range append(recs, more...) {
		w := pgmsg.PartitionForKey(r.Key, partitions)
		require.Equal(t, w, r.Partition, "key %s", r.Key)
		want[string(r.Key)] = w
	}
	m := s.start(t, name("g"), topic, nil, nil)
	eventually(t, "all records consumed", func() bool { return len(distinct(m.got())) == 100 })
	for _, r := range m.got() {
		require.Equal(t, want[string(r.Key)], r.Partition, "consumed key %s", r.Key)
	}
}

// testManualPartition: PublishOpts.ManualPartition places records where
// asked; a call naming a partition the topic does not have fails with
// ErrPartitionOutOfRange, one naming a topic that does not exist with
// ErrUnknownTopic, and neither stores any of its records; a producer
// fails records to a missing topic, nil records and records produced
// after Close.
func testManualPartition(t *testing.T, s *suite) {
	topic := s.topic(t, 3)
	recs := []*pgmsg.Record{
		{Topic: topic, Partition: 2, Key: []byte("a"), Value: []byte("x")},
		{Topic: topic, Partition: 0, Key: []byte("a"), Value: []byte("y")},
	}
	require.NoError(t, s.b.Publish(s.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	require.Equal(t, int32(2), recs[0].Partition)
	require.Equal(t, int32(0), recs[1].Partition)
	err := s.b.Publish(s.ctx, []*pgmsg.Record{
		{Topic: topic, Partition: 1, Value: []byte("ok")},
		{Topic: topic, Partition: 3, Value: []byte("z")},
	}, &pgmsg.PublishOpts{ManualPartition: true})
	require.ErrorIs(t, err, pgmsg.ErrPartitionOutOfRange)
	require.Equal(t, "PM005", pgmsg.ErrorCode(err))
	err = s.b.Publish(s.ctx, []*pgmsg.Record{
		{Topic: topic, Value: []byte("ok")},
		{Topic: name("missing"), Value: []byte("z")},
	}, nil)
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic)
	require.Equal(t, "PM001", pgmsg.ErrorCode(err))
	p, err := s.b.NewLogProducer(nil)
	require.NoError(t, err)
	err = p.ProduceSync(s.ctx, &pgmsg.Record{Topic: name("missing"), Value: []byte("z")})
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic, "a producer's record to a missing topic")
	err = p.ProduceSync(s.ctx, nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "a nil record")
	require.NoError(t, p.Close(s.ctx))
	err = p.ProduceSync(s.ctx, &pgmsg.Record{Topic: topic, Value: []byte("z")})
	require.ErrorIs(t, err, pgmsg.ErrClosed, "a closed producer")
	d, err := s.b.DescribeTopic(s.ctx, topic)
	require.NoError(t, err)
	var total int64
	for _, p := range d.PartitionInfo {
		total += p.NextOffset - p.StartOffset
	}
	require.Equal(t, int64(2), total, "the refused calls stored nothing")
}

// testHeadersAndTimestamps: key, value, headers and a producer-set
// timestamp come back as published (timestamps to the millisecond,
// Kafka's precision); a zero timestamp becomes the publish time.
func testHeadersAndTimestamps(t *testing.T, s *suite) {
	topic := s.topic(t, 1)
	ts := time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	before := time.Now().Add(-time.Minute)
	recs := []*pgmsg.Record{
		{Topic: topic, Key: []byte("k"), Value: []byte("v1"), Timestamp: ts,
			Headers: map[string][]byte{"trace": []byte("abc"), "bin": {0, 1, 255}, "empty": {}}},
		{Topic: topic, Value: []byte("v2")},
	}
	require.NoError(t, s.b.Publish(s.ctx, recs, nil))
	require.True(t, recs[0].Timestamp.Equal(ts), "stored timestamp %s, want %s", recs[0].Timestamp, ts)
	m := s.start(t, name("g"), topic, nil, nil)
	eventually(t, "both records consumed", func() bool { return len(m.got()) >= 2 })
	got := m.got()
	require.Equal(t, []byte("k"), got[0].Key)
	require.Equal(t, []byte("v1"), got[0].Value)
	require.True(t, got[0].Timestamp.Equal(ts), "consumed timestamp %s, want %s", got[0].Timestamp, ts)
	require.Len(t, got[0].Headers, 3)
	require.Equal(t, []byte("abc"), got[0].Headers["trace"])
	require.Equal(t, []byte{0, 1, 255}, got[0].Headers["bin"])
	require.Empty(t, got[0].Headers["empty"])
	require.Nil(t, got[1].Key)
	require.Empty(t, got[1].Headers)
	require.True(t, got[1].Timestamp.After(before) && got[1].Timestamp.Before(time.Now().Add(time.Minute)),
		"a zero timestamp becomes the publish time, got %s", got[1].Timestamp)
}

// testProducerBatching: records produced from many goroutines are all
// stored, each promise called once with the record's place, and each
// key's records stored in the order each goroutine produced them.
func testProducerBatching(t *testing.T, s *suite) {
	topic := s.topic(t, 4)
	p, err := s.b.NewLogProducer(&pgmsg.ProducerConfig{Linger: 5 * time.Millisecond})
	require.NoError(t, err)
	const goroutines, each = 8, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	offsets := map[string][]int64{} // per key, in produce order
	var failures []error
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte("producer-" + strconv.Itoa(g))
			results := make([]int64, each)
			var pw sync.WaitGroup
			pw.Add(each)
			for i := 0; i < each; i++ {
				p.Produce(s.ctx, &pgmsg.Record{Topic: topic, Key: key, Value: []byte(strconv.Itoa(i))}, func(r *pgmsg.Record, err error) {
					defer pw.Done()
					if err != nil {
						mu.Lock()
						failures = append(failures, err)
						mu.Unlock()
						return
					}
					results[i] = r.Offset
				})
			}
			pw.Wait()
			mu.Lock()
			offsets[string(key)] = results
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.NoError(t, p.Close(s.ctx))
	require.Empty(t, failures)
	for key, offs := range offsets {
		for i := 1; i < len(offs); i++ {
			require.Greater(t, offs[i], offs[i-1], "key %s: produce order is offset order", key)
		}
	}
	d, err := s.b.DescribeTopic(s.ctx, topic)
	require.NoError(t, err)
	var total int64
	for _, pi := range d.PartitionInfo {
		total += pi.NextOffset - pi.StartOffset
	}
	require.Equal(t, int64(goroutines*each), total)
}

// testGroupFanOut: every group gets every record; members of one group
// share them.
func testGroupFanOut(t *testing.T, s *suite) {
	topic := s.topic(t, 4)
	recs := keyed(topic, 80, 16)
	require.NoError(t, s.b.Publish(s.ctx, recs, nil))
	g1, g2 := name("g1"), name("g2")
	a := s.start(t, g1, topic, nil, nil)
	b := s.start(t, g2, topic, nil, nil)
	eventually(t, "both groups consumed everything", func() bool {
		return len(distinct(a.got())) == len(recs) && len(distinct(b.got())) == len(recs)
	})
	// Two members of a third group together see each record.
	g3 := name("g3")
	c1 := s.start(t, g3, topic, nil, nil)
	c2 := s.start(t, g3, topic, nil, nil)
	eventually(t, "the third group consumed everything", func() bool {
		return len(distinct(append(c1.got(), c2.got()...))) == len(recs)
	})
}

// testRedeliveryAfterFailedHandler: a failed handler gets the same records
// again; once it succeeds they are committed: the group's cursor is past
// them and a new member of the group starts after them.
func testRedeliveryAfterFailedHandler(t *testing.T, s *suite) {
	topic := s.topic(t, 1)
	recs := keyed(topic, 5, 1)
	require.NoError(t, s.b.Publish(s.ctx, recs, nil))
	group := name("g")
	var mu sync.Mutex
	failures := 0
	var seen [][]int64
	m := s.start(t, group, topic, nil, func(_ context.Context, cl *pgmsg.Claim) error {
		mu.Lock()
		defer mu.Unlock()
		var offs []int64
		for _, r := range cl.Records {
			offs = append(offs, r.Offset)
		}
		seen = append(seen, offs)
		if failures < 2 {
			failures++
			return errors.New("handler fails")
		}
		return nil
	})
	eventually(t, "all records handled after two failures", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return failures == 2 && len(distinct(m.got())) == 5 && len(seen) >= 3
	})
	eventually(t, "the group's cursor committed past the records", func() bool {
		gps, err := s.b.ListGroups(s.ctx, topic, group)
		return err == nil && len(gps) == 1 && gps[0].NextOffset == 5
	})
	m.stop(t)
	mu.Lock()
	require.Equal(t, seen[0], seen[1], "the failed records are handed over again")
	require.Equal(t, int64(0), seen[2][0], "from the first failed record")
	mu.Unlock()
	require.NoError(t, s.b.Publish(s.ctx, []*pgmsg.Record{{Topic: topic, Value: []byte("after")}}, nil))
	n := s.start(t, group, topic, nil, nil)
	eventually(t, "the new member gets the new record", func() bool { return len(n.got()) >= 1 })
	require.Equal(t, int64(5), n.got()[0].Offset, "committed records are not delivered again")
}

// testRedeliveryAfterMemberDies: records a member was handling when it
// died (its handler never returned; it left without committing) go to
// another member of the group.
func testRedeliveryAfterMemberDies(t *testing.T, s *suite) {
	topic := s.topic(t, 1)
	require.NoError(t, s.b.Publish(s.ctx, keyed(topic, 3, 1), nil))
	group := name("g")
	claimed := make(chan *pgmsg.Claim, 1)
	a := s.start(t, group, topic, nil, func(ctx context.Context, cl *pgmsg.Claim) error {
		select {
		case claimed <- cl:
		default:
		}
		<-ctx.Done() // stuck until the member dies
		return ctx.Err()
	})
	var cl *pgmsg.Claim
	select {
	case cl = <-claimed:
	case <-time.After(wait):
		t.Fatal("member a got no claim")
	}
	require.Equal(t, int64(0), cl.Records[0].Offset)
	b := s.start(t, group, topic, nil, nil)
	a.stop(t) // dies mid-claim: nothing committed
	eventually(t, "member b gets a's records", func() bool { return len(distinct(b.got())) == 3 })
	require.Equal(t, int64(0), b.got()[0].Offset)
	eventually(t, "b's commit", func() bool {
		gps, err := s.b.ListGroups(s.ctx, topic, group)
		return err == nil && len(gps) == 1 && gps[0].NextOffset == 3
	})
}

// testRedeliveryAcrossRebalance: a member whose handler keeps failing
// while another member joins neither blocks the rebalance for good nor
// loses the records it failed on: once the handler succeeds, every record
// has been handled successfully by one member or the other.
func testRedeliveryAcrossRebalance(t *testing.T, s *suite) {
	topic := s.topic(t, 2)
	recs := keyed(topic, 20, 20)
	require.NoError(t, s.b.Publish(s.ctx, recs, nil))
	group := name("g")
	fail := make(chan struct{})
	var mu sync.Mutex
	failures := 0
	var handled []*pgmsg.Record
	a := s.start(t, group, topic, nil, func(_ context.Context, cl *pgmsg.Claim) error {
		select {
		case <-fail:
		default:
			mu.Lock()
			failures++
			mu.Unlock()
			return errors.New("handler fails")
		}
		mu.Lock()
		handled = append(handled, cl.Records...)
		mu.Unlock()
		return nil
	})
	eventually(t, "a failed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return failures > 0
	})
	b := s.start(t, group, topic, nil, nil)
	eventually(t, "a and b own a partition each", func() bool {
		return len(a.c.Assignment()[topic]) == 1 && len(b.c.Assignment()[topic]) == 1
	})
	close(fail)
	eventually(t, "every record handled successfully", func() bool {
		mu.Lock()
		ok := append([]*pgmsg.Record(nil), handled...)
		mu.Unlock()
		return len(distinct(append(ok, b.got()...))) == len(recs)
	})
}

// testRebalance: partitions spread over members as they join and move to
// the others when one leaves; records published throughout are all
// consumed.
func testRebalance(t *testing.T, s *suite) {
	const partitions = 4
	topic := s.topic(t, partitions)
	group := name("g")
	published := 0
	publish := func() {
		recs := keyed(topic, 20, 20)
		require.NoError(t, s.b.Publish(s.ctx, recs, nil))
		published += len(recs)
	}
	owns := func(ms ...*member) [][]int32 {
		out := make([][]int32, len(ms))
		for i, m := range ms {
			out[i] = m.c.Assignment()[topic]
		}
		return out
	}
	// spread reports whether ms own every partition between them, each
	// one at least one, and no partition twice.
	spread := func(ms ...*member) bool {
		seen := map[int32]bool{}
		for _, ps := range owns(ms...) {
			if len(ps) == 0 {
				return false
			}
			for _, p := range ps {
				if seen[p] {
					return false
				}
				seen[p] = true
			}
		}
		return len(seen) == partitions
	}
	all := func(ms ...*member) int {
		var recs []*pgmsg.Record
		for _, m := range ms {
			recs = append(recs, m.got()...)
		}
		return len(distinct(recs))
	}
	publish()
	a := s.start(t, group, topic, nil, nil)
	eventually(t, "a owns every partition", func() bool { return spread(a) })
	b := s.start(t, group, topic, nil, nil)
	eventually(t, "a and b share the partitions", func() bool { return spread(a, b) })
	publish()
	eventually(t, "every record consumed", func() bool { return all(a, b) == published })
	c := s.start(t, group, topic, nil, nil)
	eventually(t, "a, b and c share the partitions", func() bool { return spread(a, b, c) })
	b.stop(t)
	eventually(t, "b's partitions moved to a and c", func() bool { return spread(a, c) })
	publish()
	eventually(t, "every record consumed", func() bool { return all(a, b, c) == published })
	d, err := s.b.DescribeGroup(s.ctx, topic, group)
	require.NoError(t, err)
	require.Len(t, d.Members, 2, "after b left: %v", owns(a, c))
	var members []string
	for _, m := range d.Members {
		members = append(members, m.MemberID)
	}
	sort.Strings(members)
	want := []string{a.c.MemberID(), c.c.MemberID()}
	sort.Strings(want)
	require.Equal(t, want, members)
}

// testReset: ResetGroup moves a stopped group to an offset, a timestamp,
// the earliest and the latest record; a member then starts there. A bad
// position fails with ErrInvalidOffset.
func testReset(t *testing.T, s *suite) {
	topic := s.topic(t, 1)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := make([]*pgmsg.Record, 10)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: topic, Value: []byte(strconv.Itoa(i)), Timestamp: base.Add(time.Duration(i) * time.Second)}
	}
	require.NoError(t, s.b.Publish(s.ctx, recs, nil))
	group := name("g")
	m := s.start(t, group, topic, nil, nil)
	eventually(t, "the group read and committed everything", func() bool {
		gps, err := s.b.ListGroups(s.ctx, topic, group)
		return err == nil && len(gps) == 1 && gps[0].NextOffset == 10
	})
	m.stop(t)
	firstAfterReset := func(position string, want int64) {
		t.Helper()
		var gps []pgmsg.GroupPartition
		var err error
		// The group may take a moment to register that its last member
		// left (Kafka refuses resets of a group with members).
		deadline := time.Now().Add(wait)
		for {
			gps, err = s.b.ResetGroup(s.ctx, topic, group, position, nil)
			if err == nil || !errors.Is(err, pgmsg.ErrInvalidArgument) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.NoError(t, err, "reset to %s", position)
		require.Len(t, gps, 1)
		require.Equal(t, want, gps[0].NextOffset, "reset to %s", position)
		if want == 10 {
			return
		}
		n := s.start(t, group, topic, nil, nil)
		eventually(t, "a record after the reset to "+position, func() bool { return len(n.got()) > 0 })
		require.Equal(t, want, n.got()[0].Offset, "first record after the reset to %s", position)
		n.stop(t)
	}
	firstAfterReset("3", 3)
	firstAfterReset(base.Add(6*time.Second).Format(time.RFC3339), 6)
	firstAfterReset(base.Add(5500*time.Millisecond).Format(time.RFC3339Nano), 6)
	firstAfterReset(pgmsg.PositionEarliest, 0)
	firstAfterReset(pgmsg.PositionLatest, 10)
	firstAfterReset("1000", 10) // an offset past the end is the end
	_, err := s.b.ResetGroup(s.ctx, topic, group, "yesterday-ish", nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidOffset)
	require.Equal(t, "PM011", pgmsg.ErrorCode(err))
	p := int32(0)
	gps, err := s.b.ResetGroup(s.ctx, topic, group, "4", &p)
	require.NoError(t, err)
	require.Equal(t, []int64{4}, []int64{gps[0].NextOffset})
}

// testStartPosition: a new group starts where LogConsumerOpts.Start says:
// the latest record, an offset or a timestamp; a bad position fails with
// ErrInvalidOffset (when the consumer is made, or when it runs).
func testStartPosition(t *testing.T, s *suite) {
	topic := s.topic(t, 1)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := make([]*pgmsg.Record, 5)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: topic, Value: []byte(strconv.Itoa(i)), Timestamp: base.Add(time.Duration(i) * time.Second)}
	}
	require.NoError(t, s.b.Publish(s.ctx, recs, nil))
	first := func(start string) *member {
		m := s.start(t, name("g"), topic, &pgmsg.LogConsumerOpts{Start: start}, nil)
		return m
	}
	at2 := first("2")
	at3 := first(base.Add(3 * time.Second).Format(time.RFC3339))
	latest := first(pgmsg.PositionLatest)
	eventually(t, "the offset and timestamp starts read to the end", func() bool {
		return len(at2.got()) == 3 && len(at3.got()) == 2
	})
	require.Equal(t, int64(2), at2.got()[0].Offset)
	require.Equal(t, int64(3), at3.got()[0].Offset)
	// latest: none of the records there before it. (Kafka resolves
	// "latest" when the member first fetches, a moment after it joined:
	// publish until it reads one.)
	deadline := time.Now().Add(wait)
	for len(latest.got()) == 0 {
		require.True(t, time.Now().Before(deadline), "the latest member read nothing")
		require.NoError(t, s.b.Publish(s.ctx, []*pgmsg.Record{{Topic: topic, Value: []byte("new")}}, nil))
		for i := 0; i < 50 && len(latest.got()) == 0; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	require.GreaterOrEqual(t, latest.got()[0].Offset, int64(5))
	require.Equal(t, []byte("new"), latest.got()[0].Value)

	o := s.h.Consumer
	o.Start = "not a position"
	c, err := s.b.NewLogConsumer(name("g"), []string{topic}, &o)
	if err == nil {
		ctx, cancel := context.WithTimeout(s.ctx, wait)
		err = c.Run(ctx, func(context.Context, *pgmsg.Claim) error { return nil })
		cancel()
		c.Close()
	}
	require.ErrorIs(t, err, pgmsg.ErrInvalidOffset)
	require.Equal(t, "PM011", pgmsg.ErrorCode(err))
}

// testAdmin: topics are created, described and deleted, groups listed and
// described, with the same errors and codes on every backend.
func testAdmin(t *testing.T, s *suite) {
	topic := s.topic(t, 3)
	_, err := s.b.CreateTopic(s.ctx, topic, pgmsg.TopicConfig{Partitions: 3})
	require.ErrorIs(t, err, pgmsg.ErrTopicExists)
	require.Equal(t, "PM002", pgmsg.ErrorCode(err))
	_, err = s.b.CreateTopic(s.ctx, "bad name!", pgmsg.TopicConfig{})
	require.ErrorIs(t, err, pgmsg.ErrInvalidName)
	_, err = s.b.CreateTopic(s.ctx, name("conf"), pgmsg.TopicConfig{Partitions: pgmsg.PartitionsMax + 1})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	require.Equal(t, "PM004", pgmsg.ErrorCode(err))

	recs := []*pgmsg.Record{
		{Topic: topic, Partition: 1, Value: []byte("a")},
		{Topic: topic, Partition: 1, Value: []byte("b")},
		{Topic: topic, Partition: 2, Value: []byte("c")},
	}
	require.NoError(t, s.b.Publish(s.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	d, err := s.b.DescribeTopic(s.ctx, topic)
	require.NoError(t, err)
	require.Equal(t, topic, d.Name)
	require.Equal(t, 3, d.Partitions)
	require.Len(t, d.PartitionInfo, 3)
	var next []int64
	for _, p := range d.PartitionInfo {
		next = append(next, p.NextOffset)
	}
	require.Equal(t, []int64{0, 2, 1}, next)

	group := name("g")
	_, err = s.b.DescribeGroup(s.ctx, topic, group)
	require.ErrorIs(t, err, pgmsg.ErrUnknownGroup)
	require.Equal(t, "PM007", pgmsg.ErrorCode(err))
	m := s.start(t, group, topic, nil, nil)
	eventually(t, "the group committed every record", func() bool {
		gps, err := s.b.ListGroups(s.ctx, topic, group)
		if err != nil || len(gps) != 3 {
			return false
		}
		for _, gp := range gps {
			// (A partition that never had a record may have no cursor
			// committed on Kafka: NextOffset -1; its lag is 0 anyway.)
			if gp.Lag != 0 || gp.EndOffset > 0 && gp.NextOffset != gp.EndOffset {
				return false
			}
		}
		return true
	})
	eventually(t, "the member owns all three partitions", func() bool {
		gd, err := s.b.DescribeGroup(s.ctx, topic, group)
		return err == nil && len(gd.Members) == 1 && len(gd.Members[0].Partitions) == 3 &&
			gd.Members[0].MemberID == m.c.MemberID()
	})
	m.stop(t)
	all, err := s.b.ListGroups(s.ctx, "", group)
	require.NoError(t, err)
	require.Len(t, all, 3, "groups of every topic, filtered by group: %v", fmt.Sprint(all))

	require.NoError(t, s.b.DeleteTopic(s.ctx, topic))
	_, err = s.b.DescribeTopic(s.ctx, topic)
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic)
	require.Equal(t, "PM001", pgmsg.ErrorCode(err))
	err = s.b.DeleteTopic(s.ctx, topic)
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic)
}
