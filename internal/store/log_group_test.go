package store

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// The heartbeat statement commits asynchronously only when the group
// existed before it: a heartbeat that creates the group (at its start
// position) commits synchronously, as a claim that creates one does.
func TestHeartbeatAsyncUnlessCreating(t *testing.T) {
	t.Parallel()
	b, st, ctx := groupTestTopic(t, 2)
	hb := func(member string) *Heartbeat {
		t.Helper()
		row, err := st.GroupHeartbeat(ctx, b.Pool, "t", "g", member, 10*time.Second, "latest")
		require.NoError(t, err)
		return row
	}
	first := hb("m1")
	require.True(t, first.Joined)
	require.Empty(t, first.Async, "the heartbeat that created the group commits synchronously")
	second := hb("m2")
	require.True(t, second.Joined)
	require.Equal(t, "off", second.Async)
	require.Equal(t, "off", hb("m1").Async)
}

// A heartbeat of a steady group whose member knows the group's generation
// only updates the member's row; anything that can change an assignment
// (a join, an expired session, a changed session timeout, new partitions)
// makes the next heartbeat check the group again and rebalance, as every
// heartbeat did. The clock is not waited for: a member's session ending is
// the member's heartbeat and the group's steady_until moved back together,
// as the passing of time moves them relative to now.
func TestHeartbeatSteadyGroupKeepsSemantics(t *testing.T) {
	t.Parallel()
	b, st, ctx := groupTestTopic(t, 4)
	s := pgx.Identifier{b.Schema}.Sanitize()
	var err error
	const session = 10 * time.Second
	hb := func(member string, session time.Duration) *Heartbeat {
		t.Helper()
		row, err := st.GroupHeartbeat(ctx, b.Pool, "t", "g", member, session, "earliest")
		require.NoError(t, err)
		return row
	}
	type groupRow struct {
		gen    int64
		steady bool
		xmin   string
	}
	group := func() groupRow {
		t.Helper()
		var g groupRow
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT generation, steady_until IS NOT NULL, xmin::text FROM `+s+
			`.consumer_group WHERE group_name = 'g'`).Scan(&g.gen, &g.steady, &g.xmin))
		return g
	}
	// settle heartbeats every member until a round changes nothing (a
	// heartbeat of a group without claims completes its hand-overs at
	// once), and returns each member's partitions.
	settle := func(members ...string) map[string][]int32 {
		t.Helper()
		for range 10 {
			out := map[string][]int32{}
			var moved bool
			for _, m := range members {
				a := hb(m, session)
				moved = moved || a.Joined || slices.Contains(a.Revoking, true)
				out[m] = a.Partitions
			}
			if g := group(); !moved && g.steady {
				return out
			}
		}
		t.Fatal("the group never settled")
		return nil
	}
	owned := func(a map[string][]int32) []int32 {
		var all []int32
		for _, ps := range a {
			all = append(all, ps...)
		}
		slices.Sort(all)
		return all
	}

	a := settle("m1", "m2")
	require.Equal(t, []int32{0, 1, 2, 3}, owned(a))
	require.Len(t, a["m1"], 2)

	// Steady: the group row is not written, the answer is the same.
	before := group()
	again := hb("m1", session)
	require.False(t, again.Joined)
	require.Equal(t, a["m1"], again.Partitions)
	require.Equal(t, before, group(), "a steady heartbeat wrote the group row")
	// So does the SQL API's group_heartbeat().
	var joined bool
	var parts []int32
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT joined, partitions FROM `+s+`.group_heartbeat('t', 'g', 'm1')`).Scan(&joined, &parts))
	require.False(t, joined)
	require.Equal(t, a["m1"], parts)
	require.Equal(t, before, group(), "a steady group_heartbeat() wrote the group row")

	// A join moves the generation on; the others learn their share.
	a = settle("m1", "m2", "m3")
	require.Greater(t, group().gen, before.gen)
	require.Equal(t, []int32{0, 1, 2, 3}, owned(a))
	for _, m := range []string{"m1", "m2", "m3"} {
		require.NotEmpty(t, a[m], m)
	}

	// m3's session ends while the group is steady: the next heartbeat of
	// m1 removes it and its partitions move to the live members.
	gen := group().gen
	_, err = b.Pool.Exec(ctx, `UPDATE `+s+`.group_member SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE member_id = 'm3'`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(ctx, `UPDATE `+s+`.consumer_group SET steady_until = steady_until - interval '1 hour'`)
	require.NoError(t, err)
	hb("m1", session)
	require.Greater(t, group().gen, gen, "the expired member was not removed")
	var members []string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT array_agg(member_id ORDER BY member_id) FROM `+s+
		`.group_members('t', 'g')`).Scan(&members))
	require.Equal(t, []string{"m1", "m2"}, members)
	a = settle("m1", "m2")
	require.Equal(t, []int32{0, 1, 2, 3}, owned(a))
	require.Len(t, a["m1"], 2)
	// m3 comes back: it rejoins (its partitions were lost), as before.
	require.True(t, hb("m3", session).Joined)
	a = settle("m1", "m2", "m3")
	require.Equal(t, []int32{0, 1, 2, 3}, owned(a))

	// A shorter session timeout checks the group: the group is steady no
	// longer than that member's session.
	hb("m2", time.Second)
	var ok bool
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT g.steady_until <= m.heartbeat_at + m.session_timeout FROM `+s+
		`.consumer_group g JOIN `+s+`.group_member m USING (topic_id, group_name) WHERE m.member_id = 'm2'`).Scan(&ok))
	require.True(t, ok)
	hb("m2", session)

	// New partitions end the steadiness: the next heartbeats hand them out.
	_, err = b.Pool.Exec(ctx, `SELECT `+s+`.topic_add_partitions('t', 6)`)
	require.NoError(t, err)
	require.False(t, group().steady)
	a = settle("m1", "m2", "m3")
	require.Equal(t, []int32{0, 1, 2, 3, 4, 5}, owned(a))
	for _, m := range []string{"m1", "m2", "m3"} {
		require.Len(t, a[m], 2, m)
	}
}

// Steady heartbeats of many members go as one statement: it answers the
// members of steady groups (their kept assignments, no group row written)
// and leaves the others (a member that joins, a changed session timeout,
// a member twice) to group_heartbeat(), which Heartbeats then runs for
// each of them.
func TestHeartbeatsTogether(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 8})
	st := New(b.Schema)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := pgx.Identifier{b.Schema}.Sanitize()
	_, err := st.TopicCreate(ctx, b.Pool, "t", 4, []byte("{}"))
	require.NoError(t, err)
	const session = 10 * time.Second
	groups := []string{"g0", "g1", "g2"}
	members := []string{"m0", "m1"}
	want := map[string][]int32{}
	for range 10 { // until every answer is the steady one twice in a row
		settled := true
		for _, g := range groups {
			for _, m := range members {
				hb, err := st.GroupHeartbeat(ctx, b.Pool, "t", g, m, session, "earliest")
				require.NoError(t, err)
				k := g + "/" + m
				if hb.Joined || slices.Contains(hb.Revoking, true) || !slices.Equal(want[k], hb.Partitions) {
					settled = false
				}
				want[k] = hb.Partitions
			}
		}
		if settled {
			break
		}
	}
	xmins := func() string {
		var x string
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT string_agg(xmin::text, ',' ORDER BY group_name) FROM `+s+`.consumer_group`).Scan(&x))
		return x
	}
	before := xmins()

	var calls []SteadyHeartbeat
	for _, g := range groups {
		for _, m := range members {
			calls = append(calls, SteadyHeartbeat{Topic: "t", Group: g, Member: m, SessionTimeout: session})
		}
	}
	calls = append(calls,
		SteadyHeartbeat{Topic: "t", Group: "g0", Member: "new", SessionTimeout: session},
		SteadyHeartbeat{Topic: "t", Group: "g1", Member: "m0", SessionTimeout: time.Second},
		SteadyHeartbeat{Topic: "t", Group: "g2", Member: "m0", SessionTimeout: session},
		SteadyHeartbeat{Topic: "nope", Group: "g0", Member: "m0", SessionTimeout: session})
	hbs, err := st.steadyHeartbeats(ctx, b.Pool, calls)
	require.NoError(t, err)
	require.Len(t, hbs, len(calls))
	for i, c := range calls[:len(groups)*len(members)] {
		require.NotNil(t, hbs[i], c)
		require.Equal(t, want[c.Group+"/"+c.Member], hbs[i].Partitions, c)
		require.Equal(t, "off", hbs[i].Async)
	}
	for i := len(groups) * len(members); i < len(calls); i++ {
		require.Nil(t, hbs[i], calls[i]) // m0 of g2 was already answered above
	}
	require.Equal(t, before, xmins(), "steady heartbeats wrote a group row")

	// Through Heartbeats, all at once: the steady ones are answered as
	// above, the joining one joins.
	h := NewHeartbeats(st, b.Pool, HeartbeatLinger)
	var wg sync.WaitGroup
	got := make([]*Heartbeat, len(calls))
	failed := make([]error, len(calls))
	for i, c := range calls[:len(groups)*len(members)+1] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], failed[i] = h.Heartbeat(ctx, c.Topic, c.Group, c.Member, c.SessionTimeout, "earliest")
		}()
	}
	wg.Wait()
	for i, c := range calls[:len(groups)*len(members)] {
		require.NoError(t, failed[i])
		require.Equal(t, want[c.Group+"/"+c.Member], got[i].Partitions, c)
		require.False(t, got[i].Joined)
	}
	j := len(groups) * len(members)
	require.NoError(t, failed[j])
	require.True(t, got[j].Joined, "the new member joins through group_heartbeat()")
	// A bad name is group_heartbeat()'s PM003, as alone.
	_, err = h.Heartbeat(ctx, "t", "bad!", "m0", session, "earliest")
	require.Equal(t, "PM003", errs.Code(err))
}

// The steady heartbeats' statement keeps a group steady: when the
// group's steady_until is near (within a third of the member's session
// timeout) it moves it on to the earliest end of its members' sessions,
// so that the group's heartbeats never need group_heartbeat() while they
// keep coming; it does not when a member's session has ended, nor when
// another transaction holds the group row (without waiting for it), nor
// when it is not near.
func TestSteadyHeartbeatsKeepGroupSteady(t *testing.T) {
	t.Parallel()
	b, st, ctx := groupTestTopic(t, 4)
	s := pgx.Identifier{b.Schema}.Sanitize()
	var err error
	const session = 30 * time.Second
	for range 10 {
		for _, m := range []string{"m0", "m1", "m2"} {
			_, err := st.GroupHeartbeat(ctx, b.Pool, "t", "g", m, session, "earliest")
			require.NoError(t, err)
		}
	}
	type state struct {
		until, minEnd time.Time
		xmin          string
	}
	read := func() state {
		t.Helper()
		var x state
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT g.steady_until, (SELECT min(m.heartbeat_at + m.session_timeout) FROM `+s+
			`.group_member m WHERE m.topic_id = g.topic_id AND m.group_name = g.group_name), g.xmin::text FROM `+s+
			`.consumer_group g WHERE g.group_name = 'g'`).Scan(&x.until, &x.minEnd, &x.xmin))
		return x
	}
	steady := func(members ...string) {
		t.Helper()
		var calls []SteadyHeartbeat
		for _, m := range members {
			calls = append(calls, SteadyHeartbeat{Topic: "t", Group: "g", Member: m, SessionTimeout: session})
		}
		hbs, err := st.steadyHeartbeats(ctx, b.Pool, calls)
		require.NoError(t, err)
		for i, hb := range hbs {
			require.NotNil(t, hb, "%s was not answered as steady", members[i])
		}
	}
	setUntil := func(sql string) {
		t.Helper()
		_, err := b.Pool.Exec(ctx, `UPDATE `+s+`.consumer_group SET steady_until = `+sql+` WHERE group_name = 'g'`)
		require.NoError(t, err)
	}

	// Not near: nothing written.
	before := read()
	require.True(t, before.until.After(time.Now().Add(session/2)), "settled: %v", before.until)
	steady("m0")
	require.Equal(t, before.xmin, read().xmin, "a heartbeat far from steady_until wrote the group row")

	// Near: moved on to the earliest session end, the one just refreshed
	// counted as refreshed.
	setUntil(`clock_timestamp() + interval '2 seconds'`)
	steady("m1", "m2")
	after := read()
	require.NotEqual(t, before.xmin, after.xmin)
	require.True(t, after.until.Equal(after.minEnd), "steady_until %v, earliest end %v", after.until, after.minEnd)
	require.True(t, after.until.After(time.Now().Add(session/2)))

	// The members' own heartbeats count as refreshed: a group of one
	// stays steady on its member's heartbeats alone. Its session ends in
	// 5 s and so does steady_until; the heartbeat moves both on by 25 s.
	// Through the SQL API's group_heartbeat() too.
	for _, api := range []bool{false, true} {
		for range 5 {
			_, err := st.GroupHeartbeat(ctx, b.Pool, "t", "solo", "s0", session, "earliest")
			require.NoError(t, err)
		}
		_, err = b.Pool.Exec(ctx, `UPDATE `+s+`.group_member SET heartbeat_at = clock_timestamp() - interval '25 seconds' WHERE group_name = 'solo'`)
		require.NoError(t, err)
		_, err = b.Pool.Exec(ctx, `UPDATE `+s+`.consumer_group g SET steady_until = m.heartbeat_at + m.session_timeout FROM `+s+
			`.group_member m WHERE m.topic_id = g.topic_id AND m.group_name = g.group_name AND g.group_name = 'solo'`)
		require.NoError(t, err)
		var old time.Time
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT steady_until FROM `+s+`.consumer_group WHERE group_name = 'solo'`).Scan(&old))
		if api {
			var joined bool
			require.NoError(t, b.Pool.QueryRow(ctx, `SELECT joined FROM `+s+`.group_heartbeat('t', 'solo', 's0', '30 seconds')`).Scan(&joined))
			require.False(t, joined)
		} else {
			hbs, err := st.steadyHeartbeats(ctx, b.Pool, []SteadyHeartbeat{{Topic: "t", Group: "solo", Member: "s0", SessionTimeout: session}})
			require.NoError(t, err)
			require.NotNil(t, hbs[0])
		}
		var moved time.Time
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT steady_until FROM `+s+`.consumer_group WHERE group_name = 'solo'`).Scan(&moved))
		require.Greater(t, moved.Sub(old), 20*time.Second, "api %v", api)
	}

	// Another transaction holds the group row: the heartbeat neither waits
	// nor moves steady_until.
	setUntil(`clock_timestamp() + interval '2 seconds'`)
	held := read()
	tx, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM `+s+`.consumer_group WHERE group_name = 'g' FOR UPDATE`)
	require.NoError(t, err)
	steady("m0")
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, held.until, read().until)

	// A member's session has ended (steady_until not yet past): the
	// earliest end is past, steady_until stays, and the next heartbeat
	// after it goes through group_heartbeat(), which removes the member.
	_, err = b.Pool.Exec(ctx, `UPDATE `+s+`.group_member SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE member_id = 'm2'`)
	require.NoError(t, err)
	setUntil(`clock_timestamp() + interval '2 seconds'`)
	dead := read()
	steady("m0")
	require.Equal(t, dead.until, read().until)
	setUntil(`clock_timestamp() - interval '1 second'`)
	hbs, err := st.steadyHeartbeats(ctx, b.Pool, []SteadyHeartbeat{{Topic: "t", Group: "g", Member: "m0", SessionTimeout: session}})
	require.NoError(t, err)
	require.Nil(t, hbs[0], "a group past steady_until answered as steady")
	_, err = st.GroupHeartbeat(ctx, b.Pool, "t", "g", "m0", session, "earliest")
	require.NoError(t, err)
	var members []string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT array_agg(member_id ORDER BY member_id) FROM `+s+
		`.group_members('t', 'g')`).Scan(&members))
	require.Equal(t, []string{"m0", "m1"}, members)
}

// A heartbeat that may linger long waits for the next one that may not,
// and the two go together: the later one's shorter linger sends both.
func TestHeartbeatWithinGoesWithUrgent(t *testing.T) {
	t.Parallel()
	b, st, ctx := groupTestTopic(t, 2)
	var err error
	const session = 10 * time.Second
	for _, m := range []string{"m0", "m1"} {
		_, err := st.GroupHeartbeat(ctx, b.Pool, "t", "g", m, session, "earliest")
		require.NoError(t, err)
	}
	h := NewHeartbeats(st, b.Pool, HeartbeatLinger)
	slow := make(chan error, 1)
	go func() {
		_, err := h.HeartbeatWithin(ctx, time.Hour, "t", "g", "m0", session, "earliest")
		slow <- err
	}()
	require.Eventually(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.pending) == 1
	}, 10*time.Second, time.Millisecond)
	_, err = h.Heartbeat(ctx, "t", "g", "m1", session, "earliest")
	require.NoError(t, err)
	select {
	case err := <-slow:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the lingering heartbeat did not go with the urgent one")
	}
}

// groupTestTopic is a schema of its own (4 connections) with topic "t" of
// partitions partitions, its store, and a context of a minute.
func groupTestTopic(t *testing.T, partitions int32) (*pgtest.Bundle, *Store, context.Context) {
	t.Helper()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	st := New(b.Schema)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	_, err := st.TopicCreate(ctx, b.Pool, "t", partitions, []byte("{}"))
	require.NoError(t, err)
	return b, st, ctx
}
