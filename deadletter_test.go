package pgmsg_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/deadletter"
)

// runUntil runs a consumer's Run with handler until done reports true (or
// the test's context ends), then stops it and checks that it stopped
// because it was asked to.
func runUntil(t *testing.T, tb *testBundle, cn *pgmsg.Consumer, handler func(context.Context, *pgmsg.Claim) error, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(tb.ctx)
	errc := make(chan error, 1)
	go func() { errc <- cn.Run(ctx, handler) }()
	for !done() {
		select {
		case err := <-errc:
			cancel()
			require.NoError(t, err, "Run stopped early")
		case <-tb.ctx.Done():
			cancel()
			t.Fatal("timed out waiting for the consumer")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
}

// A handler that keeps failing on two records of a batch: the batch is
// handed over again one record at a time, the good records are handled
// once each and in order, the two poison records are set aside in
// "<topic>.dlq" after MaxDeliveries deliveries each (with headers naming
// their source and the error), and the group's cursor moves past them.
// DeadLetters lists them; ReplayDeadLetters publishes them back once, for
// their group only: a consumer of another group commits past them.
func TestPoisonRecordsSetAside(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "orders", 2)
	var recs []*pgmsg.Record
	for i := range 10 {
		v := strconv.Itoa(i)
		if i == 4 || i == 7 {
			v = "poison-" + v
		}
		recs = append(recs, &pgmsg.Record{Topic: "orders", Partition: 1, Key: []byte("k" + strconv.Itoa(i)), Value: []byte(v),
			Headers: map[string][]byte{"trace": []byte("t" + strconv.Itoa(i))}})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))

	var mu sync.Mutex
	var handled []string
	calls := map[int64]int{} // deliveries of each offset
	fixed := false
	handler := func(_ context.Context, cl *pgmsg.Claim) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range cl.Records {
			calls[r.Offset]++
		}
		if !fixed {
			for _, r := range cl.Records {
				if strings.HasPrefix(string(r.Value), "poison") {
					return errors.New("bad record " + string(r.Value))
				}
			}
		}
		for _, r := range cl.Records {
			handled = append(handled, string(r.Value))
		}
		return nil
	}
	cn, err := tb.client.NewConsumer("orders", "billing", &pgmsg.ConsumerOpts{
		MaxDeliveries: 3, RedeliveryBackoff: 5 * time.Millisecond, Claim: pgmsg.ClaimOpts{MaxRecords: 100}})
	require.NoError(t, err)
	runUntil(t, tb, cn, handler, func() bool {
		gs, err := tb.client.ListGroups(tb.ctx, "orders", "billing")
		require.NoError(t, err)
		for _, g := range gs {
			if g.Partition == 1 {
				return g.NextOffset == 10
			}
		}
		return false
	})
	cn.Close()
	require.Equal(t, []string{"0", "1", "2", "3", "5", "6", "8", "9"}, handled)
	require.Equal(t, 1+3, calls[4], "the failed batch, then three deliveries alone")
	require.Equal(t, 1+3, calls[7])
	require.Equal(t, 2, calls[5], "a good record of the failed batch: the batch, then once alone")

	// The dead letters: in the source partition of orders.dlq (created
	// with orders' partition count), key, value, timestamp and headers
	// kept, plus where they came from.
	desc, err := tb.client.DescribeTopic(tb.ctx, "orders.dlq")
	require.NoError(t, err)
	require.Equal(t, 2, desc.Partitions)
	require.Equal(t, 1<<20+16<<10, desc.MaxRecordBytes, "room for the largest source record and the headers")
	dl, err := tb.client.Fetch(tb.ctx, "orders.dlq", 1, 0, 10)
	require.NoError(t, err)
	require.Len(t, dl, 2)
	for i, want := range []int64{4, 7} {
		r := dl[i]
		require.Equal(t, recs[want].Value, r.Value)
		require.Equal(t, recs[want].Key, r.Key)
		require.Equal(t, "t"+strconv.FormatInt(want, 10), string(r.Headers["trace"]))
		require.Equal(t, "orders", string(r.Headers[pgmsg.DeadLetterHeaderTopic]))
		require.Equal(t, "1", string(r.Headers[pgmsg.DeadLetterHeaderPartition]))
		require.Equal(t, strconv.FormatInt(want, 10), string(r.Headers[pgmsg.DeadLetterHeaderOffset]))
		require.Equal(t, "billing", string(r.Headers[pgmsg.DeadLetterHeaderGroup]))
		require.Equal(t, "3", string(r.Headers[pgmsg.DeadLetterHeaderDeliveries]))
		require.Equal(t, "bad record "+string(recs[want].Value), string(r.Headers[pgmsg.DeadLetterHeaderError]))
	}
	src, err := tb.client.Fetch(tb.ctx, "orders", 1, 4, 1)
	require.NoError(t, err)
	require.True(t, src[0].Timestamp.Equal(dl[0].Timestamp), "the source record's timestamp")

	list, err := tb.client.DeadLetters(tb.ctx, "orders", "billing", nil)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, int64(4), list[0].Offset)
	require.Equal(t, int32(1), list[0].Partition)
	require.Equal(t, 3, list[0].Deliveries)
	require.Equal(t, "bad record poison-4", list[0].Error)
	require.False(t, list[0].Replayed)
	other, err := tb.client.DeadLetters(tb.ctx, "orders", "shipping", nil)
	require.NoError(t, err)
	require.Empty(t, other, "another group's dead letters")

	// Replay once, for billing only.
	n, err := tb.client.ReplayDeadLetters(tb.ctx, "orders", "billing", nil)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = tb.client.ReplayDeadLetters(tb.ctx, "orders", "billing", nil)
	require.NoError(t, err)
	require.Zero(t, n, "each dead letter is replayed once")
	list, err = tb.client.DeadLetters(tb.ctx, "orders", "billing", nil)
	require.NoError(t, err)
	require.True(t, list[0].Replayed && list[1].Replayed)
	back, err := tb.client.Fetch(tb.ctx, "orders", 1, 10, 10)
	require.NoError(t, err)
	require.Len(t, back, 2)
	require.Equal(t, "billing", string(back[0].Headers[pgmsg.ReplayHeaderGroup]))
	require.Equal(t, "t4", string(back[0].Headers["trace"]))
	require.Nil(t, back[0].Headers[pgmsg.DeadLetterHeaderGroup])

	// billing, its bug fixed, handles them; a new group never sees them.
	mu.Lock()
	fixed, handled = true, nil
	mu.Unlock()
	cn, err = tb.client.NewConsumer("orders", "billing", nil)
	require.NoError(t, err)
	runUntil(t, tb, cn, handler, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 2
	})
	cn.Close()
	require.Equal(t, []string{"poison-4", "poison-7"}, handled)

	var auditSeen []string
	audit, err := tb.client.NewConsumer("orders", "audit", &pgmsg.ConsumerOpts{Partitions: []int32{1}})
	require.NoError(t, err)
	runUntil(t, tb, audit, func(_ context.Context, cl *pgmsg.Claim) error {
		for _, r := range cl.Records {
			auditSeen = append(auditSeen, string(r.Value))
		}
		return nil
	}, func() bool {
		gs, err := tb.client.ListGroups(tb.ctx, "orders", "audit")
		require.NoError(t, err)
		for _, g := range gs {
			if g.Partition == 1 && g.NextOffset == 12 {
				return true
			}
		}
		return false
	})
	audit.Close()
	require.Len(t, auditSeen, 10, "the replayed records are billing's only")
}

// Without MaxDeliveries nothing is set aside: the records come back after
// a backoff that doubles, until the handler succeeds.
func TestRedeliveryBackoff(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "events", 1)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "events", Value: []byte("x")}}, nil))
	var mu sync.Mutex
	var at []time.Time
	cn, err := tb.client.NewConsumer("events", "g", &pgmsg.ConsumerOpts{RedeliveryBackoff: 20 * time.Millisecond})
	require.NoError(t, err)
	defer cn.Close()
	runUntil(t, tb, cn, func(_ context.Context, cl *pgmsg.Claim) error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if len(at) < 4 {
			return errors.New("not yet")
		}
		return nil
	}, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(at) >= 4
	})
	// Lower bounds only: the backoff is a wait the consumer must do.
	require.GreaterOrEqual(t, at[1].Sub(at[0]), 20*time.Millisecond)
	require.GreaterOrEqual(t, at[2].Sub(at[1]), 40*time.Millisecond)
	require.GreaterOrEqual(t, at[3].Sub(at[2]), 80*time.Millisecond)
	_, err = tb.client.DescribeTopic(tb.ctx, "events.dlq")
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic, "nothing set aside")
}

func TestDeadLetterOptionsChecked(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for _, opts := range []*pgmsg.ConsumerOpts{
		{MaxDeliveries: -1},
		{RedeliveryBackoff: -time.Second},
		{MaxDeliveries: 3, DeadLetterTopic: "t"},
		{RedeliveryBackoffMax: 367 * 24 * time.Hour},
	} {
		_, err := tb.client.NewConsumer("t", "g", opts)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%+v", opts)
	}
	_, err := tb.client.NewConsumer("t", "g", &pgmsg.ConsumerOpts{MaxDeliveries: 3, DeadLetterTopic: "bad name"})
	require.ErrorIs(t, err, pgmsg.ErrInvalidName)
	_, err = tb.client.NewConsumer(strings.Repeat("t", 198), "g", &pgmsg.ConsumerOpts{MaxDeliveries: 3})
	require.ErrorIs(t, err, pgmsg.ErrInvalidName, "the default dead-letter topic's name is too long")
	_, err = tb.client.DeadLetters(tb.ctx, "t", "g", &pgmsg.DeadLettersOpts{Limit: -1})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.DeadLetters(tb.ctx, "t", "g", nil)
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic)
	tb.topic(t, "t", 1)
	list, err := tb.client.DeadLetters(tb.ctx, "t", "g", nil)
	require.NoError(t, err)
	require.Empty(t, list, "no dead-letter topic: no dead letters")
	n, err := tb.client.ReplayDeadLetters(tb.ctx, "t", "g", nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

// Without MaxDeliveries, a consumer of several partitions does not hold
// the others up while one keeps failing: it gives the failed claim back.
func TestPoisonPartitionDoesNotBlockTheOthers(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "mixed", 2)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{
		{Topic: "mixed", Partition: 0, Value: []byte("poison")},
		{Topic: "mixed", Partition: 1, Value: []byte("a")},
		{Topic: "mixed", Partition: 1, Value: []byte("b")},
	}, &pgmsg.PublishOpts{ManualPartition: true}))
	var mu sync.Mutex
	var good []string
	poisoned := 0
	cn, err := tb.client.NewConsumer("mixed", "g", &pgmsg.ConsumerOpts{Partitions: []int32{0, 1}})
	require.NoError(t, err)
	defer cn.Close()
	runUntil(t, tb, cn, func(_ context.Context, cl *pgmsg.Claim) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range cl.Records {
			if string(r.Value) == "poison" {
				poisoned++
				return errors.New("poison")
			}
		}
		for _, r := range cl.Records {
			good = append(good, string(r.Value))
		}
		return nil
	}, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(good) == 2
	})
	require.Equal(t, []string{"a", "b"}, good)
	require.Positive(t, poisoned)
	gs, err := tb.client.ListGroups(tb.ctx, "mixed", "g")
	require.NoError(t, err)
	for _, g := range gs {
		if g.Partition == 0 {
			require.Zero(t, g.NextOffset, "the poison record is not skipped")
		}
	}
}

// TestDeadLetterNames: the public names of the dead-letter format spell
// the strings internal/deadletter writes and reads.
func TestDeadLetterNames(t *testing.T) {
	for _, c := range [][2]string{
		{pgmsg.DeadLetterHeaderTopic, deadletter.HeaderTopic},
		{pgmsg.DeadLetterHeaderPartition, deadletter.HeaderPartition},
		{pgmsg.DeadLetterHeaderOffset, deadletter.HeaderOffset},
		{pgmsg.DeadLetterHeaderGroup, deadletter.HeaderGroup},
		{pgmsg.DeadLetterHeaderError, deadletter.HeaderError},
		{pgmsg.DeadLetterHeaderDeliveries, deadletter.HeaderDeliveries},
		{pgmsg.ReplayHeaderGroup, deadletter.ReplayHeaderGroup},
		{pgmsg.DeadLetterSuffix, deadletter.Suffix},
		{pgmsg.ReplayGroupSuffix, deadletter.ReplayGroupSuffix},
	} {
		if c[0] != c[1] {
			t.Errorf("pgmsg has %q, internal/deadletter %q", c[0], c[1])
		}
	}
}
