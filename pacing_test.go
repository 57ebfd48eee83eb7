package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// publishSeq publishes n records of value prefix-i to topic's partition 0.
func publishSeq(t *testing.T, tb *testBundle, topic, prefix string, n int) {
	t.Helper()
	recs := make([]*pgmsg.Record, n)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: topic, Partition: 0, Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
}

// A consumer left at the default claim cap doubles it while its claims
// come back full, up to ClaimMaxRecordsGrowMax, and halves it back toward
// the default when one comes back a quarter full or less (not the claim
// right after a full one); every record is claimed once, in order.
func TestConsumerClaimCapGrowsAndShrinks(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	// Default segments: a claim is not cut at a segment's end.
	_, err := tb.client.CreateTopic(tb.ctx, "capgrow", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	cn, err := tb.client.NewConsumer("capgrow", "g", nil)
	require.NoError(t, err)
	defer cn.Close()
	require.Equal(t, pgmsg.ClaimMaxRecordsDefault, pgmsg.ClaimCap(cn))

	next := int64(0)
	poll := func() int {
		t.Helper()
		cl, err := cn.Poll(tb.ctx)
		require.NoError(t, err)
		for _, r := range cl.Records {
			require.Equal(t, next, r.Offset)
			next++
		}
		require.NoError(t, tb.client.Commit(tb.ctx, cl))
		return len(cl.Records)
	}
	// A backlog of 100+200+400+800+1000+1000+7 records.
	publishSeq(t, tb, "capgrow", "a", 3507)
	var sizes, caps []int
	for range 7 {
		sizes = append(sizes, poll())
		caps = append(caps, pgmsg.ClaimCap(cn))
	}
	require.Equal(t, []int{100, 200, 400, 800, 1000, 1000, 7}, sizes)
	require.Equal(t, []int{200, 400, 800, 1000, 1000, 1000, 1000}, caps, "the 7 after a full claim: kept")
	for _, want := range []int{500, 250, 125, 100, 100} {
		publishSeq(t, tb, "capgrow", "b", 10)
		require.Equal(t, 10, poll())
		require.Equal(t, want, pgmsg.ClaimCap(cn))
	}
}

// A consumer given ClaimOpts.MaxRecords keeps exactly that cap, the
// default's included.
func TestConsumerExplicitMaxRecordsKept(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "capfixed", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	publishSeq(t, tb, "capfixed", "a", 450)
	for _, limit := range []int{pgmsg.ClaimMaxRecordsDefault, 150} {
		cn, err := tb.client.NewConsumer("capfixed", fmt.Sprintf("g%d", limit), &pgmsg.ConsumerOpts{Claim: pgmsg.ClaimOpts{MaxRecords: limit}})
		require.NoError(t, err)
		total := 0
		for total < 450 {
			cl, err := cn.Poll(tb.ctx)
			require.NoError(t, err)
			require.Equal(t, min(limit, 450-total), len(cl.Records))
			require.Equal(t, limit, pgmsg.ClaimCap(cn))
			total += len(cl.Records)
			require.NoError(t, tb.client.Commit(tb.ctx, cl))
		}
		cn.Close()
	}
}

// Config.ConsumerClaimRate above ConsumerClaimRateMax is refused with
// ErrInvalidArgument; negative (no budget) and the largest are accepted.
func TestConsumerClaimRateConfig(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connected
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pgmsg.NewClient(pool, &pgmsg.Config{ConsumerClaimRate: pgmsg.ConsumerClaimRateMax + 1})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	require.Equal(t, "PM004", pgmsg.ErrorCode(err))
	require.ErrorContains(t, err, "Config.ConsumerClaimRate must be at most 1000000")
	for _, rate := range []int{-1, pgmsg.ConsumerClaimRateMax} {
		c, err := pgmsg.NewClient(pool, &pgmsg.Config{ConsumerClaimRate: rate})
		require.NoError(t, err, "ConsumerClaimRate %d", rate)
		busy, engaged, d := pgmsg.ClaimPacerState(c)
		require.Zero(t, busy)
		require.False(t, engaged)
		require.Zero(t, d)
		c.Close()
	}
}

// The claim budget holds only once more than 20 of a client's consumers
// are busy: 20 groups reading a topic at more claims a second than the
// budget are counted but not paced; a 21st paces them all (busy/rate).
// Paced, every group reads every record once and in order, and a group
// whose partitions are split between two members by a rebalance while
// paced reads them all too.
func TestConsumerClaimBudget(t *testing.T) {
	t.Parallel()
	const rate = 10
	tb := setup(t, &pgmsg.Config{ConsumerClaimRate: rate})
	tb.topic(t, "paced", 2)

	type seen struct {
		mu     sync.Mutex
		next   map[int32]int64 // single-member groups: the next offset
		values map[string]int
	}
	ctx, cancel := context.WithCancel(tb.ctx)
	defer cancel()
	var wg sync.WaitGroup
	groups := []*seen{}
	start := func(g int) {
		s := &seen{next: map[int32]int64{}, values: map[string]int{}}
		groups = append(groups, s)
		run := func() {
			defer wg.Done()
			cn, err := tb.client.NewConsumer("paced", fmt.Sprintf("g%d", g), nil)
			if !assertNoError(t, err) {
				return
			}
			defer cn.Close()
			err = cn.Run(ctx, func(_ context.Context, cl *pgmsg.Claim) error {
				s.mu.Lock()
				defer s.mu.Unlock()
				for _, r := range cl.Records {
					if g != 0 && r.Offset != s.next[r.Partition] {
						return fmt.Errorf("group %d partition %d: got offset %d, want %d", g, r.Partition, r.Offset, s.next[r.Partition])
					}
					s.next[r.Partition] = r.Offset + 1
					s.values[string(r.Value)]++
				}
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("consumer of group %d stopped: %v", g, err)
			}
		}
		wg.Add(1)
		go run()
	}
	for g := range 20 {
		start(g)
	}
	pubCtx, stopPub := context.WithCancel(ctx)
	published := 0
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for pubCtx.Err() == nil {
			// Not on pubCtx: a publish cut short might be stored anyway.
			if err := tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "paced", Value: []byte(fmt.Sprint(published))}}, nil); err != nil {
				t.Errorf("publish: %v", err)
				return
			}
			published++
			time.Sleep(10 * time.Millisecond)
		}
	}()
	// waitState waits (a liveness bound, not a timing) until the budget
	// counts busy consumers and is engaged, and returns its interval.
	waitState := func(busy int) time.Duration {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			b, engaged, d := pgmsg.ClaimPacerState(tb.client)
			if b == busy && engaged {
				return d
			}
			require.True(t, time.Now().Before(deadline), "budget not engaged with %d busy: %d busy, engaged %v", busy, b, engaged)
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.Zero(t, waitState(20), "20 busy consumers are not paced")
	start(20)
	require.Equal(t, 2100*time.Millisecond, waitState(21), "21 busy consumers at 10 claims a second")

	// A second member of group 0, while paced: its partitions are split.
	wg.Add(1)
	go func() {
		defer wg.Done()
		cn, err := tb.client.NewConsumer("paced", "g0", nil)
		if !assertNoError(t, err) {
			return
		}
		defer cn.Close()
		err = cn.Run(ctx, func(_ context.Context, cl *pgmsg.Claim) error {
			s := groups[0]
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, r := range cl.Records {
				s.values[string(r.Value)]++
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("second consumer of group 0 stopped: %v", err)
		}
	}()
	waitBalanced(t, tb, "paced", "g0", 2)

	stopPub()
	<-pubDone
	deadline := time.Now().Add(time.Minute)
	for {
		done := true
		for _, s := range groups {
			s.mu.Lock()
			done = done && len(s.values) == published
			s.mu.Unlock()
		}
		if done {
			break
		}
		require.True(t, time.Now().Before(deadline), "groups did not read all %d records", published)
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for g, s := range groups {
		require.Len(t, s.values, published, "group %d", g)
		if g == 0 {
			continue // at least once across the rebalance
		}
		for v, n := range s.values {
			require.Equal(t, 1, n, "group %d: record %s handled %d times", g, v, n)
		}
	}
}

// assertNoError reports err to t (from any goroutine) and whether it was
// nil.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
