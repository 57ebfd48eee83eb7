// Package logpublish is the engine behind publishing to the log
// (pgmsg.Client's Publish, PublishTx, PublishIdempotent, and the batches
// of a pgmsg.Producer): the topic metadata cache (partition count, record
// limit, whether the topic has backpressure settings), the plan of a call
// (records checked and grouped into per-partition batches in the lock
// order every publisher uses, keys hashed with Kafka's murmur2, unkeyed
// records spread, an idempotent call's sequences), one batch's statement
// (the store's direct statement, publish() or publish_idempotent()),
// several batches pipelined in one transaction, the retries on
// backpressure and on a segment routing race, and the work that follows a
// commit (one goroutine notifying consumers and creating segments ahead).
//
// It opens the "publish" span of a call (Publish, PublishTx), which puts
// the trace context in the records' headers (internal/telemetry). It does
// not own the public API (the root keeps PublishOpts, the methods and
// their docs), the Producer's batching (internal/producer, whose Sink
// calls this package), the consumers' side of notifications (internal/notifier), nor
// the statements themselves (internal/store). The few rules it shares with
// the rest of the root (the timestamp bounds, the header encoding, the
// notification key of a partition) come in as function values in Config,
// so each keeps one home.
package logpublish

import (
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/internal/telemetry"
)

// Config is what a Publisher needs of the client's configuration, all set
// (the root fills in defaults).
type Config struct {
	// MetadataMaxAge is how long a topic's cached metadata is trusted.
	MetadataMaxAge time.Duration
	// DisableNotify: no wake-up is sent after a commit (consumers poll).
	DisableNotify bool
	// Channel is the LISTEN channel of publish notifications
	// ("<schema>_log").
	Channel string
	// Logger receives the post-commit work's failures.
	Logger *slog.Logger
	// BackpressureTimeout is how long a publish refused with Backpressure
	// is retried when the error does not say (pgmsg.BackpressureTimeoutDefault).
	BackpressureTimeout time.Duration
	// CheckTime refuses a record timestamp the library does not accept
	// (the root's checkTime: the UTC years 0001..9999), with what naming
	// the value.
	CheckTime func(what string, t time.Time) error
	// Tracer opens the span of each call (nil: tracing off).
	Tracer *telemetry.Tracer
}

// Publisher publishes records to the log for one Client. Safe for
// concurrent use; Close stops its post-commit goroutine.
type Publisher struct {
	store *store.Store
	pool  *pgxpool.Pool
	cfg   Config

	metaMu sync.Mutex
	meta   map[string]TopicMeta

	// Post-commit work (afterCommit): topics waiting to be notified,
	// partitions whose segments ahead run low, and the goroutine that
	// handles them (started on first use).
	sendMu      sync.Mutex
	sendPending map[string]struct{}
	segPending  map[topicPartition]struct{}
	sendKick    chan struct{}
	sendStop    chan struct{}
	sendDone    chan struct{}

	// lanes: each partition's publishes in flight and waiting
	// (topicPartition -> *publishLane; merge.go).
	lanes sync.Map
	// sending: each topic's partitions with a send in flight (topic ->
	// *sendingPartitions; merge.go's idlePartition).
	sending sync.Map
}

// topicPartition names one partition of a topic.
type topicPartition struct {
	topic     string
	partition int32
}

// New returns a Publisher that runs its statements through st on pool
// (the caller's transaction for PublishTx).
func New(st *store.Store, pool *pgxpool.Pool, cfg Config) *Publisher {
	return &Publisher{store: st, pool: pool, cfg: cfg, meta: map[string]TopicMeta{}}
}

// Close stops the post-commit goroutine, if started; work still pending
// is dropped (a lost notification only delays consumers until they poll;
// publishers create missing segments themselves). Safe to call twice.
func (p *Publisher) Close() {
	p.sendMu.Lock()
	stop, done := p.sendStop, p.sendDone
	p.sendStop = nil
	p.sendMu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}
