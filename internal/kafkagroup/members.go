package kafkagroup

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg/internal/kafkaclient"
)

// The membership APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup. Each
// checks the group (name, coordinator, authorization: Read on the group),
// then runs on the locked group (group.go); JoinGroup and SyncGroup may
// wait for the rest of the group.

func ms(n int32) time.Duration { return time.Duration(n) * time.Millisecond }

func (c *Coordinator) join(ctx context.Context, req *kmsg.JoinGroupRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.MemberID = req.MemberID
	fail := func(code int16) (kmsg.Response, error) {
		resp.ErrorCode = code
		return resp, nil
	}
	if code := c.checkGroup(ctx, req.Group, "read"); code != 0 {
		return fail(code)
	}
	session := ms(req.SessionTimeoutMillis)
	if session < c.cfg.MinSessionTimeout || session > c.cfg.MaxSessionTimeout {
		return fail(kerr.InvalidSessionTimeout.Code)
	}
	rebalance := ms(req.RebalanceTimeoutMillis)
	if req.Version == 0 || rebalance <= 0 {
		rebalance = session
	}
	if req.ProtocolType == "" || len(req.Protocols) == 0 {
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	g, code := c.lock(ctx, req.Group)
	if code != 0 {
		return fail(code)
	}
	r, w := g.join(req, session, rebalance, kafkaclient.From(ctx))
	g.mu.Unlock()
	if w == nil {
		return r, nil
	}
	return wait(ctx, w)
}

// wait returns the answer to a parked request, or ctx's error when the
// connection goes first (the rebalance answers into the buffered channel
// anyway).
func wait(ctx context.Context, w *waiter) (kmsg.Response, error) {
	select {
	case r := <-w.ch:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *Coordinator) sync(ctx context.Context, req *kmsg.SyncGroupRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	if code := c.checkGroup(ctx, req.Group, "read"); code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
	g, code := c.lock(ctx, req.Group)
	if code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
	r, w := g.syncGroup(req)
	g.mu.Unlock()
	if w == nil {
		return r, nil
	}
	return wait(ctx, w)
}

func (c *Coordinator) heartbeat(ctx context.Context, req *kmsg.HeartbeatRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	if code := c.checkGroup(ctx, req.Group, "read"); code != 0 {
		resp.ErrorCode = code
		return resp
	}
	g, code := c.lock(ctx, req.Group)
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	resp.ErrorCode = g.heartbeat(req)
	g.mu.Unlock()
	return resp
}

func (c *Coordinator) leave(ctx context.Context, req *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	members := req.Members
	if req.Version < 3 {
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = req.MemberID
		members = []kmsg.LeaveGroupRequestMember{m}
	}
	if code := c.checkGroup(ctx, req.Group, "read"); code != 0 {
		resp.ErrorCode = code
		return resp
	}
	g, code := c.lock(ctx, req.Group)
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	out := g.leave(members)
	g.mu.Unlock()
	if req.Version < 3 {
		resp.ErrorCode = out[0].ErrorCode
	} else {
		resp.Members = out
	}
	return resp
}
