package kafkagroup

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg/internal/kafkaclient"
	"github.com/pgmsg/pgmsg/internal/store"
)

// state is a group's state in the classic protocol.
type state int8

const (
	stateEmpty state = iota
	statePreparing
	stateCompleting
	stateStable
)

func (s state) String() string {
	switch s {
	case statePreparing:
		return "PreparingRebalance"
	case stateCompleting:
		return "CompletingRebalance"
	case stateStable:
		return "Stable"
	default:
		return "Empty"
	}
}

// member is a member of the group's current (or forming) generation.
type member struct {
	id         string
	instanceID *string
	clientID   string
	clientHost string
	session    time.Duration
	rebalance  time.Duration
	protocols  []kmsg.JoinGroupRequestProtocol
	assignment []byte
	// seq orders members by their first join: the leader is the earliest
	// member when the old one is gone.
	seq uint64

	// join is set while the member's JoinGroup waits for the barrier,
	// sync while its SyncGroup waits for the leader's.
	join  *waiter
	sync  *waiter
	timer *time.Timer // session
}

// waiter is a request parked until the rebalance answers it.
type waiter struct {
	req kmsg.Request
	ch  chan kmsg.Response // buffered 1: answered once, never blocks
}

func newWaiter(req kmsg.Request) *waiter {
	return &waiter{req: req, ch: make(chan kmsg.Response, 1)}
}

// group is one Kafka group's state in the coordinator's memory. Every
// field is guarded by mu. A group whose dead is set is no longer the
// coordinator's (dropped): whoever holds it looks the name up again.
type group struct {
	c    *Coordinator
	name string

	mu      sync.Mutex
	dead    bool
	version int64     // of the kafka_group row (0: none yet)
	checked time.Time // when version was last read or written

	state        state
	protocolType string
	protocol     string
	generation   int32
	leader       string
	members      map[string]*member
	pending      map[string]*time.Timer // member IDs handed out (MEMBER_ID_REQUIRED), not joined yet
	static       map[string]string      // group.instance.id -> member ID
	awaitingSync map[string]bool
	seq          uint64

	rebalanceTimer *time.Timer
	syncTimer      *time.Timer
	// barrier increments whenever a rebalance step starts or ends, so a
	// timer of an earlier step does nothing.
	barrier uint64
}

func newGroup(c *Coordinator, name string) *group {
	return &group{c: c, name: name, members: map[string]*member{}, pending: map[string]*time.Timer{},
		static: map[string]string{}}
}

// load reads the group from PostgreSQL (a group without a row starts
// empty). Members get a full session from now; a group stored in the
// middle of a rebalance starts one again.
func (g *group) load(ctx context.Context) error {
	ctx, cancel := g.c.dbCtx(ctx)
	defer cancel()
	kg, members, err := g.c.store.KafkaGroupLoad(ctx, g.c.pool, g.name)
	if err != nil {
		return err
	}
	g.checked = time.Now()
	if kg == nil {
		return nil
	}
	g.version, g.protocolType, g.protocol = kg.Version, kg.ProtocolType, kg.Protocol
	g.generation, g.leader = kg.Generation, kg.Leader
	for _, km := range members {
		m := &member{id: km.MemberID, instanceID: km.InstanceID, clientID: km.ClientID, clientHost: km.ClientHost,
			session:   time.Duration(km.SessionTimeoutMs) * time.Millisecond,
			rebalance: time.Duration(km.RebalanceTimeoutMs) * time.Millisecond, assignment: km.Assignment}
		for i, name := range km.Protocols {
			p := kmsg.NewJoinGroupRequestProtocol()
			p.Name = name
			if i < len(km.Metadata) {
				p.Metadata = km.Metadata[i]
			}
			m.protocols = append(m.protocols, p)
		}
		g.addMember(m)
		g.startSession(m)
	}
	switch {
	case len(g.members) == 0:
		g.state = stateEmpty
	case kg.State == stateStable.String():
		g.state = stateStable
	default:
		// Stored between the join and the leader's assignment: the
		// members' assignments are gone with the old coordinator; every
		// member joins again.
		g.state = stateStable
		g.rebalance()
	}
	return nil
}

// drop ends the group's life in this coordinator: timers stop and every
// parked request is answered with code.
func (g *group) drop(code int16) {
	if g.dead {
		return
	}
	g.dead = true
	g.stopTimer(&g.rebalanceTimer)
	g.stopTimer(&g.syncTimer)
	for _, t := range g.pending {
		t.Stop()
	}
	for _, m := range g.members {
		if m.timer != nil {
			m.timer.Stop()
		}
		g.failWaiters(m, code)
	}
}

func (g *group) stopTimer(t **time.Timer) {
	if *t != nil {
		(*t).Stop()
		*t = nil
	}
}

// failWaiters answers m's parked requests with code.
func (g *group) failWaiters(m *member, code int16) {
	if m.join != nil {
		resp := m.join.req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = code
		resp.MemberID = m.id
		m.join.ch <- resp
		m.join = nil
	}
	if m.sync != nil {
		resp := m.sync.req.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = code
		m.sync.ch <- resp
		m.sync = nil
	}
}

// save writes the group in state st (as the row's state) over the version
// read. On a conflict (another process wrote it) or a database error the
// group is dropped, its parked requests answered, and save returns the
// code for the request at hand; 0 when written.
func (g *group) save(st state) int16 {
	ctx, cancel := g.c.dbCtx(g.c.ctx)
	defer cancel()
	kg := &store.KafkaGroup{Name: g.name, ProtocolType: g.protocolType, Protocol: g.protocol,
		Generation: g.generation, Leader: g.leader, State: st.String(), Version: g.version}
	ms := g.sortedMembers()
	members := make([]store.KafkaMember, len(ms))
	for i, m := range ms {
		km := store.KafkaMember{MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost,
			SessionTimeoutMs: int32(m.session / time.Millisecond), RebalanceTimeoutMs: int32(m.rebalance / time.Millisecond),
			Assignment: m.assignment}
		for _, p := range m.protocols {
			km.Protocols = append(km.Protocols, p.Name)
			km.Metadata = append(km.Metadata, p.Metadata)
		}
		members[i] = km
	}
	v, ok, err := g.c.store.KafkaGroupSave(ctx, g.c.pool, kg, members)
	code := int16(0)
	switch {
	case err != nil:
		g.c.log.Warn("kafka group: write failed", "group", g.name, "err", err)
		code = kerr.CoordinatorNotAvailable.Code
	case !ok:
		g.c.log.Info("kafka group: written by another process, copy dropped", "group", g.name)
		code = kerr.NotCoordinator.Code
	default:
		g.version, g.checked = v, time.Now()
		return 0
	}
	g.c.remove(g)
	g.drop(code)
	return code
}

// sortedMembers returns the members in the order they first joined.
func (g *group) sortedMembers() []*member {
	ms := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].seq < ms[j].seq })
	return ms
}

func (g *group) addMember(m *member) {
	if m.seq == 0 {
		g.seq++
		m.seq = g.seq
	}
	g.members[m.id] = m
	if m.instanceID != nil {
		g.static[*m.instanceID] = m.id
	}
}

// removeMember takes m out of the group (no rebalance); its parked
// requests are answered UNKNOWN_MEMBER_ID.
func (g *group) removeMember(m *member, code int16) {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	g.failWaiters(m, code)
	delete(g.members, m.id)
	delete(g.awaitingSync, m.id)
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
}

// startSession (re)starts m's session timer: a member that sends nothing
// for its session timeout is removed and the group rebalances.
func (g *group) startSession(m *member) {
	if m.timer != nil {
		m.timer.Stop()
	}
	m.timer = time.AfterFunc(m.session, func() { g.sessionExpired(m) })
}

func (g *group) sessionExpired(m *member) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dead || g.members[m.id] != m {
		return
	}
	if !g.c.owns(g.name) {
		g.c.remove(g)
		g.drop(kerr.NotCoordinator.Code)
		return
	}
	if m.join != nil || m.sync != nil {
		// Parked in a rebalance: the rebalance's own timers bound it.
		g.startSession(m)
		return
	}
	g.c.log.Info("kafka group: member session expired", "group", g.name, "member", m.id)
	g.removeMember(m, kerr.UnknownMemberID.Code)
	g.rebalance()
}

// rebalance starts a rebalance (or keeps the one going): members must
// join again; those that do not within the rebalance timeout are
// removed.
func (g *group) rebalance() {
	if g.dead {
		return
	}
	if g.state == stateCompleting {
		for _, m := range g.members {
			m.assignment = nil
			if m.sync != nil {
				resp := m.sync.req.ResponseKind().(*kmsg.SyncGroupResponse)
				resp.ErrorCode = kerr.RebalanceInProgress.Code
				m.sync.ch <- resp
				m.sync = nil
			}
		}
	}
	g.stopTimer(&g.syncTimer)
	g.awaitingSync = nil
	if g.state != statePreparing {
		g.state = statePreparing
		g.barrier++
		b := g.barrier
		g.stopTimer(&g.rebalanceTimer)
		g.rebalanceTimer = time.AfterFunc(g.maxRebalance(), func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.dead || g.barrier != b {
				return
			}
			if !g.c.owns(g.name) {
				g.c.remove(g)
				g.drop(kerr.NotCoordinator.Code)
				return
			}
			g.completeJoin()
		})
	}
	g.maybeCompleteJoin()
}

func (g *group) maxRebalance() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalance)
	}
	return d
}

// maybeCompleteJoin completes the join step once every member joined.
func (g *group) maybeCompleteJoin() {
	if g.state != statePreparing {
		return
	}
	for _, m := range g.members {
		if m.join == nil {
			return
		}
	}
	g.completeJoin()
}

// completeJoin ends the join step: members that did not join are removed,
// the generation advances, a protocol is chosen, and every member's
// JoinGroup is answered (the leader's with every member's metadata).
func (g *group) completeJoin() {
	if g.state != statePreparing || g.dead {
		return
	}
	g.stopTimer(&g.rebalanceTimer)
	g.barrier++
	for _, m := range g.members {
		if m.join == nil {
			g.removeMember(m, kerr.UnknownMemberID.Code)
		}
	}
	g.generation++
	if g.generation <= 0 {
		g.generation = 1
	}
	if len(g.members) == 0 {
		g.state, g.protocol, g.leader = stateEmpty, "", ""
		g.save(stateEmpty)
		return
	}
	proto, ok := g.chooseProtocol()
	if !ok {
		// Members changed their protocols and share none any more.
		for _, m := range g.members {
			g.removeMember(m, kerr.InconsistentGroupProtocol.Code)
		}
		g.state, g.protocol, g.leader = stateEmpty, "", ""
		g.save(stateEmpty)
		return
	}
	g.protocol = proto
	ms := g.sortedMembers()
	if _, ok := g.members[g.leader]; !ok {
		g.leader = ms[0].id
	}
	g.state = stateCompleting
	if g.save(stateCompleting) != 0 {
		return
	}
	g.awaitingSync = map[string]bool{}
	for _, m := range ms {
		g.awaitingSync[m.id] = true
		req := m.join.req.(*kmsg.JoinGroupRequest)
		m.join.ch <- g.joinResponse(req, m)
		m.join = nil
		g.startSession(m)
	}
	b := g.barrier
	g.syncTimer = time.AfterFunc(g.maxRebalance(), func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.dead || g.barrier != b || g.state != stateCompleting {
			return
		}
		// Members that never sent their SyncGroup are gone.
		for id := range g.awaitingSync {
			if m := g.members[id]; m != nil {
				g.removeMember(m, kerr.UnknownMemberID.Code)
			}
		}
		g.rebalance()
	})
}

// chooseProtocol picks the protocol every member supports that most
// members prefer (each votes for its most preferred such protocol); ties
// go to the leader's (or earliest member's) preference.
func (g *group) chooseProtocol() (string, bool) {
	count := map[string]int{}
	for _, m := range g.members {
		seen := map[string]bool{}
		for _, p := range m.protocols {
			if !seen[p.Name] {
				seen[p.Name] = true
				count[p.Name]++
			}
		}
	}
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if count[p.Name] == len(g.members) {
				votes[p.Name]++
				break
			}
		}
	}
	if len(votes) == 0 {
		return "", false
	}
	ms := g.sortedMembers()
	if l, ok := g.members[g.leader]; ok {
		ms = append([]*member{l}, ms...)
	}
	best, bestVotes := "", 0
	for _, m := range ms {
		for _, p := range m.protocols {
			if v := votes[p.Name]; v > bestVotes {
				best, bestVotes = p.Name, v
			}
		}
	}
	return best, true
}

// joinResponse is the answer to m's JoinGroup in the current generation.
func (g *group) joinResponse(req *kmsg.JoinGroupRequest, m *member) *kmsg.JoinGroupResponse {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation = g.generation
	resp.ProtocolType = kmsg.StringPtr(g.protocolType)
	resp.Protocol = kmsg.StringPtr(g.protocol)
	resp.LeaderID = g.leader
	resp.MemberID = m.id
	if m.id == g.leader {
		for _, o := range g.sortedMembers() {
			jm := kmsg.NewJoinGroupResponseMember()
			jm.MemberID = o.id
			jm.InstanceID = o.instanceID
			jm.ProtocolMetadata = o.metadataOf(g.protocol)
			resp.Members = append(resp.Members, jm)
		}
	}
	return resp
}

func (m *member) metadataOf(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

func (m *member) sameProtocols(ps []kmsg.JoinGroupRequestProtocol) bool {
	if len(m.protocols) != len(ps) {
		return false
	}
	for i := range ps {
		if m.protocols[i].Name != ps[i].Name || !bytes.Equal(m.protocols[i].Metadata, ps[i].Metadata) {
			return false
		}
	}
	return true
}

// protocolsMatch reports whether a member joining with protocolType and
// protocols may join: any (non-empty) protocol type starts an empty
// group; otherwise the type must be the group's and one of the protocols
// supported by every member.
func (g *group) protocolsMatch(protocolType string, protocols []kmsg.JoinGroupRequestProtocol) bool {
	if len(g.members) == 0 {
		return true
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range protocols {
		all := true
		for _, m := range g.members {
			if !m.hasProtocol(p.Name) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func (m *member) hasProtocol(name string) bool {
	for _, p := range m.protocols {
		if p.Name == name {
			return true
		}
	}
	return false
}

func newMemberID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	if prefix == "" {
		prefix = "member"
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

// join handles a JoinGroup on the locked group. It returns the response
// when it is known now, else the waiter the rebalance will answer.
func (g *group) join(req *kmsg.JoinGroupRequest, session, rebalance time.Duration, cl kafkaclient.Client) (kmsg.Response, *waiter) {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.MemberID = req.MemberID
	fail := func(code int16) (kmsg.Response, *waiter) {
		resp.ErrorCode = code
		return resp, nil
	}
	if !g.protocolsMatch(req.ProtocolType, req.Protocols) {
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	newMember := func(id string) *member {
		return &member{id: id, instanceID: req.InstanceID, clientID: cl.ID, clientHost: cl.Host,
			session: session, rebalance: rebalance, protocols: req.Protocols}
	}
	if req.MemberID == "" {
		if req.InstanceID != nil {
			if old, ok := g.static[*req.InstanceID]; ok {
				return g.replaceStatic(req, old, newMember)
			}
		}
		if len(g.members)+len(g.pending) >= g.c.cfg.MaxGroupSize {
			return fail(kerr.GroupMaxSizeReached.Code)
		}
		prefix := cl.ID
		if req.InstanceID != nil {
			prefix = *req.InstanceID
		}
		id := newMemberID(prefix)
		if req.Version >= 4 && req.InstanceID == nil {
			// KIP-394: the member learns its ID first and joins with it,
			// so that a client that times out and retries is one member.
			g.pending[id] = time.AfterFunc(session, func() {
				g.mu.Lock()
				defer g.mu.Unlock()
				delete(g.pending, id)
			})
			resp.MemberID = id
			return fail(kerr.MemberIDRequired.Code)
		}
		return g.joinNew(newMember(id), req)
	}
	if req.InstanceID != nil {
		if code := g.checkInstance(req.InstanceID, req.MemberID); code != 0 {
			return fail(code)
		}
	}
	if t, ok := g.pending[req.MemberID]; ok {
		t.Stop()
		delete(g.pending, req.MemberID)
		return g.joinNew(newMember(req.MemberID), req)
	}
	m := g.members[req.MemberID]
	if m == nil {
		return fail(kerr.UnknownMemberID.Code)
	}
	switch g.state {
	case stateCompleting, stateStable:
		if m.sameProtocols(req.Protocols) && (g.state == stateCompleting || m.id != g.leader) {
			// Nothing changed: the answer of the current generation.
			g.startSession(m)
			return g.joinResponse(req, m), nil
		}
	case stateEmpty:
		return fail(kerr.UnknownMemberID.Code)
	}
	// A changed subscription, the leader asking for a new assignment, or
	// a join during a rebalance.
	m.protocols = req.Protocols
	m.session, m.rebalance = session, rebalance
	if m.join != nil {
		// An earlier JoinGroup of the same member still parked (its
		// connection is likely gone): this one replaces it.
		old := m.join.req.ResponseKind().(*kmsg.JoinGroupResponse)
		old.ErrorCode = kerr.RebalanceInProgress.Code
		old.MemberID = m.id
		m.join.ch <- old
	}
	w := newWaiter(req)
	m.join = w
	g.rebalance()
	return nil, w
}

func (g *group) joinNew(m *member, req *kmsg.JoinGroupRequest) (kmsg.Response, *waiter) {
	if len(g.members) == 0 {
		g.protocolType = req.ProtocolType
	}
	w := newWaiter(req)
	m.join = w
	g.addMember(m)
	g.rebalance()
	return nil, w
}

// replaceStatic handles a static member (group.instance.id) joining with
// no member ID while its instance is known: the new member replaces the
// old one (whose parked requests answer FENCED_INSTANCE_ID), keeping its
// assignment; a stable group with unchanged protocols does not rebalance
// (KIP-345), its leader learns to skip the assignment (KIP-814, v9).
func (g *group) replaceStatic(req *kmsg.JoinGroupRequest, oldID string, newMember func(string) *member) (kmsg.Response, *waiter) {
	old := g.members[oldID]
	id := newMemberID(*req.InstanceID)
	m := newMember(id)
	if old == nil {
		delete(g.static, *req.InstanceID)
		return g.joinNew(m, req)
	}
	m.assignment, m.seq = old.assignment, old.seq
	wasLeader := g.leader == oldID
	g.removeMember(old, kerr.FencedInstanceID.Code)
	g.addMember(m)
	if wasLeader {
		g.leader = id
	}
	if g.state == stateStable && old.sameProtocols(req.Protocols) && (!wasLeader || req.Version >= 9) {
		if code := g.save(stateStable); code != 0 {
			resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
			resp.ErrorCode = code
			return resp, nil
		}
		g.startSession(m)
		resp := g.joinResponse(req, m)
		resp.SkipAssignment = wasLeader
		return resp, nil
	}
	w := newWaiter(req)
	m.join = w
	g.rebalance()
	return nil, w
}

// checkInstance validates a static member's instance ID against its
// member ID: UNKNOWN_MEMBER_ID for an unknown instance, FENCED_INSTANCE_ID
// when another member holds it.
func (g *group) checkInstance(instanceID *string, memberID string) int16 {
	if instanceID == nil {
		return 0
	}
	id, ok := g.static[*instanceID]
	if !ok {
		return kerr.UnknownMemberID.Code
	}
	if id != memberID {
		return kerr.FencedInstanceID.Code
	}
	return 0
}

// syncGroup handles a SyncGroup on the locked group.
func (g *group) syncGroup(req *kmsg.SyncGroupRequest) (kmsg.Response, *waiter) {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	fail := func(code int16) (kmsg.Response, *waiter) {
		resp.ErrorCode = code
		return resp, nil
	}
	if code := g.checkInstance(req.InstanceID, req.MemberID); code != 0 {
		return fail(code)
	}
	m := g.members[req.MemberID]
	if m == nil {
		return fail(kerr.UnknownMemberID.Code)
	}
	if req.Generation != g.generation {
		return fail(kerr.IllegalGeneration.Code)
	}
	if (req.ProtocolType != nil && *req.ProtocolType != g.protocolType) || (req.Protocol != nil && *req.Protocol != g.protocol) {
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	switch g.state {
	case statePreparing:
		return fail(kerr.RebalanceInProgress.Code)
	case stateCompleting:
		if m.sync != nil {
			old := m.sync.req.ResponseKind().(*kmsg.SyncGroupResponse)
			old.ErrorCode = kerr.RebalanceInProgress.Code
			m.sync.ch <- old
		}
		w := newWaiter(req)
		m.sync = w
		delete(g.awaitingSync, m.id)
		g.startSession(m)
		if m.id == g.leader {
			g.completeSync(req.GroupAssignment)
		}
		return nil, w
	case stateStable:
		g.startSession(m)
		return g.syncResponse(req, m), nil
	default:
		return fail(kerr.UnknownMemberID.Code)
	}
}

// emptyConsumerAssignment is what a "consumer" member with no partitions
// gets: an assignment clients can decode.
var emptyConsumerAssignment = func() []byte {
	a := kmsg.NewConsumerMemberAssignment()
	return a.AppendTo(nil)
}()

// completeSync stores the leader's assignments and answers every parked
// SyncGroup: the group is stable.
func (g *group) completeSync(assignments []kmsg.SyncGroupRequestGroupAssignment) {
	for _, m := range g.members {
		m.assignment = nil
	}
	for _, a := range assignments {
		if m := g.members[a.MemberID]; m != nil {
			m.assignment = a.MemberAssignment
		}
	}
	for _, m := range g.members {
		if len(m.assignment) == 0 && g.protocolType == "consumer" {
			m.assignment = emptyConsumerAssignment
		}
	}
	if g.save(stateStable) != 0 {
		return
	}
	g.state = stateStable
	g.barrier++
	g.stopTimer(&g.syncTimer)
	g.awaitingSync = nil
	for _, m := range g.members {
		if m.sync != nil {
			m.sync.ch <- g.syncResponse(m.sync.req.(*kmsg.SyncGroupRequest), m)
			m.sync = nil
			g.startSession(m)
		}
	}
}

func (g *group) syncResponse(req *kmsg.SyncGroupRequest, m *member) *kmsg.SyncGroupResponse {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	resp.ProtocolType = kmsg.StringPtr(g.protocolType)
	resp.Protocol = kmsg.StringPtr(g.protocol)
	resp.MemberAssignment = m.assignment
	return resp
}

// heartbeat handles a Heartbeat on the locked group.
func (g *group) heartbeat(req *kmsg.HeartbeatRequest) int16 {
	if code := g.checkInstance(req.InstanceID, req.MemberID); code != 0 {
		return code
	}
	m := g.members[req.MemberID]
	if m == nil {
		return kerr.UnknownMemberID.Code
	}
	if req.Generation != g.generation {
		return kerr.IllegalGeneration.Code
	}
	switch g.state {
	case statePreparing:
		g.startSession(m)
		return kerr.RebalanceInProgress.Code
	case stateCompleting, stateStable:
		g.startSession(m)
		return 0
	default:
		return kerr.UnknownMemberID.Code
	}
}

// leave handles a LeaveGroup on the locked group: each member named (by
// member ID, or by instance ID for static members) leaves, and the group
// rebalances once.
func (g *group) leave(members []kmsg.LeaveGroupRequestMember) []kmsg.LeaveGroupResponseMember {
	out := make([]kmsg.LeaveGroupResponseMember, len(members))
	changed := false
	for i, rm := range members {
		r := kmsg.NewLeaveGroupResponseMember()
		r.MemberID, r.InstanceID = rm.MemberID, rm.InstanceID
		id := rm.MemberID
		if rm.InstanceID != nil {
			known, ok := g.static[*rm.InstanceID]
			switch {
			case !ok:
				r.ErrorCode = kerr.UnknownMemberID.Code
			case id != "" && id != known:
				r.ErrorCode = kerr.FencedInstanceID.Code
			}
			if r.ErrorCode != 0 {
				out[i] = r
				continue
			}
			id = known
			r.MemberID = id
		}
		if t, ok := g.pending[id]; ok {
			t.Stop()
			delete(g.pending, id)
		} else if m := g.members[id]; m != nil {
			g.removeMember(m, kerr.UnknownMemberID.Code)
			changed = true
		} else {
			r.ErrorCode = kerr.UnknownMemberID.Code
		}
		out[i] = r
	}
	if changed {
		g.c.log.Debug("kafka group: members left", "group", g.name)
		g.rebalance()
	}
	return out
}
