// Package kafkasrv is pgmsg's Kafka listener: it speaks the Kafka wire
// protocol over TCP and answers with pgmsg's log, so that any Kafka client
// reads and writes pgmsg topics (docs/kafka.md). A Kafka topic is a pgmsg
// topic, a Kafka partition a pgmsg partition and a Kafka offset the pgmsg
// offset. Messages are franz-go's kmsg types; this package frames them,
// dispatches them by API key and version and answers the log's APIs
// (Produce, Fetch, ListOffsets, Metadata, topic administration); the group
// APIs go to Config.Groups (internal/kafkagroup).
package kafkasrv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/semaphore"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/logpublish"
	"github.com/pgmsg/pgmsg/internal/notifier"
	"github.com/pgmsg/pgmsg/internal/store"
)

// GroupHandler answers the group APIs (JoinGroup, SyncGroup, OffsetCommit
// ...); internal/kafkagroup's Coordinator is one. Handle returns the
// response of the request's kind with its version; an error closes the
// connection.
type GroupHandler interface {
	Handles(key int16) bool
	MaxVersion(key int16) int16
	Handle(ctx context.Context, req kmsg.Request) (kmsg.Response, error)
}

// Defaults of Config fields left zero.
const (
	// MaxRequestBytesDefault is Kafka's socket.request.max.bytes: the
	// largest request frame read; a larger one closes the connection
	// before anything of it is allocated.
	MaxRequestBytesDefault = 100 << 20
	// MaxInflightDefault is how many requests of one connection may be
	// read ahead of their responses.
	MaxInflightDefault = 16
	// MaxInflightBytesDefault is Config.MaxInflightBytes's default.
	MaxInflightBytesDefault = 512 << 20
	// MaxFetchWaitDefault is Config.MaxFetchWait's default.
	MaxFetchWaitDefault = 5 * time.Minute
	// FetchCooldownDefault is Config.FetchCooldown's default, the native
	// consumer's claim cooldown (pgmsg.ClaimCooldownDefault).
	FetchCooldownDefault = 20 * time.Millisecond
	// FetchCooldownMinRateDefault is Config.FetchCooldownMinRate's
	// default, in records per second (pgmsg.ClaimCooldownMinRateDefault).
	FetchCooldownMinRateDefault = 3000
	// ClusterIDDefault is the cluster id Metadata answers.
	ClusterIDDefault = "pgmsg"
)

// Config configures a Server.
type Config struct {
	// Client is the pgmsg client the listener reads and writes with
	// (its pool and schema). Required.
	Client *pgmsg.Client
	// Advertise is the host:port clients are told to connect to
	// (Metadata's broker). Default: the listener's own address.
	Advertise string
	// NodeID is the broker id of this listener. Default 0; with Cluster,
	// -1 takes the smallest node id no live listener holds.
	NodeID int32
	// Cluster registers the listener in the schema's broker registry
	// (kafka_broker), so that several processes on one database form one
	// Kafka cluster: Metadata lists the live ones, and partition
	// leadership and group coordination are spread over them. Default
	// false: this listener is the whole cluster.
	Cluster bool
	// SessionTimeout is how long a listener of the cluster stays listed
	// without renewing its registration (it renews every quarter of it).
	// Default SessionTimeoutDefault.
	SessionTimeout time.Duration
	// ClusterID is Metadata's cluster id. Default ClusterIDDefault.
	ClusterID string
	// Groups answers the group APIs. nil: they are not advertised, and a
	// request for one is answered with Kafka's error code.
	Groups GroupHandler
	// MaxRequestBytes is the largest request accepted, in bytes. Default
	// MaxRequestBytesDefault.
	MaxRequestBytes int32
	// MaxInflight is how many requests one connection may have read
	// ahead of their responses. Default MaxInflightDefault.
	MaxInflight int
	// MaxInflightBytes bounds the bytes of the requests read and not yet
	// answered, over all connections (Kafka's queued.max.request.bytes):
	// a connection waits before reading a request that does not fit.
	// Default MaxInflightBytesDefault; at least MaxRequestBytes.
	MaxInflightBytes int64
	// AutoCreateTopics creates a topic that Metadata (when the client
	// allows it) or Produce names and that does not exist, with
	// AutoCreatePartitions partitions (Kafka's auto.create.topics.enable).
	// Default false.
	AutoCreateTopics bool
	// AutoCreatePartitions is the partition count of auto-created topics.
	// Default 1.
	AutoCreatePartitions int
	// MaxFetchWait caps a Fetch's MaxWaitMillis. Default
	// MaxFetchWaitDefault.
	MaxFetchWait time.Duration
	// FetchCooldown is the least time between a connection's Fetch
	// answers when the later one was woken by a publish (the native
	// consumer's ClaimCooldown): a Fetch woken sooner waits until
	// FetchCooldown has passed since the previous answer, and what is
	// published meanwhile goes in the same answer, as long as the
	// connection has been receiving at least FetchCooldownMinRate records
	// a second. A Fetch never waits past its MaxWaitMillis for it, and one
	// that finds records when it arrives answers at once. Default
	// FetchCooldownDefault; negative: none.
	FetchCooldown time.Duration
	// FetchCacheBytes is how many bytes of records the listener keeps of
	// the partitions it answered Fetches of lately, so that the members of
	// several groups reading the same records read them from PostgreSQL
	// about once (as the native client's Config.RecordCacheBytes). Default
	// 64 MiB; negative: none.
	FetchCacheBytes int64
	// FetchCooldownMinRate is the rate, in records a second per partition
	// fetched, a connection's Fetch answers must carry for FetchCooldown
	// to hold: a Fetch of 4 partitions waits out the cooldown once its
	// connection receives 4 × FetchCooldownMinRate records a second, as
	// the native consumer, whose claims read one partition each, waits
	// once its claims return ClaimCooldownMinRate. The rate is measured
	// over windows of answers (logconsumer.RateMeter). Default
	// FetchCooldownMinRateDefault; negative: at any rate.
	FetchCooldownMinRate int
	// RequireAuth makes every connection authenticate with SASL/PLAIN
	// whose password is a pgmsg token's secret (pgmsg token create), or
	// SASL/SCRAM-SHA-256 or SCRAM-SHA-512 whose username is the token's
	// name and password its secret, before any request but ApiVersions,
	// and authorizes each request by the token's scopes (Authorize).
	// Default false: no authentication, every request allowed. Send PLAIN
	// over TLS only.
	RequireAuth bool
	// TokenRecheck is how often an authenticated connection's token is
	// verified again. Default TokenRecheckDefault.
	TokenRecheck time.Duration
	// TLS, when set, makes Serve speak TLS on every connection.
	TLS *tls.Config
	// Logger receives connection errors. Default slog.Default().
	Logger *slog.Logger
}

// Server is a Kafka listener over a pgmsg Client.
type Server struct {
	cfg    Config
	client *pgmsg.Client
	store  *store.Store
	// pub publishes idempotent producers' batches (SendSequenced) and
	// sends the wake-ups that follow their commits.
	pub    *logpublish.Publisher
	logger *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	closed    bool
	wg        sync.WaitGroup

	// adv is the advertised host and port: set by New from
	// Config.Advertise, else by the first Serve from its listener; read
	// by every connection and by the group coordinator (OwnsGroup).
	adv atomic.Pointer[broker]

	// recordSize is the average stored size of a record per topic
	// partition (tp -> int64), which sizes a Fetch's reads.
	registry     atomic.Pointer[registry]
	registryOnce sync.Once
	registryErr  error

	inflightBytes *semaphore.Weighted

	recordSize sync.Map
	// fetchCache is the records Fetch read lately (fetchcache.go).
	fetchCache fetchCache
	// notify wakes Fetches and counts the topics' wake-ups for parts
	// (partitions.go); nil when the client's notifications are disabled.
	notify     *notifier.Notifier
	parts      partitionsCache
	partQueues sync.Map // tp -> *partitionQueue (partqueue.go)
	topics     topicCache
	// epochs is the partitions' log epoch histories (epochs.go).
	epochs epochCache
}

// New returns a Server. Serve it on a listener.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("kafkasrv: Config.Client is required")
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = MaxRequestBytesDefault
	}
	if cfg.MaxRequestBytes < 0 {
		return nil, fmt.Errorf("kafkasrv: Config.MaxRequestBytes must be positive, got %d", cfg.MaxRequestBytes)
	}
	if cfg.MaxInflightBytes == 0 {
		cfg.MaxInflightBytes = max(MaxInflightBytesDefault, int64(cfg.MaxRequestBytes))
	}
	if cfg.MaxInflightBytes < int64(cfg.MaxRequestBytes) {
		return nil, fmt.Errorf("kafkasrv: Config.MaxInflightBytes (%d) must be at least MaxRequestBytes (%d)", cfg.MaxInflightBytes, cfg.MaxRequestBytes)
	}
	if cfg.MaxInflight == 0 {
		cfg.MaxInflight = MaxInflightDefault
	}
	if cfg.MaxInflight < 1 {
		return nil, fmt.Errorf("kafkasrv: Config.MaxInflight must be positive, got %d", cfg.MaxInflight)
	}
	if cfg.TokenRecheck <= 0 {
		cfg.TokenRecheck = TokenRecheckDefault
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = SessionTimeoutDefault
	}
	if cfg.SessionTimeout < 100*time.Millisecond {
		return nil, fmt.Errorf("kafkasrv: Config.SessionTimeout must be at least 100ms, got %v", cfg.SessionTimeout)
	}
	if cfg.NodeID < -1 || (cfg.NodeID == -1 && !cfg.Cluster) {
		return nil, fmt.Errorf("kafkasrv: Config.NodeID must be 0 or more (-1 with Cluster), got %d", cfg.NodeID)
	}
	if cfg.MaxFetchWait == 0 {
		cfg.MaxFetchWait = MaxFetchWaitDefault
	}
	if cfg.FetchCooldown == 0 {
		cfg.FetchCooldown = FetchCooldownDefault
	}
	if cfg.FetchCooldownMinRate == 0 {
		cfg.FetchCooldownMinRate = FetchCooldownMinRateDefault
	}
	if cfg.MaxFetchWait < 0 {
		return nil, fmt.Errorf("kafkasrv: Config.MaxFetchWait must not be negative, got %v", cfg.MaxFetchWait)
	}
	if cfg.ClusterID == "" {
		cfg.ClusterID = ClusterIDDefault
	}
	if cfg.AutoCreatePartitions == 0 {
		cfg.AutoCreatePartitions = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, client: cfg.Client, store: store.New(cfg.Client.Schema()), logger: cfg.Logger,
		inflightBytes: semaphore.NewWeighted(cfg.MaxInflightBytes),
		listeners:     map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}
	s.pub = logpublish.New(s.store, cfg.Client.Pool(), logpublish.Config{
		MetadataMaxAge: pgmsg.MetadataMaxAgeDefault, Channel: cfg.Client.Schema() + "_log", Logger: cfg.Logger,
		BackpressureTimeout: pgmsg.BackpressureTimeoutDefault,
	})
	s.notify = newNotifier(s)
	s.fetchCache.max = cfg.FetchCacheBytes
	if cfg.FetchCacheBytes == 0 {
		s.fetchCache.max = fetchCacheBytesDefault
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.topics.s = s
	if cfg.Advertise != "" {
		if err := s.setAdvertise(cfg.Advertise); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Server) setAdvertise(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("kafkasrv: advertised address %q: %w", addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return fmt.Errorf("kafkasrv: advertised address %q: bad port", addr)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	s.adv.Store(&broker{id: s.cfg.NodeID, host: host, port: int32(p)})
	return nil
}

// Serve accepts connections on ln until Close, and answers each. It
// returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	s.listeners[ln] = struct{}{}
	if s.adv.Load() == nil {
		if err := s.setAdvertise(ln.Addr().String()); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	s.mu.Unlock()
	if s.cfg.Cluster {
		s.registryOnce.Do(func() { s.registryErr = s.startRegistry() })
		if s.registryErr != nil {
			_ = ln.Close()
			return s.registryErr
		}
	}
	var tempDelay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				tempDelay = min(max(2*tempDelay, 5*time.Millisecond), time.Second)
				time.Sleep(tempDelay)
				continue
			}
			return err
		}
		tempDelay = 0
		if s.cfg.TLS != nil {
			nc = tls.Server(nc, s.cfg.TLS)
		}
		go s.ServeConn(nc)
	}
}

// ServeConn answers the requests of one connection until it closes, or
// the server does; it returns then. nc is closed when it returns.
func (s *Server) ServeConn(nc net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.conns[nc] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	newConn(s, nc).serve()
	s.mu.Lock()
	delete(s.conns, nc)
	s.mu.Unlock()
}

// Addr returns the advertised host:port (after Serve started when
// Config.Advertise is empty).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	host, port := s.advertised()
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// advertised returns the advertised host and port ("", 0 before Serve
// when Config.Advertise is empty).
func (s *Server) advertised() (string, int32) {
	if b := s.adv.Load(); b != nil {
		return b.host, b.port
	}
	return "", 0
}

// Close stops the listeners, closes every connection (ending long polls)
// and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	s.cancel()
	for ln := range s.listeners {
		_ = ln.Close()
	}
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.registryOnce.Do(func() {}) // no registry starts after Close
	if r := s.registry.Load(); r != nil {
		r.close()
	}
	s.pub.Close()
	if s.notify != nil {
		s.notify.Close()
	}
	return nil
}
