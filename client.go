package pgmsg

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgmsg/pgmsg/internal/logconsumer"
	"github.com/pgmsg/pgmsg/internal/logpublish"
	"github.com/pgmsg/pgmsg/internal/logread"
	"github.com/pgmsg/pgmsg/internal/maintenance"
	"github.com/pgmsg/pgmsg/internal/notifier"
	"github.com/pgmsg/pgmsg/internal/queue"
	"github.com/pgmsg/pgmsg/internal/schemaname"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/internal/telemetry"
)

// Defaults for Config fields left zero.
const (
	SchemaDefault          = schemaname.Default
	ClaimLeaseDefault      = 30 * time.Second
	PollIntervalDefault    = time.Second
	MetadataMaxAgeDefault  = 5 * time.Second
	ClaimMaxRecordsDefault = 100
	// ClaimMaxRecordsGrowMax is how far a Consumer left at the default
	// claim cap grows it while its claims come back full
	// (ClaimOpts.MaxRecords).
	ClaimMaxRecordsGrowMax = 1000
)

// Config configures a Client. The zero value is valid: every field
// documents its default.
type Config struct {
	// Schema pgmsg was migrated into. Default "pgmsg".
	Schema string
	// ClaimLease is how long a claim stays with its member before its records
	// are delivered again, measured on the database clock. Default 30s.
	ClaimLease time.Duration
	// PollInterval is how often an idle consumer polls when no notification
	// wakes it. Polling is the correctness path; notifications only make
	// delivery faster. Default 1s.
	PollInterval time.Duration
	// MetadataMaxAge is how long the client trusts its cached partition count
	// of a topic when choosing partitions. Default 5s.
	MetadataMaxAge time.Duration
	// DisableNotify turns off LISTEN/NOTIFY wake-ups (consumers only poll),
	// for poolers such as PgBouncer in transaction mode. Default false.
	DisableNotify bool
	// Logger receives warnings such as a lost notification connection.
	// Default slog.Default().
	Logger *slog.Logger
	// TracerProvider turns on OpenTelemetry tracing: publish and process
	// spans, and W3C trace context carried in record headers from producer
	// to consumer (internal/telemetry). Default nil: no tracing, no header added.
	TracerProvider trace.TracerProvider
	// ReadReplicas are pools on streaming replicas of the database (each
	// with the same schema, read-only). When set, consumers read claimed
	// records from a replica that has replayed them and fall back to the
	// primary otherwise; claims, commits and cursors stay on the pool
	// given to NewClient (replica.go, docs/operations.md). The caller owns
	// the pools. Default none.
	ReadReplicas []*pgxpool.Pool
	// ReplicaMaxWait is how long reading a claim waits for a lagging
	// replica before it reads from the primary. Default 100ms.
	ReplicaMaxWait time.Duration
	// ClaimGatherWait is how long a consumer's claim of a partition waits
	// for the claims that the client's consumers of other groups are
	// about to make of the same partition (they are woken together), so
	// that all of them go out as one statement and the records cross the
	// wire once. Each group keeps its own claim, epoch and lease. A claim
	// waits only while other groups of this client have claimed the
	// partition within the last second. Default 1ms; negative: claims are
	// never gathered; at most one minute.
	ClaimGatherWait time.Duration
	// RecordCacheBytes is how many bytes of records the client keeps of
	// the partitions that its consumers of several groups read, so that
	// the records a claim of one group read are not read again for
	// another group's claim of them (gathered or not): each record of
	// such a partition crosses the wire about once for all the groups.
	// Each claim still gets its own copies. Default 64 MiB; negative: no
	// cache.
	RecordCacheBytes int64
	// ConsumerClaimRate is a budget of claims a second that the client's
	// consumers share (the claims of Run and Poll: each is a transaction
	// whose cost to the server hardly depends on how many records it
	// returns). It holds only while more than 20 of them are busy (have
	// received records within the last one to two seconds) and their
	// claims together have reached it (a second of at least
	// ConsumerClaimRate claims; it lets go after a second of fewer than
	// half as many): each consumer then waits busy/ConsumerClaimRate
	// after its previous claim before it claims for a wake-up (or its
	// ClaimCooldown, if longer; at any rate of records), so that together
	// they make about ConsumerClaimRate claims a second and each claim
	// takes what arrived meanwhile, for up to that wait's latency. 1,000
	// groups each reading 1,000 records a second then keep up on two
	// cores, where claiming at every wake-up does not (docs/benchmarks.md,
	// "Many groups"). A claim that may have left records behind is still
	// followed by the next at once; a change of a consumer's partitions
	// ends its wait. Default ConsumerClaimRateDefault (1,000 claims a
	// second); negative: no budget; at most ConsumerClaimRateMax.
	ConsumerClaimRate int
}

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.Schema == "" {
		out.Schema = SchemaDefault
	}
	if out.ClaimLease == 0 {
		out.ClaimLease = ClaimLeaseDefault
	}
	if out.PollInterval == 0 {
		out.PollInterval = PollIntervalDefault
	}
	if out.MetadataMaxAge == 0 {
		out.MetadataMaxAge = MetadataMaxAgeDefault
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.ReplicaMaxWait == 0 {
		out.ReplicaMaxWait = ReplicaMaxWaitDefault
	}
	if out.ClaimGatherWait == 0 {
		out.ClaimGatherWait = ClaimGatherWaitDefault
	}
	if out.RecordCacheBytes == 0 {
		out.RecordCacheBytes = RecordCacheBytesDefault
	}
	if out.ConsumerClaimRate == 0 {
		out.ConsumerClaimRate = ConsumerClaimRateDefault
	}
	return &out
}

func (c *Config) validate() error {
	if err := schemaname.Validate(c.Schema); err != nil {
		return fmt.Errorf("pgmsg: Config.Schema: %w", err)
	}
	if c.ClaimLease < 0 {
		return fmt.Errorf("pgmsg: Config.ClaimLease must not be negative, got %s", c.ClaimLease)
	}
	if c.PollInterval < 0 {
		return fmt.Errorf("pgmsg: Config.PollInterval must not be negative, got %s", c.PollInterval)
	}
	if c.MetadataMaxAge < 0 {
		return fmt.Errorf("pgmsg: Config.MetadataMaxAge must not be negative, got %s", c.MetadataMaxAge)
	}
	if c.ReplicaMaxWait < 0 {
		return fmt.Errorf("pgmsg: Config.ReplicaMaxWait must not be negative, got %s", c.ReplicaMaxWait)
	}
	if c.ClaimGatherWait > time.Minute {
		return fmt.Errorf("pgmsg: Config.ClaimGatherWait must be at most 1m, got %s", c.ClaimGatherWait)
	}
	if c.ConsumerClaimRate > ConsumerClaimRateMax {
		return newError(ErrInvalidArgument, "Config.ConsumerClaimRate must be at most %d claims a second (negative: no budget), got %d",
			ConsumerClaimRateMax, c.ConsumerClaimRate)
	}
	for i, p := range c.ReadReplicas {
		if p == nil {
			return fmt.Errorf("pgmsg: Config.ReadReplicas[%d] is nil", i)
		}
	}
	return nil
}

// Client is pgmsg's entry point: publish, consume and administer topics
// over a pgx pool that the caller owns. It is safe for concurrent use.
type Client struct {
	pool   *pgxpool.Pool
	config *Config
	// store runs every statement (internal/store).
	store *store.Store
	// heartbeats sends the group heartbeats of this client's members
	// (Heartbeat, consumers) together.
	heartbeats *store.Heartbeats

	// publisher is the publish path's engine (internal/logpublish): the
	// topic metadata cache and the post-commit work.
	publisher *logpublish.Publisher

	// leader takes part in maintenance leader election (RunMaintenance).
	leader maintenance.Elector

	notifyOnce sync.Once
	notifier   *notifier.Notifier

	// queues is the job queue's engine (internal/queue).
	queues *queue.Queues

	// reader makes claims and reads their records (internal/logread),
	// with the segment cache of the direct claims and the read replicas.
	reader *logread.Reader

	// tracer is handed to every engine, which opens its own spans
	// (internal/telemetry; nil when Config.TracerProvider is not set).
	tracer *telemetry.Tracer

	// totals is LogTotals's last answer, brought up to date on each call.
	totals totalsCache

	// claimPacer is the claim budget of the client's consumers
	// (Config.ConsumerClaimRate; nil: none).
	claimPacer *logconsumer.ClaimPacer
}

// topicMeta is what the root's callers of Client.topicMeta read of a
// topic's cached metadata (logpublish.TopicMeta).
type topicMeta struct {
	partitions     int
	maxRecordBytes int
}

// BackpressureTimeoutDefault is how long publishes wait on a topic's
// max_lag_records or max_lag_bytes before failing, unless its
// backpressure_timeout_ms says (and enqueues on a full queue, unless its
// BackpressureTimeout says).
const BackpressureTimeoutDefault = 5 * time.Second

// ClaimGatherWaitDefault is Config.ClaimGatherWait's default.
const ClaimGatherWaitDefault = time.Millisecond

// RecordCacheBytesDefault is Config.RecordCacheBytes's default.
const RecordCacheBytesDefault = 64 << 20

// ConsumerClaimRateDefault is Config.ConsumerClaimRate's default, in
// claims a second; ConsumerClaimRateMax its largest value (the budget
// would space 20 consumers' claims by 20µs, below what timers keep).
const (
	ConsumerClaimRateDefault = 1000
	ConsumerClaimRateMax     = 1_000_000
)

// NewClient returns a Client using pool. config may be nil for defaults.
// The schema must have been migrated (pgmsgmigrate or `pgmsg migrate up`).
func NewClient(pool *pgxpool.Pool, config *Config) (*Client, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgmsg: NewClient: pool is nil")
	}
	cfg := config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	st := store.New(cfg.Schema)
	tracer := telemetry.New(cfg.TracerProvider)
	return &Client{
		pool:       pool,
		config:     cfg,
		store:      st,
		heartbeats: store.NewHeartbeats(st, pool, store.HeartbeatLinger),
		tracer:     tracer,
		claimPacer: logconsumer.NewClaimPacer(float64(cfg.ConsumerClaimRate)),
		queues:     newQueues(st, pool, cfg, tracer),
		reader: logread.New(&logread.Config{
			Store: st, Primary: pool, Replicas: cfg.ReadReplicas, ReplicaMaxWait: cfg.ReplicaMaxWait,
			LeaseMax: durationMax, Logger: cfg.Logger, GatherWait: max(cfg.ClaimGatherWait, 0),
			RecordCacheBytes: max(cfg.RecordCacheBytes, 0), Tracer: tracer, SendableNames: sendableClaimNames,
		}),
		publisher: logpublish.New(st, pool, logpublish.Config{
			MetadataMaxAge:      cfg.MetadataMaxAge,
			DisableNotify:       cfg.DisableNotify,
			Channel:             cfg.Schema + "_log",
			Logger:              cfg.Logger,
			BackpressureTimeout: BackpressureTimeoutDefault,
			CheckTime:           checkTime,
			Tracer:              tracer,
		}),
	}, nil
}

// Pool returns the pool the client uses.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Schema returns the schema the client works in.
func (c *Client) Schema() string { return c.config.Schema }

// NotifyDisabled reports whether Config.DisableNotify is set: the client
// then opens no LISTEN connection and its RecordWakeups and JobWakeups
// channels are nil. Asking starts nothing.
func (c *Client) NotifyDisabled() bool { return c.config.DisableNotify }

// Close stops the client's background goroutines (notification listener
// and sender), if started. It does not close the pool.
func (c *Client) Close() {
	if c.notifier != nil {
		c.notifier.Close()
	}
	c.publisher.Close()
}

// DBTX is what every Xxx/XxxTx pair runs on: a pool, a connection or a
// pgx.Tx.
type DBTX = store.DBTX

// topicMeta returns the cached partition count and record limit of a topic,
// refreshing it when older than MetadataMaxAge (or when refresh is set).
func (c *Client) topicMeta(ctx context.Context, exec DBTX, topic string, refresh bool) (topicMeta, error) {
	m, err := c.publisher.TopicMeta(ctx, exec, topic, refresh)
	return topicMeta{partitions: m.Partitions, maxRecordBytes: m.MaxRecordBytes}, err
}

func (c *Client) forgetTopic(topic string) { c.publisher.ForgetTopic(topic) }

// wakeups subscribes to publish notifications for keys (topic names, or
// "queue:"+name for queues). The channel also fires when the listener
// reconnects (notifications may have been lost). It returns a nil channel
// when notifications are disabled.
func (c *Client) wakeups(keys ...string) (<-chan struct{}, func()) {
	if c.config.DisableNotify {
		return nil, func() {}
	}
	return c.listener().Subscribe(keys...)
}

// listener starts the client's one LISTEN connection on first use.
func (c *Client) listener() *notifier.Notifier {
	c.notifyOnce.Do(func() {
		c.notifier = notifier.New(c.pool.Config().ConnConfig, c.config.Schema+"_log", c.config.Logger)
	})
	return c.notifier
}

// partitionWakeups returns a subscription whose keys the caller sets (to
// "topic#partition" for the partitions it reads, or to its group's
// notifier.GroupKey), or nil when notifications are disabled.
func (c *Client) partitionWakeups() *notifier.Subscription {
	if c.config.DisableNotify {
		return nil
	}
	return c.listener().NewSubscription()
}

// RecordWakeups returns a channel that receives a signal (coalesced: at most
// one pending) when records are published to any of topics, or when the
// notification listener reconnects, and a function that ends the
// subscription. A name of the form "topic#partition" subscribes to that
// one partition: it is woken by a publish to the partition (or by one that
// names only the topic, as SQL publish() does), not by one to the topic's
// other partitions. Subscribe before checking for records, then wait, to never
// miss a publish. The channel is nil (never fires) when
// Config.DisableNotify is set: always wait with a timeout as well.
func (c *Client) RecordWakeups(topics ...string) (<-chan struct{}, func()) {
	return c.wakeups(topics...)
}

// JobWakeups is RecordWakeups for jobs enqueued (or made available) on queues.
func (c *Client) JobWakeups(queues ...string) (<-chan struct{}, func()) {
	keys := make([]string, len(queues))
	for i, q := range queues {
		keys[i] = "queue:" + q
	}
	return c.wakeups(keys...)
}
