package kafkagroup

import (
	"context"
	"math"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg/internal/store"
)

// The group administration APIs: ListGroups, DescribeGroups and
// DeleteGroups. Kafka's groups here are the Kafka groups (kafka_group)
// and every other pgmsg group name: a group that only has cursors is an
// Empty group with protocol type "", as a Kafka group that only has
// committed offsets is.

// snapshot is a group's state as the admin APIs show it.
type snapshot struct {
	state        string
	protocolType string
	protocol     string
	members      []kmsg.DescribeGroupsResponseGroupMember
	hasMembers   bool
}

// memorySnapshot returns the state of name's group in memory, if loaded
// and alive.
func (c *Coordinator) memorySnapshot(name string) (snapshot, bool) {
	c.mu.Lock()
	g := c.groups[name]
	c.mu.Unlock()
	if g == nil {
		return snapshot{}, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dead {
		return snapshot{}, false
	}
	return g.snapshot(), true
}

func (g *group) snapshot() snapshot {
	s := snapshot{state: g.state.String(), protocolType: g.protocolType,
		hasMembers: len(g.members) > 0 || len(g.pending) > 0}
	if g.state == stateStable {
		s.protocol = g.protocol
	}
	for _, m := range g.sortedMembers() {
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.InstanceID, dm.ClientID, dm.ClientHost = m.id, m.instanceID, m.clientID, m.clientHost
		if g.state == stateStable {
			dm.ProtocolMetadata = m.metadataOf(g.protocol)
			dm.MemberAssignment = m.assignment
		}
		s.members = append(s.members, dm)
	}
	return s
}

func (c *Coordinator) listGroups(ctx context.Context, req *kmsg.ListGroupsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	dbctx, cancel := c.dbCtx(ctx)
	defer cancel()
	rows, err := c.store.KafkaGroupList(dbctx, c.pool)
	if err != nil {
		c.log.Warn("kafka group: list failed", "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	// Groups in memory that have no row yet (their first rebalance).
	c.mu.Lock()
	listed := map[string]bool{}
	for _, r := range rows {
		listed[r.Name] = true
	}
	for name := range c.groups {
		if !listed[name] {
			rows = append(rows, store.KafkaGroupListed{Name: name, State: "Empty"})
		}
	}
	c.mu.Unlock()
	typeOK := len(req.TypesFilter) == 0
	for _, t := range req.TypesFilter {
		typeOK = typeOK || strings.EqualFold(t, "classic")
	}
	if !typeOK {
		return resp
	}
	for _, r := range rows {
		if !validGroup(r.Name) || !c.owns(r.Name) || !c.allowed(ctx, "group", r.Name, "describe") {
			continue
		}
		st, pt := r.State, r.ProtocolType
		if s, ok := c.memorySnapshot(r.Name); ok {
			st, pt = s.state, s.protocolType
			if !s.hasMembers && !listed[r.Name] {
				continue // loaded for a request, nothing there
			}
		}
		if len(req.StatesFilter) > 0 {
			match := false
			for _, f := range req.StatesFilter {
				match = match || strings.EqualFold(f, st)
			}
			if !match {
				continue
			}
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = r.Name, pt, st, "classic"
		resp.Groups = append(resp.Groups, lg)
	}
	return resp
}

// ACL operation codes (Kafka's AclOperation) for DescribeGroups'
// authorized operations bit field.
const (
	aclRead     = 3
	aclDelete   = 6
	aclDescribe = 8
)

func (c *Coordinator) describeGroups(ctx context.Context, req *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, name := range req.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group = name
		dg.AuthorizedOperations = math.MinInt32
		if code := c.checkGroup(ctx, name, "describe"); code != 0 {
			dg.ErrorCode = code
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		s, code := c.describe(ctx, name)
		switch {
		case code != 0:
			dg.ErrorCode = code
		case s == nil:
			dg.State = "Dead"
			if req.Version >= 6 {
				dg.ErrorCode = kerr.GroupIDNotFound.Code
			}
		default:
			dg.State, dg.ProtocolType, dg.Protocol, dg.Members = s.state, s.protocolType, s.protocol, s.members
			if req.IncludeAuthorizedOperations {
				var ops int32
				for _, o := range []struct {
					bit int
					op  string
				}{{aclRead, "read"}, {aclDelete, "delete"}, {aclDescribe, "describe"}} {
					if c.allowed(ctx, "group", name, o.op) {
						ops |= 1 << o.bit
					}
				}
				dg.AuthorizedOperations = ops
			}
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

// describe returns name's state, nil when there is no such group.
func (c *Coordinator) describe(ctx context.Context, name string) (*snapshot, int16) {
	g, code := c.lock(ctx, name)
	if code != 0 {
		return nil, code
	}
	s := g.snapshot()
	known := g.version > 0 || s.hasMembers
	idle := !known
	g.mu.Unlock()
	if idle {
		// Not a Kafka group: loaded for this request only.
		c.removeIdle(g)
	}
	if known {
		return &s, 0
	}
	dbctx, cancel := c.dbCtx(ctx)
	defer cancel()
	exists, err := c.store.KafkaGroupExists(dbctx, c.pool, name)
	if err != nil {
		return nil, kerr.CoordinatorNotAvailable.Code
	}
	if !exists {
		return nil, 0
	}
	return &s, 0
}

// removeIdle forgets g if it still has nothing worth keeping in memory.
func (c *Coordinator) removeIdle(g *group) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dead || g.version > 0 || len(g.members) > 0 || len(g.pending) > 0 {
		return
	}
	c.remove(g)
	g.drop(kerr.NotCoordinator.Code)
}

func (c *Coordinator) deleteGroups(ctx context.Context, req *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, name := range req.Groups {
		dg := kmsg.NewDeleteGroupsResponseGroup()
		dg.Group = name
		dg.ErrorCode = c.checkGroup(ctx, name, "delete")
		if dg.ErrorCode == 0 {
			dg.ErrorCode = c.deleteGroup(ctx, name)
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

// deleteGroup deletes an empty group: its Kafka state and its offsets
// (the pgmsg groups of that name on every topic).
func (c *Coordinator) deleteGroup(ctx context.Context, name string) int16 {
	g, code := c.lock(ctx, name)
	if code != 0 {
		return code
	}
	defer g.mu.Unlock()
	if len(g.members) > 0 || len(g.pending) > 0 {
		return kerr.NonEmptyGroup.Code
	}
	dbctx, cancel := c.dbCtx(ctx)
	defer cancel()
	live, err := c.store.KafkaGroupNativeMembers(dbctx, c.pool, name)
	if err != nil {
		return kerr.CoordinatorNotAvailable.Code
	}
	if live {
		// A native Consumer of the group is running.
		return kerr.NonEmptyGroup.Code
	}
	found, err := c.store.KafkaGroupDelete(dbctx, c.pool, name)
	if err != nil {
		return kerr.CoordinatorNotAvailable.Code
	}
	c.remove(g)
	g.drop(kerr.NotCoordinator.Code)
	if !found {
		return kerr.GroupIDNotFound.Code
	}
	return 0
}
