// Package kafkagroup is the coordinator of Kafka's classic consumer group
// protocol for pgmsg's Kafka listener (internal/kafkasrv): JoinGroup,
// SyncGroup, Heartbeat and LeaveGroup (the rebalance protocol, with the
// assignment computed by the clients' own assignors), OffsetCommit,
// OffsetFetch and OffsetDelete, ListGroups, DescribeGroups and
// DeleteGroups.
//
// A Kafka group's committed offsets are pgmsg's group cursors: group G
// committing for topic T moves the cursors of the pgmsg group (T, G), so
// `pgmsg group list`, the lag metrics and retention see them, and a native
// Consumer of G continues where the Kafka group committed (and the other
// way round: both mean "the next offset to read").
//
// What must outlive one process is in PostgreSQL (migration 016): each
// group's generation, protocol, leader and members with their metadata
// and assignments, written when a rebalance completes a step. A
// coordinator that starts, or that takes a group over from another
// `pgmsg serve`, continues from there. The rebalance barrier (the
// JoinGroup and SyncGroup requests waiting for the others) and the
// session and rebalance timers are in the coordinating process's memory.
package kafkagroup

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/store"
)

// Defaults of Config's bounds: Kafka's group.min.session.timeout.ms and
// group.max.session.timeout.ms, and a group size bound.
const (
	MinSessionTimeoutDefault = 6 * time.Second
	MaxSessionTimeoutDefault = 30 * time.Minute
	MaxGroupSizeDefault      = 10000
	// MaxMetadataBytesDefault is Kafka's offset.metadata.max.bytes.
	MaxMetadataBytesDefault = 4096
)

// revalidateAfter is how long a group may sit in memory before a member's
// request checks that no other process wrote it since (its version).
const revalidateAfter = 3 * time.Second

// Config configures a Coordinator.
type Config struct {
	// Client is the server's client: its pool and schema.
	Client *pgmsg.Client
	// Owns reports whether this process coordinates the group; when it
	// does not, requests about the group answer NOT_COORDINATOR. nil:
	// owns every group.
	Owns func(group string) bool
	// Authorize reports whether the request's principal (carried in ctx
	// by the listener) may do op ("read", "describe", "delete") on the
	// resource (kind "group" or "topic", name). nil: everything allowed.
	Authorize func(ctx context.Context, kind, name, op string) bool
	// Logger receives the coordinator's events. nil: discarded.
	Logger *slog.Logger

	// MinSessionTimeout and MaxSessionTimeout bound the session timeout a
	// member may ask for (INVALID_SESSION_TIMEOUT outside). Zero:
	// MinSessionTimeoutDefault (6s), MaxSessionTimeoutDefault (30m).
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// MaxGroupSize bounds a group's members, joined or about to
	// (GROUP_MAX_SIZE_REACHED). Zero: MaxGroupSizeDefault.
	MaxGroupSize int
	// MaxMetadataBytes bounds a commit's metadata string
	// (OFFSET_METADATA_TOO_LARGE). Zero: MaxMetadataBytesDefault.
	MaxMetadataBytes int
}

// Coordinator answers the group APIs. Handle is given a decoded request
// whose version is set; it returns the response of the same kind, with
// its version set to the request's. An error return means the connection
// is closed (a cancelled context), never a client's mistake: those are
// Kafka error codes in the response.
type Coordinator struct {
	cfg   Config
	store *store.Store
	pool  *pgxpool.Pool
	log   *slog.Logger

	// ctx is what timers run their statements with; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	groups map[string]*group
	closed bool
	swept  chan struct{} // closed when the ownership sweep ended
}

// sweepEvery is how often the coordinator drops the groups it no longer
// owns (Config.Owns), answering their parked requests NOT_COORDINATOR so
// that their clients find the new coordinator at once.
const sweepEvery = time.Second

// New returns a Coordinator for cfg.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Client == nil {
		return nil, errors.New("kafkagroup: Config.Client is required")
	}
	if cfg.MinSessionTimeout == 0 {
		cfg.MinSessionTimeout = MinSessionTimeoutDefault
	}
	if cfg.MaxSessionTimeout == 0 {
		cfg.MaxSessionTimeout = MaxSessionTimeoutDefault
	}
	if cfg.MinSessionTimeout < 0 || cfg.MaxSessionTimeout < cfg.MinSessionTimeout {
		return nil, errors.New("kafkagroup: Config.MinSessionTimeout must be positive and at most MaxSessionTimeout")
	}
	if cfg.MaxGroupSize == 0 {
		cfg.MaxGroupSize = MaxGroupSizeDefault
	}
	if cfg.MaxGroupSize < 0 {
		return nil, errors.New("kafkagroup: Config.MaxGroupSize must not be negative")
	}
	if cfg.MaxMetadataBytes == 0 {
		cfg.MaxMetadataBytes = MaxMetadataBytesDefault
	}
	if cfg.MaxMetadataBytes < 0 {
		return nil, errors.New("kafkagroup: Config.MaxMetadataBytes must not be negative")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Coordinator{
		cfg: cfg, store: store.New(cfg.Client.Schema()), pool: cfg.Client.Pool(), log: log,
		ctx: ctx, cancel: cancel, groups: map[string]*group{}, swept: make(chan struct{}),
	}
	go c.sweep()
	return c, nil
}

// sweep drops, every sweepEvery, the groups this process no longer
// coordinates (another listener took them over: the cluster changed).
func (c *Coordinator) sweep() {
	defer close(c.swept)
	if c.cfg.Owns == nil {
		return
	}
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		names := make([]string, 0, len(c.groups))
		for name := range c.groups {
			names = append(names, name)
		}
		c.mu.Unlock()
		for _, name := range names {
			if !c.owns(name) {
				c.log.Info("kafka group: coordinated elsewhere now, copy dropped", "group", name)
				c.forget(name)
			}
		}
	}
}

// maxVersions are the versions served: the classic protocol's current
// ones, short of those that name topics by ID (OffsetCommit 10,
// OffsetFetch 10) or serve KIP-848 members (OffsetFetch 9).
var maxVersions = map[int16]int16{
	8:  9, // OffsetCommit
	9:  8, // OffsetFetch
	11: 9, // JoinGroup
	12: 4, // Heartbeat
	13: 5, // LeaveGroup
	14: 5, // SyncGroup
	15: 6, // DescribeGroups
	16: 5, // ListGroups
	42: 2, // DeleteGroups
	47: 0, // OffsetDelete
}

// Handles reports whether key is one of the group APIs.
func (c *Coordinator) Handles(key int16) bool {
	_, ok := maxVersions[key]
	return ok
}

// MaxVersion returns the highest version of key served (for ApiVersions),
// -1 for a key not handled.
func (c *Coordinator) MaxVersion(key int16) int16 {
	if v, ok := maxVersions[key]; ok {
		return v
	}
	return -1
}

// Handle answers req.
func (c *Coordinator) Handle(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	if v, ok := maxVersions[req.Key()]; !ok || req.GetVersion() > v {
		return nil, errors.New("kafkagroup: request not handled (key or version)")
	}
	var resp kmsg.Response
	var err error
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		resp, err = c.join(ctx, r)
	case *kmsg.SyncGroupRequest:
		resp, err = c.sync(ctx, r)
	case *kmsg.HeartbeatRequest:
		resp = c.heartbeat(ctx, r)
	case *kmsg.LeaveGroupRequest:
		resp = c.leave(ctx, r)
	case *kmsg.OffsetCommitRequest:
		resp = c.offsetCommit(ctx, r)
	case *kmsg.OffsetFetchRequest:
		resp = c.offsetFetch(ctx, r)
	case *kmsg.OffsetDeleteRequest:
		resp = c.offsetDelete(ctx, r)
	case *kmsg.ListGroupsRequest:
		resp = c.listGroups(ctx, r)
	case *kmsg.DescribeGroupsRequest:
		resp = c.describeGroups(ctx, r)
	case *kmsg.DeleteGroupsRequest:
		resp = c.deleteGroups(ctx, r)
	default:
		return nil, errors.New("kafkagroup: request not handled")
	}
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	resp.SetVersion(req.GetVersion())
	return resp, nil
}

// Close ends every timer and answers the requests waiting in a rebalance
// with NOT_COORDINATOR; the groups stay in PostgreSQL for the next
// coordinator.
func (c *Coordinator) Close() {
	c.mu.Lock()
	c.closed = true
	gs := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		gs = append(gs, g)
	}
	c.groups = map[string]*group{}
	c.mu.Unlock()
	c.cancel()
	<-c.swept
	for _, g := range gs {
		g.mu.Lock()
		g.drop(kerr.NotCoordinator.Code)
		g.mu.Unlock()
	}
}

var groupNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)

// validGroup reports whether name can be a group: pgmsg's group names
// (the cursors are pgmsg's), a subset of Kafka's.
func validGroup(name string) bool { return groupNameRE.MatchString(name) }

func (c *Coordinator) owns(group string) bool {
	return c.cfg.Owns == nil || c.cfg.Owns(group)
}

func (c *Coordinator) allowed(ctx context.Context, kind, name, op string) bool {
	return c.cfg.Authorize == nil || c.cfg.Authorize(ctx, kind, name, op)
}

// checkGroup returns the error code of a request about group before any
// state is read: INVALID_GROUP_ID, NOT_COORDINATOR or
// GROUP_AUTHORIZATION_FAILED (op on the group); 0 when it may proceed.
func (c *Coordinator) checkGroup(ctx context.Context, group, op string) int16 {
	if !validGroup(group) {
		return kerr.InvalidGroupID.Code
	}
	if !c.owns(group) {
		c.forget(group)
		return kerr.NotCoordinator.Code
	}
	if !c.allowed(ctx, "group", group, op) {
		return kerr.GroupAuthorizationFailed.Code
	}
	return 0
}

// forget drops the in-memory copy of a group this process no longer
// coordinates.
func (c *Coordinator) forget(name string) {
	c.mu.Lock()
	g := c.groups[name]
	if g != nil {
		delete(c.groups, name)
	}
	c.mu.Unlock()
	if g != nil {
		g.mu.Lock()
		g.drop(kerr.NotCoordinator.Code)
		g.mu.Unlock()
	}
}

// lock returns the group, loaded and locked (g.mu held), or an error code
// (NOT_COORDINATOR when its copy turned out stale, COORDINATOR_NOT_AVAILABLE
// when PostgreSQL could not be read).
func (c *Coordinator) lock(ctx context.Context, name string) (*group, int16) {
	for range 3 {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, kerr.NotCoordinator.Code
		}
		g := c.groups[name]
		if g == nil {
			g = newGroup(c, name)
			g.mu.Lock()
			c.groups[name] = g
			c.mu.Unlock()
			if err := g.load(ctx); err != nil {
				c.log.Warn("kafka group: load failed", "group", name, "err", err)
				c.remove(g)
				g.drop(kerr.CoordinatorNotAvailable.Code)
				g.mu.Unlock()
				return nil, kerr.CoordinatorNotAvailable.Code
			}
			return g, 0
		}
		c.mu.Unlock()
		g.mu.Lock()
		if g.dead {
			g.mu.Unlock()
			continue
		}
		if time.Since(g.checked) > revalidateAfter {
			v, err := c.store.KafkaGroupVersion(ctx, c.pool, name)
			if err != nil {
				g.mu.Unlock()
				return nil, kerr.CoordinatorNotAvailable.Code
			}
			if v != g.version {
				// Another process wrote the group since: this copy is
				// stale. Drop it; the client finds the coordinator again
				// and the next request loads what is there.
				c.log.Info("kafka group: written elsewhere, copy dropped", "group", name)
				c.remove(g)
				g.drop(kerr.NotCoordinator.Code)
				g.mu.Unlock()
				return nil, kerr.NotCoordinator.Code
			}
			g.checked = time.Now()
		}
		return g, 0
	}
	return nil, kerr.CoordinatorNotAvailable.Code
}

// remove takes g out of the map if it is still the group of its name.
func (c *Coordinator) remove(g *group) {
	c.mu.Lock()
	if c.groups[g.name] == g {
		delete(c.groups, g.name)
	}
	c.mu.Unlock()
}

// dbCtx bounds a statement run on behalf of a request or a timer.
func (c *Coordinator) dbCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 30*time.Second)
}
