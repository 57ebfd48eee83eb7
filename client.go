package pgmsg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgmsg/pgmsg/internal/maintenance"
	"github.com/pgmsg/pgmsg/internal/notifier"
	"github.com/pgmsg/pgmsg/internal/queue"
	"github.com/pgmsg/pgmsg/internal/schemaname"
	"github.com/pgmsg/pgmsg/internal/store"
)

// Defaults for Config fields left zero.
const (
	SchemaDefault          = schemaname.Default
	ClaimLeaseDefault      = 30 * time.Second
	PollIntervalDefault    = time.Second
	MetadataMaxAgeDefault  = 5 * time.Second
	ClaimMaxRecordsDefault = 100
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
	// to consumer (tracing.go). Default nil: no tracing, no header added.
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

	metaMu sync.Mutex
	meta   map[string]topicMeta

	// leader takes part in maintenance leader election (RunMaintenance).
	leader maintenance.Elector

	notifyOnce sync.Once
	notifier   *notifier.Notifier

	// Post-commit work (afterCommit): topics waiting to be notified,
	// partitions whose segments ahead run low, and the goroutine that
	// handles them.
	sendMu      sync.Mutex
	sendPending map[string]struct{}
	segPending  map[topicPartition]struct{}
	sendKick    chan struct{}
	sendStop    chan struct{}
	sendDone    chan struct{}

	// queues is the job queue's engine (internal/queue).
	queues *queue.Queues

	// claimSegments: the segment table that held each partition's last
	// direct claim (topicPartition -> relname), which the next claim reads
	// its records from in the same statement (claimRow).
	claimSegments sync.Map

	// replicas are Config.ReadReplicas (nil when none).
	replicas *replicaSet
}

type topicMeta struct {
	partitions     int
	maxRecordBytes int
	// backpressure: the topic has max_lag_records or max_lag_bytes, which
	// only publish() enforces (the store's direct publish statement leaves such topics to it).
	backpressure bool
	fetched      time.Time
}

// BackpressureTimeoutDefault is how long publishes wait on a topic's
// max_lag_records or max_lag_bytes before failing, unless its
// backpressure_timeout_ms says (and enqueues on a full queue, unless its
// BackpressureTimeout says).
const BackpressureTimeoutDefault = 5 * time.Second

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
	return &Client{
		pool:     pool,
		config:   cfg,
		store:    st,
		queues:   newQueues(st, pool, cfg),
		meta:     map[string]topicMeta{},
		replicas: newReplicaSet(cfg.ReadReplicas, cfg.ReplicaMaxWait),
	}, nil
}

// Pool returns the pool the client uses.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Schema returns the schema the client works in.
func (c *Client) Schema() string { return c.config.Schema }

// Close stops the client's background goroutines (notification listener
// and sender), if started. It does not close the pool.
func (c *Client) Close() {
	if c.notifier != nil {
		c.notifier.Close()
	}
	c.sendMu.Lock()
	stop, done := c.sendStop, c.sendDone
	c.sendStop = nil
	c.sendMu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// afterCommit queues the work that follows a committed publish of b, done
// by one goroutine per client outside any publishing transaction:
//
//   - notify (when asked): wake consumers of the topic. Notifying inside
//     the publishing transaction would make its commit take PostgreSQL's
//     cluster-wide notify lock through the WAL flush, serialising the
//     commits of all publishers. Pending topics go out in one statement,
//     at most one in flight; a notification lost because the process dies
//     is only a later wake-up (consumers poll).
//   - segment_ensure for a partition whose segments ahead run low, in its
//     own transaction (creating segments inside publishing transactions
//     can deadlock multi-partition publishes).
func (c *Client) afterCommit(b *partitionBatch, notify bool) {
	notify = notify && !c.config.DisableNotify
	if !notify && !b.segmentsLow {
		return
	}
	c.sendMu.Lock()
	if c.sendPending == nil {
		c.sendPending = map[string]struct{}{}
		c.segPending = map[topicPartition]struct{}{}
		c.sendKick = make(chan struct{}, 1)
		c.sendStop = make(chan struct{})
		c.sendDone = make(chan struct{})
		go c.sendNotifications(c.sendStop, c.sendDone)
	}
	if notify {
		// "topic#partition": only the consumers of that partition wake up
		// (internal/notifier); SQL publish() notifies the whole topic.
		c.sendPending[wakeKey(b.topic, b.partition)] = struct{}{}
	}
	if b.segmentsLow {
		c.segPending[topicPartition{b.topic, b.partition}] = struct{}{}
	}
	c.sendMu.Unlock()
	select {
	case c.sendKick <- struct{}{}:
	default:
	}
}

func (c *Client) sendNotifications(stop, done chan struct{}) {
	defer close(done)
	channel := c.config.Schema + "_log"
	for {
		select {
		case <-stop:
			return
		case <-c.sendKick:
		}
		c.sendMu.Lock()
		topics := make([]string, 0, len(c.sendPending))
		for t := range c.sendPending {
			topics = append(topics, t)
		}
		clear(c.sendPending)
		segs := make([]topicPartition, 0, len(c.segPending))
		for tp := range c.segPending {
			segs = append(segs, tp)
		}
		clear(c.segPending)
		c.sendMu.Unlock()
		if len(topics) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := c.store.NotifyTopics(ctx, c.pool, channel, topics)
			cancel()
			if err != nil {
				c.config.Logger.Debug("pgmsg: publish notification not sent; consumers will poll", "error", err)
			}
		}
		busy := false
		for _, tp := range segs {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			n, err := c.store.SegmentEnsure(ctx, c.pool, tp.topic, tp.partition)
			cancel()
			switch {
			case errors.Is(err, ErrUnknownTopic), errors.Is(err, ErrPartitionOutOfRange):
				// The topic was deleted meanwhile: nothing to do.
			case err != nil:
				c.config.Logger.Warn("pgmsg: creating segments ahead failed; publishers create them when needed",
					"topic", tp.topic, "partition", tp.partition, "error", err)
			case n < 0:
				// A publisher holds the partition's counter row: try again.
				busy = true
				c.sendMu.Lock()
				c.segPending[tp] = struct{}{}
				c.sendMu.Unlock()
			}
		}
		if busy {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			select {
			case c.sendKick <- struct{}{}:
			default:
			}
		}
	}
}

// DBTX is what every Xxx/XxxTx pair runs on: a pool, a connection or a
// pgx.Tx.
type DBTX = store.DBTX

// topicMeta returns the cached partition count and record limit of a topic,
// refreshing it when older than MetadataMaxAge (or when refresh is set).
func (c *Client) topicMeta(ctx context.Context, exec DBTX, topic string, refresh bool) (topicMeta, error) {
	c.metaMu.Lock()
	m, ok := c.meta[topic]
	c.metaMu.Unlock()
	if ok && !refresh && time.Since(m.fetched) < c.config.MetadataMaxAge {
		return m, nil
	}
	row, err := c.store.TopicSettings(ctx, exec, topic) // PM003, PM001 from SQL
	if err != nil {
		return topicMeta{}, err
	}
	m = topicMeta{partitions: int(row.Partitions), maxRecordBytes: int(row.MaxRecordBytes), fetched: time.Now()}
	var settings struct {
		MaxLagRecords json.RawMessage `json:"max_lag_records"`
		MaxLagBytes   json.RawMessage `json:"max_lag_bytes"`
	}
	if err := json.Unmarshal(row.Config, &settings); err != nil {
		m.backpressure = true // publish() reads the settings itself
	} else {
		m.backpressure = settings.MaxLagRecords != nil || settings.MaxLagBytes != nil
	}
	c.metaMu.Lock()
	c.meta[topic] = m
	c.metaMu.Unlock()
	return m, nil
}

func (c *Client) forgetTopic(topic string) {
	c.metaMu.Lock()
	delete(c.meta, topic)
	c.metaMu.Unlock()
}

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

// partitionWakeups returns a subscription whose keys the caller sets to
// "topic#partition" for the partitions it reads, or nil when notifications
// are disabled.
func (c *Client) partitionWakeups() *notifier.Subscription {
	if c.config.DisableNotify {
		return nil
	}
	return c.listener().NewSubscription()
}

// RecordWakeups returns a channel that receives a signal (coalesced: at most
// one pending) when records are published to any of topics, or when the
// notification listener reconnects, and a function that ends the
// subscription. Subscribe before checking for records, then wait, to never
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
