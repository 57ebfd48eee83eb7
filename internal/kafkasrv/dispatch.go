package kafkasrv

import (
	"context"
	"fmt"
	"net"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg/internal/kafkaclient"
)

var errUnsupportedVersion = kerr.UnsupportedVersion.Code

// served lists the API keys this package answers itself, with the
// versions it serves: the versions current clients use, each checked
// against what its handler fills in. Versions that name topics by id
// only (Produce 13, Fetch 13+) are not served.
var served = map[int16][2]int16{
	0:  {3, 12}, // Produce: record batch v2 (v3+)
	1:  {4, 12}, // Fetch
	2:  {1, 7},  // ListOffsets
	3:  {0, 12}, // Metadata
	10: {0, 4},  // FindCoordinator
	17: {0, 1},  // SaslHandshake (v1: SaslAuthenticate follows; v0 is answered UNSUPPORTED_VERSION, auth.go)
	18: {0, 3},  // ApiVersions
	19: {0, 7},  // CreateTopics
	20: {0, 6},  // DeleteTopics
	22: {0, 4},  // InitProducerId
	23: {0, 4},  // OffsetForLeaderEpoch
	32: {0, 4},  // DescribeConfigs
	36: {0, 2},  // SaslAuthenticate
	37: {0, 3},  // CreatePartitions
	44: {0, 1},  // IncrementalAlterConfigs
}

// groupKeys are the keys of the group APIs (Config.Groups).
var groupKeys = []int16{8, 9, 11, 12, 13, 14, 15, 16, 42, 47}

// versions returns the versions of key this listener serves.
func (s *Server) versions(key int16) (lo, hi int16, ok bool) {
	if v, ok := served[key]; ok {
		return v[0], v[1], true
	}
	if s.cfg.Groups != nil && s.cfg.Groups.Handles(key) {
		hi := s.cfg.Groups.MaxVersion(key)
		if req := kmsg.RequestForKey(key); req != nil && hi > req.MaxVersion() {
			hi = req.MaxVersion()
		}
		return 0, hi, true
	}
	if s.cfg.Groups == nil && isGroupKey(key) {
		// Not advertised, but answered (groupsUnavailable) at any version
		// kmsg reads.
		return 0, kmsg.RequestForKey(key).MaxVersion(), true
	}
	return 0, 0, false
}

// apiKeys is ApiVersions' list: every key served, in key order.
func (s *Server) apiKeys() []kmsg.ApiVersionsResponseApiKey {
	var keys []int16
	for k := range served {
		keys = append(keys, k)
	}
	if s.cfg.Groups != nil {
		for _, k := range groupKeys {
			if s.cfg.Groups.Handles(k) {
				keys = append(keys, k)
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(keys))
	for _, k := range keys {
		lo, hi, _ := s.versions(k)
		out = append(out, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: lo, MaxVersion: hi})
	}
	return out
}

// handle answers one decoded request. A nil response with a nil error
// sends nothing (acks=0 produce); an error closes the connection.
func (c *conn) handle(r *request) (kmsg.Response, error) {
	ctx := c.ctx
	switch req := r.req.(type) {
	case *kmsg.ApiVersionsRequest:
		return c.s.apiVersions(req), nil
	case *kmsg.SASLHandshakeRequest:
		return c.saslHandshake(req), nil
	case *kmsg.SASLAuthenticateRequest:
		return c.saslAuthenticate(ctx, req)
	}
	if c.s.cfg.RequireAuth {
		var err error
		if ctx, err = c.principalCtx(ctx); err != nil {
			return nil, err
		}
	}
	switch req := r.req.(type) {
	case *kmsg.MetadataRequest:
		return c.s.metadata(ctx, req)
	case *kmsg.ProduceRequest:
		// A produce read off the wire is carried out even if the client
		// hangs up meanwhile (an acks=0 producer closes at once): only
		// the server's Close cancels it. The context keeps the
		// connection's values (its principal).
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(c.s.ctx, cancel)
		defer stop()
		return c.produce(pctx, req, r.tickets)
	case *kmsg.FetchRequest:
		return c.s.fetch(ctx, req, &c.pace)
	case *kmsg.ListOffsetsRequest:
		return c.s.listOffsets(ctx, req)
	case *kmsg.OffsetForLeaderEpochRequest:
		return c.s.offsetForLeaderEpoch(ctx, req)
	case *kmsg.FindCoordinatorRequest:
		return c.s.findCoordinator(ctx, req), nil
	case *kmsg.InitProducerIDRequest:
		return c.s.initProducerID(ctx, req)
	case *kmsg.CreateTopicsRequest:
		return c.createTopics(ctx, req)
	case *kmsg.DeleteTopicsRequest:
		return c.deleteTopics(ctx, req)
	case *kmsg.CreatePartitionsRequest:
		return c.createPartitions(ctx, req)
	case *kmsg.DescribeConfigsRequest:
		return c.describeConfigs(ctx, req)
	case *kmsg.IncrementalAlterConfigsRequest:
		return c.incrementalAlterConfigs(ctx, req)
	}
	if c.s.cfg.Groups != nil && c.s.cfg.Groups.Handles(r.key) {
		// The coordinator shows who a group's members are
		// (DescribeGroups): the client.id and, as Kafka, "/" + host.
		host := c.nc.RemoteAddr().String()
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		ctx = kafkaclient.With(ctx, kafkaclient.Client{ID: r.clientID, Host: "/" + host})
		return c.s.cfg.Groups.Handle(ctx, r.req)
	}
	if resp := groupsUnavailable(r.req); resp != nil {
		return resp, nil
	}
	return nil, fmt.Errorf("kafkasrv: no handler for key %d", r.key)
}

func (s *Server) apiVersions(req *kmsg.ApiVersionsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = s.apiKeys()
	return resp
}

// findCoordinator answers this broker for every group (the broker
// registry spreads them when several listeners share a schema).
func (s *Server) findCoordinator(_ context.Context, req *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	answer := func(key string, keyType int8) (code int16, node int32, host string, port int32, msg *string) {
		if keyType != 0 { // transactions are not served
			m := "transactions are not supported"
			return kerr.TransactionalIDAuthorizationFailed.Code, -1, "", -1, &m
		}
		if s.cfg.Groups == nil {
			m := "consumer groups are not served by this listener"
			return kerr.CoordinatorNotAvailable.Code, -1, "", -1, &m
		}
		node, host, port = s.coordinatorFor(key)
		return 0, node, host, port, nil
	}
	if req.Version >= 4 {
		for _, k := range req.CoordinatorKeys {
			code, node, host, port, msg := answer(k, req.CoordinatorType)
			resp.Coordinators = append(resp.Coordinators, kmsg.FindCoordinatorResponseCoordinator{
				Key: k, NodeID: node, Host: host, Port: port, ErrorCode: code, ErrorMessage: msg})
		}
		return resp
	}
	resp.ErrorCode, resp.NodeID, resp.Host, resp.Port, resp.ErrorMessage = answer(req.CoordinatorKey, req.CoordinatorType)
	return resp
}

// coordinatorFor returns the broker that coordinates group.
func (s *Server) coordinatorFor(group string) (int32, string, int32) {
	b := s.cluster().coordinator(group)
	return b.id, b.host, b.port
}
