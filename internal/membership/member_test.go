package membership

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/notifier"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func set(ps ...int32) map[int32]bool {
	out := map[int32]bool{}
	for _, p := range ps {
		out[p] = true
	}
	return out
}

// The assignment diff: revoking partitions are not claimable; a rejoin
// loses what the member had (not revokes it) and assigns what it has now.
func TestDiff(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                    string
		prev                    map[int32]bool
		hb                      store.Heartbeat
		owned                   map[int32]bool
		assigned, revoked, lost []int32
	}{
		{name: "first join",
			hb:    store.Heartbeat{Joined: true, Partitions: []int32{3, 0, 1}, Revoking: []bool{false, false, false}},
			owned: set(0, 1, 3), assigned: []int32{0, 1, 3}},
		{name: "steady",
			prev:  set(0, 1),
			hb:    store.Heartbeat{Partitions: []int32{0, 1}, Revoking: []bool{false, false}},
			owned: set(0, 1)},
		{name: "one being handed over",
			prev:  set(0, 1, 2),
			hb:    store.Heartbeat{Partitions: []int32{0, 1, 2}, Revoking: []bool{false, true, false}},
			owned: set(0, 2), revoked: []int32{1}},
		{name: "hand-over completed and another assigned",
			prev:  set(0, 2),
			hb:    store.Heartbeat{Partitions: []int32{0, 4}, Revoking: []bool{false, false}},
			owned: set(0, 4), assigned: []int32{4}, revoked: []int32{2}},
		{name: "rejoin after the session expired",
			prev:  set(2, 0, 1),
			hb:    store.Heartbeat{Joined: true, Partitions: []int32{1, 5}, Revoking: []bool{false, false}},
			owned: set(1, 5), assigned: []int32{1, 5}, lost: []int32{0, 1, 2}},
		{name: "rejoin with nothing owned before",
			prev:  set(),
			hb:    store.Heartbeat{Joined: true},
			owned: set()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := diff(tc.prev, &tc.hb)
			require.Equal(t, tc.owned, c.owned)
			require.Equal(t, tc.assigned, c.assigned, "assigned")
			require.Equal(t, tc.revoked, c.revoked, "revoked")
			require.Equal(t, tc.lost, c.lost, "lost")
			require.Equal(t, len(tc.assigned)+len(tc.revoked)+len(tc.lost) > 0, c.changed())
		})
	}
}

// The loss rule: failed heartbeats lose every partition only once none
// succeeded for longer than the session.
func TestLostAfterFailure(t *testing.T) {
	t.Parallel()
	now := time.Now()
	session := 10 * time.Second
	require.Nil(t, lostAfterFailure(set(0, 1), now.Add(-session), now, session), "exactly one session")
	require.Nil(t, lostAfterFailure(set(0, 1), now.Add(-time.Second), now, session))
	require.Nil(t, lostAfterFailure(set(), now.Add(-time.Hour), now, session), "nothing to lose")
	require.Nil(t, lostAfterFailure(nil, time.Time{}, now, session), "never joined")
	require.Equal(t, []int32{0, 3, 7}, lostAfterFailure(set(7, 0, 3), now.Add(-session-time.Millisecond), now, session))
}

// Heartbeats are fast while the group rebalances (or after a first
// failure) and double back up to the interval after.
func TestNextDelay(t *testing.T) {
	t.Parallel()
	fast, interval := 50*time.Millisecond, time.Second
	d := fast
	var seen []time.Duration
	for range 6 {
		d = nextDelay(d, fast, interval, false)
		seen = append(seen, d)
	}
	require.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, time.Second, time.Second}, seen)
	require.Equal(t, fast, nextDelay(time.Second, fast, interval, true))
}

// ClaimEnded asks for a heartbeat only for a partition the member may no
// longer claim; asks before the loop takes one make one heartbeat.
func TestClaimEndedAsksForHeartbeat(t *testing.T) {
	t.Parallel()
	m := New(&Config{Topics: []string{"t"}, Group: "g", MemberID: "m"})
	m.owned["t"] = set(0, 1)
	m.ClaimEnded("t", 1)
	require.Empty(t, m.now, "a claim of an owned partition ended")
	m.ClaimEnded("t", 2)
	require.Len(t, m.now, 1, "a claim of a partition being handed over ended")
	m.ClaimEnded("u", 0)
	m.HeartbeatNow()
	require.Len(t, m.now, 1)
	n, one := m.Count("t")
	require.Equal(t, 2, n)
	require.Contains(t, []int32{0, 1}, one)
	require.Equal(t, map[string][]int32{"t": {0, 1}}, m.Assignment())
}

// A member that never joined leaves nothing (it touches no database: its
// Store is nil) and cannot join after Close.
func TestCloseWithoutJoin(t *testing.T) {
	t.Parallel()
	m := New(&Config{Topics: []string{"t"}, Group: "g", MemberID: "m"})
	m.Close()
	m.Close()
	require.ErrorIs(t, m.Join(context.Background()), errs.Closed)
}

// events records the callbacks of members, in order.
type events struct {
	mu  sync.Mutex
	all []string
	ch  chan string
}

func newEvents() *events { return &events{ch: make(chan string, 100)} }

func (e *events) add(s string) {
	e.mu.Lock()
	e.all = append(e.all, s)
	e.mu.Unlock()
	e.ch <- s
}

// callbacks sets cfg's callbacks to record "<member> <kind> <partitions>".
func (e *events) callbacks(cfg *Config) {
	id := cfg.MemberID
	cfg.OnAssigned = func(_ string, ps []int32) { e.add(fmt.Sprintf("%s assigned %v", id, ps)) }
	cfg.OnRevoked = func(_ string, ps []int32) { e.add(fmt.Sprintf("%s revoked %v", id, ps)) }
	cfg.OnLost = func(_ string, ps []int32) { e.add(fmt.Sprintf("%s lost %v", id, ps)) }
}

// next waits for the next event.
func (e *events) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-e.ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no callback within 10s")
		return ""
	}
}

type bundle struct {
	ctx    context.Context
	schema string
	exec   store.DBTX
	store  *store.Store
	topic  string
}

// setup makes a topic of partitions partitions in a schema of the test's
// own.
func setup(t *testing.T, partitions int32) *bundle {
	t.Helper()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	s := store.New(b.Schema)
	ctx := context.Background()
	_, err := s.TopicCreate(ctx, b.Pool, "t", partitions, []byte("{}"))
	require.NoError(t, err)
	return &bundle{ctx: ctx, schema: b.Schema, exec: b.Pool, store: s, topic: "t"}
}

// member returns a member of group "g" on the bundle's topic, closed at
// the end of the test; edit adjusts its config.
func (b *bundle) member(t *testing.T, id string, ev *events, edit func(*Config)) *Member {
	cfg := &Config{Store: b.store, Exec: b.exec, Logger: slog.Default(), Topics: []string{b.topic}, Group: "g",
		MemberID: id, Start: "earliest", HeartbeatInterval: 50 * time.Millisecond, SessionTimeout: 10 * time.Second}
	if ev != nil {
		ev.callbacks(cfg)
	}
	if edit != nil {
		edit(cfg)
	}
	m := New(cfg)
	t.Cleanup(m.Close)
	return m
}

// members returns the group's live members and the partitions they own.
func (b *bundle) members(t *testing.T) map[string][]int32 {
	t.Helper()
	ms, err := b.store.GroupMembers(b.ctx, b.exec, b.topic, "g")
	require.NoError(t, err)
	out := map[string][]int32{}
	for _, m := range ms {
		if m.Alive {
			out[m.MemberID] = append([]int32{}, m.Partitions...)
		}
	}
	return out
}

// Join reports the first assignment before it returns; a second member
// takes half by a hand-over that the loops complete; Close leaves at once
// and the other member gets everything back; Close is idempotent and a
// closed member cannot join again.
func TestJoinRebalanceLeave(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	ev := newEvents()
	var changes sync.Map // member -> last OnChange
	onChange := func(cfg *Config) {
		id := cfg.MemberID
		cfg.OnChange = func(owned iter.Seq2[string, int32]) {
			var ps []int32
			for topic, p := range owned {
				if topic != b.topic {
					t.Errorf("OnChange of %s: topic %q", id, topic)
				}
				ps = append(ps, p)
			}
			changes.Store(id, len(ps))
		}
	}
	m1 := b.member(t, "m1", ev, onChange)
	m2 := b.member(t, "m2", ev, onChange)

	require.NoError(t, m1.Join(b.ctx))
	require.Equal(t, "m1 assigned [0 1 2 3]", ev.next(t))
	require.Equal(t, map[string][]int32{b.topic: {0, 1, 2, 3}}, m1.Assignment())
	require.True(t, m1.Owns(b.topic, 3))
	n, _ := changes.Load("m1")
	require.Equal(t, 4, n)
	require.NoError(t, m1.Join(b.ctx), "joined already")

	require.NoError(t, m2.Join(b.ctx))
	// m1 keeps its lowest partitions; 2 and 3 move to m2, at once as m1
	// holds no claim on them: m2 learns it as it joins, m1 at the next
	// heartbeat of its loop.
	got := map[string]bool{}
	for len(got) < 2 {
		got[ev.next(t)] = true
	}
	require.Equal(t, map[string]bool{"m1 revoked [2 3]": true, "m2 assigned [2 3]": true}, got)
	require.Equal(t, map[string][]int32{b.topic: {0, 1}}, m1.Assignment())
	require.Equal(t, map[string][]int32{b.topic: {2, 3}}, m2.Assignment())
	n, _ = changes.Load("m1")
	require.Equal(t, 2, n)
	require.Equal(t, map[string][]int32{"m1": {0, 1}, "m2": {2, 3}}, b.members(t))

	m2.Close()
	require.Equal(t, map[string][]int32{"m1": {0, 1, 2, 3}}, b.members(t), "m2 left at once")
	require.Equal(t, "m1 assigned [2 3]", ev.next(t))
	require.Equal(t, map[string][]int32{b.topic: {0, 1, 2, 3}}, m1.Assignment())
	m2.Close()
	require.ErrorIs(t, m2.Join(b.ctx), errs.Closed)

	m1.Close()
	require.Empty(t, b.members(t))
	select {
	case s := <-ev.ch:
		t.Fatalf("callback after Close: %s", s)
	default:
	}
}

// A member whose session expired on the server rejoins with its next
// heartbeat: it reports what it had as lost, before what it is assigned
// now.
func TestRejoinReportsLost(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	ev := newEvents()
	m := b.member(t, "m1", ev, nil)
	moving, err := m.heartbeat(b.ctx, b.topic, 0)
	require.NoError(t, err)
	require.True(t, moving)
	require.Equal(t, "m1 assigned [0 1 2]", ev.next(t))
	moving, err = m.heartbeat(b.ctx, b.topic, 0)
	require.NoError(t, err)
	require.False(t, moving, "a steady group")

	// The session ran out (database clock).
	_, err = b.exec.Exec(b.ctx, "UPDATE "+pgx.Identifier{b.schema, "group_member"}.Sanitize()+
		" SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE member_id = 'm1'")
	require.NoError(t, err)
	moving, err = m.heartbeat(b.ctx, b.topic, 0)
	require.NoError(t, err)
	require.True(t, moving)
	require.Equal(t, "m1 lost [0 1 2]", ev.next(t))
	require.Equal(t, "m1 assigned [0 1 2]", ev.next(t))
	require.Equal(t, map[string][]int32{b.topic: {0, 1, 2}}, m.Assignment())
}

// Failed heartbeats keep the partitions until none succeeded for a whole
// session; then they are lost and no longer claimable.
func TestFailedHeartbeatsLoseAfterSession(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ev := newEvents()
	m := b.member(t, "m1", ev, nil)
	_, err := m.heartbeat(b.ctx, b.topic, 0)
	require.NoError(t, err)
	require.Equal(t, "m1 assigned [0 1]", ev.next(t))

	// Every heartbeat fails from now on.
	require.NoError(t, b.store.TopicDelete(b.ctx, b.exec, b.topic, true))
	_, err = m.heartbeat(b.ctx, b.topic, 0)
	require.ErrorIs(t, err, errs.UnknownTopic)
	require.True(t, m.Owns(b.topic, 1), "within the session")

	m.mu.Lock()
	m.lastOK[b.topic] = time.Now().Add(-m.cfg.SessionTimeout - time.Millisecond)
	m.mu.Unlock()
	_, err = m.heartbeat(b.ctx, b.topic, 0)
	require.ErrorIs(t, err, errs.UnknownTopic)
	require.Equal(t, "m1 lost [0 1]", ev.next(t))
	require.False(t, m.Owns(b.topic, 0))
	require.Empty(t, m.Assignment())

	_, err = m.heartbeat(b.ctx, b.topic, 0)
	require.Error(t, err)
	select {
	case s := <-ev.ch:
		t.Fatalf("lost twice: %s", s)
	default:
	}
}

// With a long interval the loop heartbeats only when asked: HeartbeatNow
// makes it learn of a move, and the end of a claim on a partition it no
// longer owns makes it heartbeat at once (to complete a hand-over).
func TestClaimEndedHeartbeatsNow(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ev := newEvents()
	slow := func(cfg *Config) { cfg.HeartbeatInterval = time.Hour }
	m1 := b.member(t, "m1", ev, slow)
	m2 := b.member(t, "m2", ev, slow)
	require.NoError(t, m1.Join(b.ctx))
	require.Equal(t, "m1 assigned [0 1]", ev.next(t))
	// m1 holds no claim on 1: it moves to m2 at once.
	require.NoError(t, m2.Join(b.ctx))
	require.Equal(t, "m2 assigned [1]", ev.next(t))
	require.Equal(t, map[string][]int32{"m1": {0}, "m2": {1}}, b.members(t))

	// m1 has not heartbeated since: it still takes 1 for its own, and the
	// end of a claim on it asks for nothing.
	require.True(t, m1.Owns(b.topic, 1))
	m1.ClaimEnded(b.topic, 1)
	require.Empty(t, m1.now)
	m1.HeartbeatNow()
	require.Equal(t, "m1 revoked [1]", ev.next(t))
	require.False(t, m1.Owns(b.topic, 1))

	// Now it does: m1 heartbeats at once.
	before := heartbeatAt(t, b, "m1")
	m1.ClaimEnded(b.topic, 1)
	require.Eventually(t, func() bool { return heartbeatAt(t, b, "m1").After(before) }, 10*time.Second, 5*time.Millisecond)
}

func heartbeatAt(t *testing.T, b *bundle, member string) time.Time {
	t.Helper()
	ms, err := b.store.GroupMembers(b.ctx, b.exec, b.topic, "g")
	require.NoError(t, err)
	for _, m := range ms {
		if m.MemberID == member {
			return m.HeartbeatAt
		}
	}
	t.Fatalf("member %s not in the group", member)
	return time.Time{}
}

// With the group's wake-ups a member learns of a change at once, not at
// its next interval (an hour here: the loop's first tick, a twentieth of
// it, is minutes away): m2's join hands m1's partition 1 over (m1 holds no
// claim on it) and notifies, so m1 heartbeats and reports it revoked; m2's
// leave gives it back, and m1 reports it assigned. Without the
// notification m1 would learn neither within the test.
func TestGroupChangeWakesMembers(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	n := notifier.New(b.exec.(*pgxpool.Pool).Config().ConnConfig, b.schema+"_log", slog.Default())
	t.Cleanup(n.Close)
	// The listener wakes every subscriber once it listens: past that, a
	// wake-up is a notification's.
	listening, stop := n.Subscribe("listening")
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not listen within 10s")
	}
	stop()
	ev := newEvents()
	slow := func(cfg *Config) {
		cfg.HeartbeatInterval = time.Hour
		cfg.Wake = n.NewSubscription()
	}
	m1 := b.member(t, "m1", ev, slow)
	m2 := b.member(t, "m2", nil, slow)
	require.NoError(t, m1.Join(b.ctx))
	require.Equal(t, "m1 assigned [0 1]", ev.next(t))

	require.NoError(t, m2.Join(b.ctx))
	require.Equal(t, map[string][]int32{"m1": {0}, "m2": {1}}, b.members(t))
	require.Equal(t, "m1 revoked [1]", ev.next(t))
	require.Equal(t, map[string][]int32{b.topic: {0}}, m1.Assignment())

	m2.Close()
	require.Equal(t, "m1 assigned [1]", ev.next(t))
	require.Equal(t, map[string][]int32{b.topic: {0, 1}}, m1.Assignment())
}
