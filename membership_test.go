package pgmsg_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

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

// A member paused past its session timeout is fenced: the group moves its
// partition, the new owner claims it, and the paused member's late commit
// is rejected, writing nothing.
func TestMembershipPausedMemberFenced(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "pause", 1)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "pause", Value: []byte("a")}, {Topic: "pause", Value: []byte("b")}}, nil))

	var lost atomic.Int32
	// "Paused": after joining it never heartbeats again (interval of an hour).
	paused, err := tb.client.NewConsumer("pause", "g", &pgmsg.ConsumerOpts{MemberID: "paused",
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
