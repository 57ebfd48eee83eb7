package kafkagroup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

func TestMain(m *testing.M) { pgtest.Main(pgmsgtest.WithMain(m)) }

type bundle struct {
	t      testing.TB
	ctx    context.Context
	client *pgmsg.Client
	c      *Coordinator
	cfg    Config
}

// setup returns a Coordinator on a fresh schema with short timeouts
// allowed; edit may change its Config.
func setup(t testing.TB, edit func(*Config)) *bundle {
	t.Helper()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 8})
	client, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cfg := Config{Client: client, MinSessionTimeout: time.Millisecond}
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &bundle{t: t, ctx: ctx, client: client, c: c, cfg: cfg}
}

// another returns a second coordinator on the same database (another
// `pgmsg serve`).
func (b *bundle) another(edit func(*Config)) *Coordinator {
	cfg := b.cfg
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	require.NoError(b.t, err)
	b.t.Cleanup(c.Close)
	return c
}

func (b *bundle) topic(name string, partitions int) {
	_, err := b.client.CreateTopic(b.ctx, name, pgmsg.TopicConfig{Partitions: partitions})
	require.NoError(b.t, err)
}

func do[R kmsg.Response](t testing.TB, ctx context.Context, c *Coordinator, req kmsg.Request) R {
	t.Helper()
	resp, err := c.Handle(ctx, req)
	require.NoError(t, err)
	require.Equal(t, req.GetVersion(), resp.GetVersion())
	return resp.(R)
}

// subscription is "consumer" protocol metadata subscribing to topics.
func subscription(topics ...string) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Topics = topics
	return m.AppendTo(nil)
}

type joinOpts struct {
	version   int16
	member    string
	instance  *string
	session   time.Duration
	rebalance time.Duration
	protocols []string // default "range"
	metadata  []byte
	ptype     string
}

func joinReq(group string, o joinOpts) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 9
	if o.version != 0 {
		req.Version = o.version
	}
	req.Group = group
	req.MemberID = o.member
	req.InstanceID = o.instance
	req.SessionTimeoutMillis = 10000
	if o.session != 0 {
		req.SessionTimeoutMillis = int32(o.session / time.Millisecond)
	}
	req.RebalanceTimeoutMillis = 10000
	if o.rebalance != 0 {
		req.RebalanceTimeoutMillis = int32(o.rebalance / time.Millisecond)
	}
	req.ProtocolType = "consumer"
	if o.ptype != "" {
		req.ProtocolType = o.ptype
	}
	protos := o.protocols
	if protos == nil {
		protos = []string{"range"}
	}
	md := o.metadata
	if md == nil {
		md = subscription("t")
	}
	for _, p := range protos {
		jp := kmsg.NewJoinGroupRequestProtocol()
		jp.Name, jp.Metadata = p, md
		req.Protocols = append(req.Protocols, jp)
	}
	return req
}

// joinAsync sends a JoinGroup that may wait for the rest of the group.
func (b *bundle) joinAsync(c *Coordinator, group string, o joinOpts) <-chan *kmsg.JoinGroupResponse {
	ch := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		resp, err := c.Handle(b.ctx, joinReq(group, o))
		if err != nil {
			close(ch)
			return
		}
		ch <- resp.(*kmsg.JoinGroupResponse)
	}()
	return ch
}

func recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		require.True(t, ok, "request failed")
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("no response")
	}
	var zero T
	return zero
}

// newMember joins a new dynamic member (v9: MEMBER_ID_REQUIRED first)
// and returns the response of its join; it may wait for the group.
func (b *bundle) newMember(c *Coordinator, group string, o joinOpts) <-chan *kmsg.JoinGroupResponse {
	first := do[*kmsg.JoinGroupResponse](b.t, b.ctx, c, joinReq(group, o))
	require.Equal(b.t, kerr.MemberIDRequired.Code, first.ErrorCode)
	require.NotEmpty(b.t, first.MemberID)
	o.member = first.MemberID
	return b.joinAsync(c, group, o)
}

func syncReq(group, member string, gen int32, assign map[string][]byte) *kmsg.SyncGroupRequest {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 5
	req.Group, req.MemberID, req.Generation = group, member, gen
	req.ProtocolType = kmsg.StringPtr("consumer")
	for id, a := range assign {
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID, ga.MemberAssignment = id, a
		req.GroupAssignment = append(req.GroupAssignment, ga)
	}
	return req
}

func (b *bundle) syncAsync(c *Coordinator, req *kmsg.SyncGroupRequest) <-chan *kmsg.SyncGroupResponse {
	ch := make(chan *kmsg.SyncGroupResponse, 1)
	go func() {
		resp, err := c.Handle(b.ctx, req)
		if err != nil {
			close(ch)
			return
		}
		ch <- resp.(*kmsg.SyncGroupResponse)
	}()
	return ch
}

func heartbeat(t testing.TB, ctx context.Context, c *Coordinator, group, member string, gen int32) int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version = 4
	req.Group, req.MemberID, req.Generation = group, member, gen
	return do[*kmsg.HeartbeatResponse](t, ctx, c, req).ErrorCode
}

// stable brings a single member to a stable group and returns its member
// ID and generation.
func (b *bundle) stable(c *Coordinator, group string, o joinOpts) (string, int32) {
	j := recv(b.t, b.newMember(c, group, o))
	require.Zero(b.t, j.ErrorCode)
	s := do[*kmsg.SyncGroupResponse](b.t, b.ctx, c, syncReq(group, j.MemberID, j.Generation,
		map[string][]byte{j.MemberID: []byte("a-" + j.MemberID)}))
	require.Zero(b.t, s.ErrorCode)
	require.Equal(b.t, []byte("a-"+j.MemberID), s.MemberAssignment)
	return j.MemberID, j.Generation
}

func TestHandlesAndVersions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, k := range []int16{8, 9, 11, 12, 13, 14, 15, 16, 42, 47} {
		require.True(t, b.c.Handles(k), "key %d", k)
		require.GreaterOrEqual(t, b.c.MaxVersion(k), int16(0))
		req := kmsg.RequestForKey(k)
		require.LessOrEqual(t, b.c.MaxVersion(k), req.MaxVersion(), "key %d", k)
	}
	require.False(t, b.c.Handles(68), "KIP-848's ConsumerGroupHeartbeat is not served")
	require.Equal(t, int16(-1), b.c.MaxVersion(0))
	// Every version served answers, in the request's version.
	for _, k := range []int16{8, 9, 11, 12, 13, 14, 15, 16, 42, 47} {
		for v := int16(0); v <= b.c.MaxVersion(k); v++ {
			req := kmsg.RequestForKey(k)
			req.SetVersion(v)
			resp, err := b.c.Handle(b.ctx, req)
			require.NoError(t, err, "key %d v%d", k, v)
			require.Equal(t, v, resp.GetVersion())
			require.Equal(t, k, resp.Key())
			// It encodes, and decodes back, in that version.
			back := req.ResponseKind()
			back.SetVersion(v)
			require.NoError(t, back.ReadFrom(resp.AppendTo(nil)), "key %d v%d", k, v)
		}
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 10
	_, err := b.c.Handle(b.ctx, req)
	require.Error(t, err, "a version not served is the listener's to refuse")
}

// One member: MEMBER_ID_REQUIRED, the join, the leader's sync, heartbeats;
// the state is in PostgreSQL.
func TestJoinSyncHeartbeatOneMember(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id, gen := b.stable(b.c, "g1", joinOpts{})
	require.Equal(t, int32(1), gen)
	require.Zero(t, heartbeat(t, b.ctx, b.c, "g1", id, gen))
	require.Equal(t, kerr.IllegalGeneration.Code, heartbeat(t, b.ctx, b.c, "g1", id, gen+1))
	require.Equal(t, kerr.UnknownMemberID.Code, heartbeat(t, b.ctx, b.c, "g1", "nobody", gen))

	kg, members, err := b.c.store.KafkaGroupLoad(b.ctx, b.c.pool, "g1")
	require.NoError(t, err)
	require.Equal(t, "Stable", kg.State)
	require.Equal(t, int32(1), kg.Generation)
	require.Equal(t, id, kg.Leader)
	require.Equal(t, "range", kg.Protocol)
	require.Len(t, members, 1)
	require.Equal(t, []byte("a-"+id), members[0].Assignment)
	require.Equal(t, [][]byte{subscription("t")}, members[0].Metadata)

	// A join without a member ID before v4 joins at once.
	o := joinOpts{version: 3}
	j := recv(t, b.joinAsync(b.c, "g-old", o))
	require.Zero(t, j.ErrorCode)
	require.NotEmpty(t, j.MemberID)
	require.Equal(t, j.MemberID, j.LeaderID)
	require.Len(t, j.Members, 1)
}

func TestJoinRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.MinSessionTimeout = time.Second; c.MaxSessionTimeout = time.Minute })
	code := func(req *kmsg.JoinGroupRequest) int16 {
		return do[*kmsg.JoinGroupResponse](t, b.ctx, b.c, req).ErrorCode
	}
	require.Equal(t, kerr.InvalidSessionTimeout.Code, code(joinReq("g", joinOpts{session: 10 * time.Millisecond})))
	require.Equal(t, kerr.InvalidSessionTimeout.Code, code(joinReq("g", joinOpts{session: 2 * time.Minute})))
	require.Equal(t, kerr.InvalidGroupID.Code, code(joinReq("bad group!", joinOpts{})))
	require.Equal(t, kerr.InvalidGroupID.Code, code(joinReq("", joinOpts{})))
	noProto := joinReq("g", joinOpts{})
	noProto.Protocols = nil
	require.Equal(t, kerr.InconsistentGroupProtocol.Code, code(noProto))
	require.Equal(t, kerr.UnknownMemberID.Code, code(joinReq("g", joinOpts{member: "made-up"})))

	id, _ := b.stable(b.c, "g", joinOpts{protocols: []string{"range"}})
	require.NotEmpty(t, id)
	// A joiner with no protocol in common, or of another type.
	first := do[*kmsg.JoinGroupResponse](t, b.ctx, b.c, joinReq("g", joinOpts{protocols: []string{"roundrobin"}}))
	require.Equal(t, kerr.InconsistentGroupProtocol.Code, first.ErrorCode)
	first = do[*kmsg.JoinGroupResponse](t, b.ctx, b.c, joinReq("g", joinOpts{ptype: "connect"}))
	require.Equal(t, kerr.InconsistentGroupProtocol.Code, first.ErrorCode)
}

// A second member makes the first rejoin (REBALANCE_IN_PROGRESS on its
// heartbeat); the leader gets both members' metadata and the protocol
// both support that both prefer; followers' syncs wait for the leader's.
func TestRebalanceTwoMembers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a, gen := b.stable(b.c, "g", joinOpts{protocols: []string{"cooperative-sticky", "range"}})

	bj := b.newMember(b.c, "g", joinOpts{protocols: []string{"range", "cooperative-sticky"}, metadata: subscription("t", "u")})
	// The waiting join has started the rebalance once a's heartbeat says so.
	require.Eventually(t, func() bool {
		return heartbeat(t, b.ctx, b.c, "g", a, gen) == kerr.RebalanceInProgress.Code
	}, 10*time.Second, 5*time.Millisecond)
	// Committing is allowed while preparing (eager members commit before
	// they revoke).
	b.topic("t", 2)
	require.Zero(t, commit(t, b.ctx, b.c, "g", a, gen, 8, map[int32]int64{0: 1})[0])

	aj := recv(t, b.joinAsync(b.c, "g", joinOpts{member: a, protocols: []string{"cooperative-sticky", "range"}}))
	bjr := recv(t, bj)
	require.Zero(t, aj.ErrorCode)
	require.Zero(t, bjr.ErrorCode)
	require.Equal(t, gen+1, aj.Generation)
	require.Equal(t, aj.Generation, bjr.Generation)
	require.Equal(t, a, aj.LeaderID, "the leader stays the leader")
	require.Equal(t, a, bjr.LeaderID)
	require.Len(t, aj.Members, 2)
	require.Empty(t, bjr.Members, "only the leader learns the members")
	require.Equal(t, "cooperative-sticky", *aj.Protocol, "one vote each: the leader's preference wins the tie")
	for _, m := range aj.Members {
		if m.MemberID == bjr.MemberID {
			require.Equal(t, subscription("t", "u"), m.ProtocolMetadata)
		}
	}
	gen = aj.Generation

	// The follower's sync waits for the leader's.
	bs := b.syncAsync(b.c, syncReq("g", bjr.MemberID, gen, nil))
	select {
	case <-bs:
		t.Fatal("a follower's sync answered before the leader's")
	default:
	}
	// A commit between join and sync: REBALANCE_IN_PROGRESS.
	require.Equal(t, kerr.RebalanceInProgress.Code, commit(t, b.ctx, b.c, "g", a, gen, 8, map[int32]int64{0: 2})[0])
	as := recv(t, b.syncAsync(b.c, syncReq("g", a, gen, map[string][]byte{a: []byte("A"), bjr.MemberID: []byte("B")})))
	require.Zero(t, as.ErrorCode)
	require.Equal(t, []byte("A"), as.MemberAssignment)
	bsr := recv(t, bs)
	require.Zero(t, bsr.ErrorCode)
	require.Equal(t, []byte("B"), bsr.MemberAssignment)
	require.Equal(t, "cooperative-sticky", *bsr.Protocol)

	// Stale and unknown syncs.
	r := do[*kmsg.SyncGroupResponse](t, b.ctx, b.c, syncReq("g", a, gen-1, nil))
	require.Equal(t, kerr.IllegalGeneration.Code, r.ErrorCode)
	r = do[*kmsg.SyncGroupResponse](t, b.ctx, b.c, syncReq("g", "nobody", gen, nil))
	require.Equal(t, kerr.UnknownMemberID.Code, r.ErrorCode)
	wrong := syncReq("g", a, gen, nil)
	wrong.Protocol = kmsg.StringPtr("range")
	r = do[*kmsg.SyncGroupResponse](t, b.ctx, b.c, wrong)
	require.Equal(t, kerr.InconsistentGroupProtocol.Code, r.ErrorCode)
	// A late sync in the stable group gets the member's assignment.
	r = do[*kmsg.SyncGroupResponse](t, b.ctx, b.c, syncReq("g", bjr.MemberID, gen, nil))
	require.Zero(t, r.ErrorCode)
	require.Equal(t, []byte("B"), r.MemberAssignment)

	// A follower rejoining with the same metadata changes nothing.
	same := recv(t, b.joinAsync(b.c, "g", joinOpts{member: bjr.MemberID, protocols: []string{"range", "cooperative-sticky"},
		metadata: subscription("t", "u")}))
	require.Zero(t, same.ErrorCode)
	require.Equal(t, gen, same.Generation)
	require.Zero(t, heartbeat(t, b.ctx, b.c, "g", a, gen))

	// Describe shows both, with their assignments.
	d := describe(t, b.ctx, b.c, 5, "g")[0]
	require.Zero(t, d.ErrorCode)
	require.Equal(t, "Stable", d.State)
	require.Equal(t, "consumer", d.ProtocolType)
	require.Equal(t, "cooperative-sticky", d.Protocol)
	require.Len(t, d.Members, 2)
}

// A member that stops heartbeating is removed within its session
// timeout, and the group rebalances without it.
func TestSessionTimeoutRemovesMember(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	o := joinOpts{session: 300 * time.Millisecond, rebalance: 10 * time.Second}
	a, gen := b.stable(b.c, "g", o)
	bj := b.newMember(b.c, "g", o)
	require.Eventually(t, func() bool {
		return heartbeat(t, b.ctx, b.c, "g", a, gen) == kerr.RebalanceInProgress.Code
	}, 10*time.Second, 5*time.Millisecond)
	o.member = a
	aj := b.joinAsync(b.c, "g", o)
	ar, br := recv(t, aj), recv(t, bj)
	gen = ar.Generation
	require.Equal(t, gen, br.Generation)
	// Both sync; then only a keeps heartbeating.
	bs := b.syncAsync(b.c, syncReq("g", br.MemberID, gen, nil))
	recv(t, b.syncAsync(b.c, syncReq("g", a, gen, nil)))
	recv(t, bs)
	require.Eventually(t, func() bool {
		return heartbeat(t, b.ctx, b.c, "g", a, gen) == kerr.RebalanceInProgress.Code
	}, 10*time.Second, 20*time.Millisecond, "b's session expires")
	ar = recv(t, b.joinAsync(b.c, "g", o))
	require.Zero(t, ar.ErrorCode)
	require.Equal(t, gen+1, ar.Generation)
	require.Len(t, ar.Members, 1)
	require.Equal(t, kerr.UnknownMemberID.Code, heartbeat(t, b.ctx, b.c, "g", br.MemberID, gen))
}

// Members that do not rejoin within the rebalance timeout are removed;
// the join completes without them.
func TestRebalanceTimeoutRemovesLaggards(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	o := joinOpts{session: 10 * time.Second, rebalance: 200 * time.Millisecond}
	a, gen := b.stable(b.c, "g", o)
	bj := recv(t, b.newMember(b.c, "g", o)) // a never rejoins
	require.Zero(t, bj.ErrorCode)
	require.Equal(t, gen+1, bj.Generation)
	require.Equal(t, bj.MemberID, bj.LeaderID, "the leader left: the remaining member leads")
	require.Len(t, bj.Members, 1)
	require.Equal(t, kerr.UnknownMemberID.Code, heartbeat(t, b.ctx, b.c, "g", a, gen))
	// A member that joins but never syncs is removed after the timeout
	// too; the group rebalances and, with no one left joining, is empty.
	require.Eventually(t, func() bool {
		d := describe(t, b.ctx, b.c, 5, "g")[0]
		return d.State == "Empty"
	}, 10*time.Second, 10*time.Millisecond)
}

func TestLeaveGroup(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a, gen := b.stable(b.c, "g", joinOpts{})
	// v3+: a batch; an unknown member fails alone.
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = 5
	req.Group = "g"
	for _, id := range []string{"nobody", a} {
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = id
		req.Members = append(req.Members, m)
	}
	resp := do[*kmsg.LeaveGroupResponse](t, b.ctx, b.c, req)
	require.Zero(t, resp.ErrorCode)
	require.Len(t, resp.Members, 2)
	require.Equal(t, kerr.UnknownMemberID.Code, resp.Members[0].ErrorCode)
	require.Zero(t, resp.Members[1].ErrorCode)
	require.Equal(t, kerr.UnknownMemberID.Code, heartbeat(t, b.ctx, b.c, "g", a, gen))
	kg, members, err := b.c.store.KafkaGroupLoad(b.ctx, b.c.pool, "g")
	require.NoError(t, err)
	require.Equal(t, "Empty", kg.State)
	require.Equal(t, gen+1, kg.Generation, "leaving ends the generation")
	require.Empty(t, members)

	// v0: one member, its error at the top.
	old := kmsg.NewPtrLeaveGroupRequest()
	old.Group, old.MemberID = "g", a
	require.Equal(t, kerr.UnknownMemberID.Code, do[*kmsg.LeaveGroupResponse](t, b.ctx, b.c, old).ErrorCode)
}

func TestStaticMembership(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	inst := kmsg.StringPtr("pod-1")
	// A static member joins at once, even at v9.
	j := recv(t, b.joinAsync(b.c, "g", joinOpts{instance: inst}))
	require.Zero(t, j.ErrorCode)
	s := do[*kmsg.SyncGroupResponse](t, b.ctx, b.c, withInstance(syncReq("g", j.MemberID, j.Generation,
		map[string][]byte{j.MemberID: []byte("A")}), inst))
	require.Zero(t, s.ErrorCode)

	// Restarted (no member ID), same protocols: a new member ID, the old
	// one fenced, no rebalance, the leader told to skip the assignment.
	j2 := recv(t, b.joinAsync(b.c, "g", joinOpts{instance: inst}))
	require.Zero(t, j2.ErrorCode)
	require.NotEqual(t, j.MemberID, j2.MemberID)
	require.Equal(t, j.Generation, j2.Generation)
	require.True(t, j2.SkipAssignment)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version = 4
	hb.Group, hb.MemberID, hb.Generation, hb.InstanceID = "g", j.MemberID, j.Generation, inst
	require.Equal(t, kerr.FencedInstanceID.Code, do[*kmsg.HeartbeatResponse](t, b.ctx, b.c, hb).ErrorCode)
	hb.MemberID = j2.MemberID
	require.Zero(t, do[*kmsg.HeartbeatResponse](t, b.ctx, b.c, hb).ErrorCode)
	s = do[*kmsg.SyncGroupResponse](t, b.ctx, b.c, withInstance(syncReq("g", j2.MemberID, j2.Generation, nil), inst))
	require.Equal(t, []byte("A"), s.MemberAssignment, "the assignment stays with the instance")

	// Leaving by instance ID.
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = 4
	req.Group = "g"
	m := kmsg.NewLeaveGroupRequestMember()
	m.InstanceID = inst
	req.Members = append(req.Members, m)
	resp := do[*kmsg.LeaveGroupResponse](t, b.ctx, b.c, req)
	require.Zero(t, resp.Members[0].ErrorCode)
	require.Equal(t, j2.MemberID, resp.Members[0].MemberID)
}

func withInstance(req *kmsg.SyncGroupRequest, inst *string) *kmsg.SyncGroupRequest {
	req.InstanceID = inst
	return req
}

// commit commits offsets of topic "t" and returns each partition's code
// (in map order of parts sorted by the response).
func commit(t testing.TB, ctx context.Context, c *Coordinator, group, member string, gen int32, version int16, parts map[int32]int64) []int16 {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = version
	req.Group, req.MemberID, req.Generation = group, member, gen
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "t"
	for p, o := range parts {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, o
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp := do[*kmsg.OffsetCommitResponse](t, ctx, c, req)
	var out []int16
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			out = append(out, rp.ErrorCode)
		}
	}
	return out
}

// fetch returns group's offsets of topic "t", partitions 0..n-1 (v8).
func fetch(t testing.TB, ctx context.Context, c *Coordinator, group string, n int32) ([]int64, []string, int16) {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 8
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = group
	rt := kmsg.NewOffsetFetchRequestGroupTopic()
	rt.Topic = "t"
	for p := range n {
		rt.Partitions = append(rt.Partitions, p)
	}
	rg.Topics = append(rg.Topics, rt)
	req.Groups = append(req.Groups, rg)
	resp := do[*kmsg.OffsetFetchResponse](t, ctx, c, req)
	require.Len(t, resp.Groups, 1)
	g := resp.Groups[0]
	if g.ErrorCode != 0 {
		return nil, nil, g.ErrorCode
	}
	var offs []int64
	var metas []string
	for _, p := range g.Topics[0].Partitions {
		require.Zero(t, p.ErrorCode)
		offs = append(offs, p.Offset)
		metas = append(metas, *p.Metadata)
	}
	return offs, metas, 0
}

func describe(t testing.TB, ctx context.Context, c *Coordinator, version int16, groups ...string) []kmsg.DescribeGroupsResponseGroup {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Version = version
	req.Groups = groups
	req.IncludeAuthorizedOperations = true
	return do[*kmsg.DescribeGroupsResponse](t, ctx, c, req).Groups
}

// Kafka's committed offsets are the pgmsg group's cursors, both meaning
// the next offset to read; partitions never committed answer -1.
func TestOffsetsArePgmsgCursors(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.topic("t", 3)
	var recs []*pgmsg.Record
	for i := range 30 {
		p := int32(i % 3)
		recs = append(recs, &pgmsg.Record{Topic: "t", Partition: p, Value: fmt.Appendf(nil, "v%d", i)})
	}
	require.NoError(t, b.client.Publish(b.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))

	// A simple commit (no member, generation -1) with metadata.
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 8
	req.Group, req.Generation = "g", -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.Metadata, rp.LeaderEpoch = 0, 4, kmsg.StringPtr("meta"), 7
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := do[*kmsg.OffsetCommitResponse](t, b.ctx, b.c, req)
	require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)

	offs, metas, code := fetch(t, b.ctx, b.c, "g", 3)
	require.Zero(t, code)
	require.Equal(t, []int64{4, -1, -1}, offs, "partitions never committed have no offset")
	require.Equal(t, []string{"meta", "", ""}, metas)

	// pgmsg sees the cursor: group list shows it, lag included.
	parts, err := b.client.ListGroups(b.ctx, "t", "g")
	require.NoError(t, err)
	require.Len(t, parts, 3)
	require.Equal(t, int64(4), parts[0].NextOffset)
	require.Equal(t, int64(6), parts[0].Lag)
	require.NotNil(t, parts[0].CommittedAt)

	// A native consumer of the group continues at offset 4.
	p0 := int32(0)
	cl, err := b.client.Claim(b.ctx, "t", "g", &pgmsg.ClaimOpts{Partition: &p0, MaxRecords: 2})
	require.NoError(t, err)
	require.Equal(t, int64(4), cl.Records[0].Offset)
	require.NoError(t, b.client.Commit(b.ctx, cl))
	// ...and Kafka continues where the native consumer committed.
	offs, metas, _ = fetch(t, b.ctx, b.c, "g", 3)
	require.Equal(t, int64(6), offs[0])
	require.Equal(t, "", metas[0], "the metadata was the Kafka commit's")
	// A reset positions a partition for Kafka too.
	p1 := int32(1)
	_, err = b.client.ResetGroup(b.ctx, "t", "g", "3", &p1)
	require.NoError(t, err)
	offs, _, _ = fetch(t, b.ctx, b.c, "g", 3)
	require.Equal(t, []int64{6, 3, -1}, offs)

	// Fetching every topic returns the partitions that have an offset.
	all := kmsg.NewPtrOffsetFetchRequest()
	all.Version = 7
	all.Group = "g"
	fr := do[*kmsg.OffsetFetchResponse](t, b.ctx, b.c, all)
	require.Zero(t, fr.ErrorCode)
	require.Len(t, fr.Topics, 1)
	require.Len(t, fr.Topics[0].Partitions, 2)

	// A Kafka commit over a live native claim ends the claim: its commit
	// is refused.
	cl, err = b.client.Claim(b.ctx, "t", "g", &pgmsg.ClaimOpts{Partition: &p0, MaxRecords: 2})
	require.NoError(t, err)
	require.Equal(t, []int16{0}, commit(t, b.ctx, b.c, "g", "", -1, 8, map[int32]int64{0: 9}))
	require.ErrorIs(t, b.client.Commit(b.ctx, cl), pgmsg.ErrClaimNotHeld)
	offs, _, _ = fetch(t, b.ctx, b.c, "g", 3)
	require.Equal(t, int64(9), offs[0])

	// Unknown topics and partitions answer -1 to a fetch.
	offs, _, _ = fetch(t, b.ctx, b.c, "other", 4)
	require.Equal(t, []int64{-1, -1, -1, -1}, offs)

	// v8: several groups in one request, each with its own answer.
	multi := kmsg.NewPtrOffsetFetchRequest()
	multi.Version = 8
	for _, name := range []string{"g", "bad name", "other"} {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = name // Topics nil: every topic
		multi.Groups = append(multi.Groups, rg)
	}
	mr := do[*kmsg.OffsetFetchResponse](t, b.ctx, b.c, multi)
	require.Len(t, mr.Groups, 3)
	require.Zero(t, mr.Groups[0].ErrorCode)
	require.Len(t, mr.Groups[0].Topics, 1)
	require.Len(t, mr.Groups[0].Topics[0].Partitions, 2)
	require.Equal(t, int64(9), mr.Groups[0].Topics[0].Partitions[0].Offset)
	require.Equal(t, kerr.InvalidGroupID.Code, mr.Groups[1].ErrorCode)
	require.Zero(t, mr.Groups[2].ErrorCode)
	require.Empty(t, mr.Groups[2].Topics)
}

func TestOffsetCommitRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.MaxMetadataBytes = 8 })
	b.topic("t", 2)
	// A group that does not exist: a commit with a generation is
	// ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND from v9.
	require.Equal(t, []int16{kerr.IllegalGeneration.Code}, commit(t, b.ctx, b.c, "none", "m", 1, 8, map[int32]int64{0: 1}))
	require.Equal(t, []int16{kerr.GroupIDNotFound.Code}, commit(t, b.ctx, b.c, "none", "m", 1, 9, map[int32]int64{0: 1}))
	// Partitions: unknown ones, negative offsets.
	require.Equal(t, []int16{kerr.UnknownTopicOrPartition.Code}, commit(t, b.ctx, b.c, "g", "", -1, 8, map[int32]int64{5: 1}))
	require.Equal(t, []int16{kerr.OffsetOutOfRange.Code}, commit(t, b.ctx, b.c, "g", "", -1, 8, map[int32]int64{1: -3}))
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 8
	req.Group, req.Generation = "g", -1
	for _, topic := range []string{"t", "missing"} {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.Metadata = 0, 1, kmsg.StringPtr("far too long")
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	resp := do[*kmsg.OffsetCommitResponse](t, b.ctx, b.c, req)
	require.Equal(t, kerr.OffsetMetadataTooLarge.Code, resp.Topics[0].Partitions[0].ErrorCode)
	req.Topics[0].Partitions[0].Metadata, req.Topics[1].Partitions[0].Metadata = nil, nil
	resp = do[*kmsg.OffsetCommitResponse](t, b.ctx, b.c, req)
	require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, resp.Topics[1].Partitions[0].ErrorCode)

	// With members: only the current generation's members commit.
	a, gen := b.stable(b.c, "g", joinOpts{})
	require.Equal(t, []int16{0}, commit(t, b.ctx, b.c, "g", a, gen, 8, map[int32]int64{0: 2}))
	require.Equal(t, []int16{kerr.IllegalGeneration.Code}, commit(t, b.ctx, b.c, "g", a, gen-1, 8, map[int32]int64{0: 3}))
	require.Equal(t, []int16{kerr.UnknownMemberID.Code}, commit(t, b.ctx, b.c, "g", "nobody", gen, 8, map[int32]int64{0: 3}))
	require.Equal(t, []int16{kerr.UnknownMemberID.Code}, commit(t, b.ctx, b.c, "g", "", -1, 8, map[int32]int64{0: 3}),
		"no simple commits while the group has members")
	offs, _, _ := fetch(t, b.ctx, b.c, "g", 2)
	require.Equal(t, int64(2), offs[0])
}

func TestOffsetDelete(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.topic("t", 2)
	del := func(group string, parts ...int32) *kmsg.OffsetDeleteResponse {
		req := kmsg.NewPtrOffsetDeleteRequest()
		req.Group = group
		rt := kmsg.NewOffsetDeleteRequestTopic()
		rt.Topic = "t"
		for _, p := range parts {
			rp := kmsg.NewOffsetDeleteRequestTopicPartition()
			rp.Partition = p
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		return do[*kmsg.OffsetDeleteResponse](t, b.ctx, b.c, req)
	}
	require.Equal(t, kerr.GroupIDNotFound.Code, del("none", 0).ErrorCode)
	require.Equal(t, []int16{0, 0}, commit(t, b.ctx, b.c, "g", "", -1, 8, map[int32]int64{0: 0, 1: 0}))
	r := del("g", 0, 7)
	require.Zero(t, r.ErrorCode)
	require.Zero(t, r.Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, r.Topics[0].Partitions[1].ErrorCode)
	offs, _, _ := fetch(t, b.ctx, b.c, "g", 2)
	require.Equal(t, []int64{-1, 0}, offs)
	parts, err := b.client.ListGroups(b.ctx, "t", "g")
	require.NoError(t, err)
	require.Len(t, parts, 2, "one partition still has an offset")
	require.Zero(t, del("g", 1).ErrorCode)
	parts, err = b.client.ListGroups(b.ctx, "t", "g")
	require.NoError(t, err)
	require.Empty(t, parts, "no offset left: the pgmsg group is gone (it held retention)")

	// A group whose members subscribe to the topic keeps its offsets.
	_, _ = b.stable(b.c, "g", joinOpts{metadata: subscription("t")})
	r = del("g", 0)
	require.Equal(t, kerr.GroupSubscribedToTopic.Code, r.Topics[0].Partitions[0].ErrorCode)
}

func TestListDescribeDeleteGroups(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.topic("t", 1)
	a, _ := b.stable(b.c, "kafka-g", joinOpts{})
	_, err := b.client.CreateGroup(b.ctx, "t", "native-g", "")
	require.NoError(t, err)

	list := func(states ...string) map[string]kmsg.ListGroupsResponseGroup {
		req := kmsg.NewPtrListGroupsRequest()
		req.Version = 5
		req.StatesFilter = states
		resp := do[*kmsg.ListGroupsResponse](t, b.ctx, b.c, req)
		require.Zero(t, resp.ErrorCode)
		out := map[string]kmsg.ListGroupsResponseGroup{}
		for _, g := range resp.Groups {
			out[g.Group] = g
		}
		return out
	}
	l := list()
	require.Len(t, l, 2)
	require.Equal(t, "Stable", l["kafka-g"].GroupState)
	require.Equal(t, "consumer", l["kafka-g"].ProtocolType)
	require.Equal(t, "classic", l["kafka-g"].GroupType)
	require.Equal(t, "Empty", l["native-g"].GroupState)
	require.Equal(t, "", l["native-g"].ProtocolType)
	require.Len(t, list("Empty"), 1)

	ds := describe(t, b.ctx, b.c, 5, "kafka-g", "native-g", "nothing", "bad name")
	require.Equal(t, "Stable", ds[0].State)
	require.Len(t, ds[0].Members, 1)
	require.Equal(t, a, ds[0].Members[0].MemberID)
	require.Equal(t, int32(1<<aclRead|1<<aclDelete|1<<aclDescribe), ds[0].AuthorizedOperations)
	require.Equal(t, "Empty", ds[1].State)
	require.Zero(t, ds[2].ErrorCode)
	require.Equal(t, "Dead", ds[2].State)
	require.Equal(t, kerr.InvalidGroupID.Code, ds[3].ErrorCode)
	require.Equal(t, kerr.GroupIDNotFound.Code, describe(t, b.ctx, b.c, 6, "nothing")[0].ErrorCode)

	delGroups := func(groups ...string) []int16 {
		req := kmsg.NewPtrDeleteGroupsRequest()
		req.Version = 2
		req.Groups = groups
		var out []int16
		for _, g := range do[*kmsg.DeleteGroupsResponse](t, b.ctx, b.c, req).Groups {
			out = append(out, g.ErrorCode)
		}
		return out
	}
	require.Equal(t, []int16{kerr.NonEmptyGroup.Code, 0, kerr.GroupIDNotFound.Code, kerr.InvalidGroupID.Code},
		delGroups("kafka-g", "native-g", "nothing", "bad name"))
	parts, err := b.client.ListGroups(b.ctx, "t", "native-g")
	require.NoError(t, err)
	require.Empty(t, parts)

	// Once its member left, the Kafka group goes, offsets and all.
	require.Equal(t, []int16{0}, commit(t, b.ctx, b.c, "kafka-g", a, 1, 8, map[int32]int64{0: 0}))
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group, leave.MemberID = "kafka-g", a
	require.Zero(t, do[*kmsg.LeaveGroupResponse](t, b.ctx, b.c, leave).ErrorCode)
	require.Equal(t, []int16{0}, delGroups("kafka-g"))
	require.Empty(t, list())
	parts, err = b.client.ListGroups(b.ctx, "t", "kafka-g")
	require.NoError(t, err)
	require.Empty(t, parts)
	// A deleted group starts again from generation 1.
	_, gen := b.stable(b.c, "kafka-g", joinOpts{})
	require.Equal(t, int32(1), gen)
}

// Requests about groups another process coordinates answer
// NOT_COORDINATOR; a process that takes a group over continues from
// PostgreSQL: same generation, members and assignments, and commits of
// the generation's members are accepted. The process that lost the group
// cannot overwrite it.
func TestTakeOverFromPostgreSQL(t *testing.T) {
	t.Parallel()
	var owner1 = true
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	owns1 := func(string) bool { <-mu; defer func() { mu <- struct{}{} }(); return owner1 }
	b := setup(t, func(c *Config) { c.Owns = owns1 })
	b.topic("t", 1)
	a, gen := b.stable(b.c, "g", joinOpts{})

	c2 := b.another(func(c *Config) { c.Owns = func(string) bool { return true } })
	<-mu
	owner1 = false
	mu <- struct{}{}
	require.Equal(t, kerr.NotCoordinator.Code, heartbeat(t, b.ctx, b.c, "g", a, gen))

	require.Zero(t, heartbeat(t, b.ctx, c2, "g", a, gen))
	s := do[*kmsg.SyncGroupResponse](t, b.ctx, c2, syncReq("g", a, gen, nil))
	require.Zero(t, s.ErrorCode)
	require.Equal(t, []byte("a-"+a), s.MemberAssignment)
	require.Equal(t, []int16{0}, commit(t, b.ctx, c2, "g", a, gen, 8, map[int32]int64{0: 0}))

	// A new member joins through c2: generation 2 is written there.
	bj := b.newMember(c2, "g", joinOpts{})
	require.Eventually(t, func() bool {
		return heartbeat(t, b.ctx, c2, "g", a, gen) == kerr.RebalanceInProgress.Code
	}, 10*time.Second, 5*time.Millisecond)
	aj := recv(t, b.joinAsync(c2, "g", joinOpts{member: a}))
	require.Equal(t, gen+1, aj.Generation)
	recv(t, bj)

	// A third process that loaded the group before that write and writes
	// after it is refused: it drops its copy (NOT_COORDINATOR).
	kg, _, err := b.c.store.KafkaGroupLoad(b.ctx, b.c.pool, "g")
	require.NoError(t, err)
	stale := newGroup(b.c, "g")
	stale.version = kg.Version - 1
	stale.mu.Lock()
	require.Equal(t, kerr.NotCoordinator.Code, stale.save(stateEmpty))
	stale.mu.Unlock()
	kg2, _, err := b.c.store.KafkaGroupLoad(b.ctx, b.c.pool, "g")
	require.NoError(t, err)
	require.Equal(t, kg.Version, kg2.Version, "nothing written over the newer version")
}

func TestAuthorization(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) {
		c.Authorize = func(_ context.Context, kind, name, op string) bool {
			return (kind != "group" || name != "secret") && (kind != "topic" || name != "t" || op != "read")
		}
	})
	b.topic("t", 1)
	require.Equal(t, kerr.GroupAuthorizationFailed.Code,
		do[*kmsg.JoinGroupResponse](t, b.ctx, b.c, joinReq("secret", joinOpts{})).ErrorCode)
	require.Equal(t, []int16{kerr.GroupAuthorizationFailed.Code}, commit(t, b.ctx, b.c, "secret", "", -1, 8, map[int32]int64{0: 0}))
	require.Equal(t, []int16{kerr.TopicAuthorizationFailed.Code}, commit(t, b.ctx, b.c, "open", "", -1, 8, map[int32]int64{0: 0}))
	_, _, code := fetch(t, b.ctx, b.c, "secret", 1)
	require.Equal(t, kerr.GroupAuthorizationFailed.Code, code)
	require.Equal(t, kerr.GroupAuthorizationFailed.Code, describe(t, b.ctx, b.c, 5, "secret")[0].ErrorCode)
}

// A coordinator that stops between the join and the leader's assignment
// leaves a group that the next one rebalances: the members rejoin (their
// heartbeat says so) into the next generation.
func TestRestartMidRebalance(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c1 := b.another(nil)
	j := recv(t, b.newMember(c1, "g", joinOpts{}))
	require.Zero(t, j.ErrorCode)
	c1.Close() // no SyncGroup yet: stored as CompletingRebalance

	c2 := b.another(nil)
	require.Equal(t, kerr.RebalanceInProgress.Code, heartbeat(t, b.ctx, c2, "g", j.MemberID, j.Generation))
	r := do[*kmsg.SyncGroupResponse](t, b.ctx, c2, syncReq("g", j.MemberID, j.Generation, nil))
	require.Equal(t, kerr.RebalanceInProgress.Code, r.ErrorCode)
	j2 := recv(t, b.joinAsync(c2, "g", joinOpts{member: j.MemberID}))
	require.Zero(t, j2.ErrorCode)
	require.Equal(t, j.Generation+1, j2.Generation)
	require.Equal(t, j.MemberID, j2.LeaderID)
}

// A group this process does not coordinate answers NOT_COORDINATOR to
// every request about it, and ListGroups leaves it out.
func TestNotCoordinator(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Owns = func(g string) bool { return g != "elsewhere" } })
	b.topic("t", 1)
	_, err := b.client.CreateGroup(b.ctx, "t", "elsewhere", "")
	require.NoError(t, err)
	_, err = b.client.CreateGroup(b.ctx, "t", "here", "")
	require.NoError(t, err)
	nc := kerr.NotCoordinator.Code
	require.Equal(t, nc, do[*kmsg.JoinGroupResponse](t, b.ctx, b.c, joinReq("elsewhere", joinOpts{})).ErrorCode)
	require.Equal(t, nc, do[*kmsg.SyncGroupResponse](t, b.ctx, b.c, syncReq("elsewhere", "m", 1, nil)).ErrorCode)
	require.Equal(t, nc, heartbeat(t, b.ctx, b.c, "elsewhere", "m", 1))
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group, leave.MemberID = "elsewhere", "m"
	require.Equal(t, nc, do[*kmsg.LeaveGroupResponse](t, b.ctx, b.c, leave).ErrorCode)
	require.Equal(t, []int16{nc}, commit(t, b.ctx, b.c, "elsewhere", "", -1, 8, map[int32]int64{0: 0}))
	_, _, code := fetch(t, b.ctx, b.c, "elsewhere", 1)
	require.Equal(t, nc, code)
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "elsewhere"
	require.Equal(t, nc, do[*kmsg.OffsetDeleteResponse](t, b.ctx, b.c, od).ErrorCode)
	require.Equal(t, nc, describe(t, b.ctx, b.c, 5, "elsewhere")[0].ErrorCode)
	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.Groups = []string{"elsewhere"}
	require.Equal(t, nc, do[*kmsg.DeleteGroupsResponse](t, b.ctx, b.c, dg).Groups[0].ErrorCode)
	lg := kmsg.NewPtrListGroupsRequest()
	groups := do[*kmsg.ListGroupsResponse](t, b.ctx, b.c, lg).Groups
	require.Len(t, groups, 1)
	require.Equal(t, "here", groups[0].Group)

	// Before v2 OffsetFetch has no group error: each partition has it.
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Version = 1
	of.Group = "elsewhere"
	ot := kmsg.NewOffsetFetchRequestTopic()
	ot.Topic, ot.Partitions = "t", []int32{0}
	of.Topics = append(of.Topics, ot)
	fr := do[*kmsg.OffsetFetchResponse](t, b.ctx, b.c, of)
	require.Equal(t, nc, fr.Topics[0].Partitions[0].ErrorCode)
}
