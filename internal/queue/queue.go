// Package queue is the engine behind pgmsg's job queues (River's root
// client and its internal job completer are the model): the checks of a
// job that SQL does not make, or makes in another order, before any round
// trip (enqueue's per-job checks, tags, payload and metadata documents,
// queue settings, listings' filters, periodic jobs' jobs), the wait on a
// full queue, the choice between the direct claim statement and
// job_claim() with what the client remembers of its claims per queue
// (claim.go), the outcomes of a held job (complete, fail, snooze, extend),
// and queue administration (create, update, stats, pruning in batches,
// dead jobs, rescue). It runs every statement through internal/store.
//
// It is the one Go home of the queue API's bounds and defaults (the root
// re-exports them: pgmsg.JobKindMaxBytes is KindMaxBytes; a test checks
// the SQL API's literals against them), and opens the "publish" span of
// an enqueue (internal/telemetry). It does not own the public API: the
// root keeps every public type and option (EnqueueParams, EnqueueResult
// and QueueStats are pgmsgtype's, so that this package builds them
// without a copy), the Worker's engine (internal/worker, which calls the
// methods here), the typed Kinds, and
// the rules the log shares (names, times), which it hands over in Config,
// and the backpressure retry (RoomWait says when and how long).
package queue

import (
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/internal/telemetry"
)

// Bounds and defaults of the queue API, their one Go home. The root
// re-exports each under its own name (pgmsg.JobPriorityMin is
// PriorityMin ...); the SQL API spells the bounds as literals, which
// TestBoundsMatchSQL holds equal to these.
const (
	// PriorityMin and PriorityMax bound a job's priority (smallint).
	PriorityMin = -32768
	PriorityMax = 32767
	// KindMaxBytes is the longest job kind, in bytes.
	KindMaxBytes = 200
	// UniqueKeyMaxBytes is the longest job unique key, in bytes.
	UniqueKeyMaxBytes = 1000
	// SequenceKeyMaxBytes is the longest sequence key, in bytes.
	SequenceKeyMaxBytes = 200
	// LimitKeyMaxBytes is the longest limit key, and KeyFieldMaxBytes the
	// longest key field name, in bytes.
	LimitKeyMaxBytes = 200
	KeyFieldMaxBytes = 200
	// DependsOnMax is the most dependencies a job may have, and
	// JobNameMaxBytes the longest name of a job of a batch, in bytes.
	DependsOnMax    = 1000
	JobNameMaxBytes = 200
	// TenantMaxBytes is the longest tenant name, in bytes, and
	// TenantWeightMin and TenantWeightMax bound a tenant's weight.
	TenantMaxBytes  = 200
	TenantWeightMin = 0.001
	TenantWeightMax = 1000000
	// TagsMax is the most tags a job may have.
	TagsMax = 20
	// LogBytesMax is the most one attempt's log keeps, in bytes (the SQL
	// API cuts a longer one); StepNameMaxBytes the longest step name, in
	// bytes; StepOutputMaxBytes the largest step output, as JSON; and
	// StepsMax the most steps one job may record.
	LogBytesMax        = 1 << 20
	StepNameMaxBytes   = 200
	StepOutputMaxBytes = 64 << 10
	StepsMax           = 1000
	// ClaimMaxDefault is how many jobs a claim takes when not told.
	ClaimMaxDefault = 1
	// PruneBatchDefault is how many archived (or dead) jobs one pruning
	// statement deletes at most.
	PruneBatchDefault = 1000
	// MaxDepthNone, JobTimeoutNone, DeadRetentionNone, RateLimitNone,
	// MaxRunningNone and KeyLimitNone remove a setting on update; BackpressureNoWait makes
	// a full queue refuse enqueues at once. The store gives them their
	// meaning in SQL.
	MaxDepthNone                     = -1
	JobTimeoutNone     time.Duration = -1
	DeadRetentionNone  time.Duration = -1
	BackpressureNoWait time.Duration = -1
	RateLimitNone                    = -1
	MaxRunningNone                   = -1
	KeyLimitNone                     = -1
	// KeyFieldNone removes a queue's key field on update.
	KeyFieldNone = store.KeyFieldNone
	// RateLimitMax is the largest rate limit, in jobs per second.
	RateLimitMax = 1_000_000
	// retentionMax is the longest archive or dead-job retention the SQL
	// API accepts (36525 days, 100 years; PM004 past it).
	retentionMax = 36525 * 24 * time.Hour
)

// Config is what the engine needs besides the store and the pool: the
// logger, and the rules it shares with the log's code in the root, which
// stay there (one home each) and are called through these functions.
type Config struct {
	// Logger receives the warnings of periodic ticks not enqueued.
	Logger *slog.Logger
	// ValidateName is pgmsg.ValidateName: ErrInvalidName unless name is
	// 1-200 letters, digits, '.', '_' or '-'.
	ValidateName func(kind, name string) error
	// CheckTime refuses a time outside the UTC years 0001 to 9999
	// (ErrInvalidArgument), which pgx could not send or PostgreSQL hold.
	CheckTime func(what string, t time.Time) error
	// DurationMax is the longest lease, timeout or window the SQL API
	// accepts (366 days; PM004 past it).
	DurationMax time.Duration
	// Tracer opens the span of each enqueue call (nil: tracing off).
	Tracer *telemetry.Tracer
}

// Queues runs the job queue's operations on one schema. Safe for
// concurrent use.
type Queues struct {
	store *store.Store
	// pool is the client's pool: the claims on it may take the direct
	// statement, and the calls without an exec run on it.
	pool *pgxpool.Pool
	cfg  Config

	claims sync.Map // queue name -> *claimState
}

// New returns the engine of the queues of st's schema, on pool.
func New(st *store.Store, pool *pgxpool.Pool, cfg Config) *Queues {
	return &Queues{store: st, pool: pool, cfg: cfg}
}
