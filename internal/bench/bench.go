// Package bench is the load generator behind `pgmsg bench`: it drives the
// log (pubsub mode) and the queue (queue mode) through the public pgmsg API
// and, with the same settings, the seed baseline's SQL verbatim (the baseline every
// figure in docs/benchmarks.md is compared with), printing a live progress
// line and a JSON summary.
//
// Every run works in objects it creates itself (a topic or queue with a
// random name, or a fresh schema for the seed baseline's tables) and drops them at
// the end.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Impl names what a run measures.
const (
	ImplPgmsg = "pgmsg"
	// ImplPgmsgIdempotent is pgmsg with idempotent publishes: an
	// idempotent Producer for single records, PublishIdempotent for
	// batches (one producer id per publishing goroutine).
	ImplPgmsgIdempotent = "pgmsg-idempotent"
	// ImplPgmsgSeq is pgmsg's queue with every job in a sequence, spread
	// round-robin over QueueOptions.SequenceKeys keys (queue only).
	ImplPgmsgSeq = "pgmsg-seq"
	// ImplPgmsgKeyLimit is pgmsg's queue with a per-key limit
	// (QueueOptions.KeyLimit) and every job given a limit key, spread
	// round-robin over QueueOptions.LimitKeys keys; its handlers count the
	// jobs of each key running at once and the run fails if one exceeds
	// the limit (queue only).
	ImplPgmsgKeyLimit = "pgmsg-keylimit"
	// ImplPgmsgWorkflow is pgmsg's queue with each prefill chunk one
	// workflow: a root fanned out to QueueOptions.WorkflowLevels levels of
	// equal width, each job after the first level depending on two of the
	// level before (fan-in 2); its check measures, on the database's
	// clock, each job's claim after its last dependency's completion.
	ImplPgmsgWorkflow = "pgmsg-workflow"
	// ImplPgmsgFair is pgmsg's queue shared by tenants (fair share): the
	// prefilled jobs are one tenant's backlog, the jobs enqueued during
	// the run (QueueOptions.Rate) are spread round-robin over
	// QueueOptions.Tenants small tenants. Its check reports the paced
	// jobs' enqueue-to-start latency and the backlog's drain rate, as
	// ImplPgmsg's does for the same jobs without tenants (queue only).
	ImplPgmsgFair = "pgmsg-fair"
	ImplSeed      = "seed" // the seed baseline's SQL, verbatim
	ImplCopy      = "copy" // COPY into a bare (bigint primary key, bytea) table: the ingest ceiling
	// ImplPacked is the seed baseline's SQL with up to 7 records stored per row: an
	// experiment measuring what a batch layout would buy (docs/benchmarks.md).
	ImplPacked = "packed"
	ImplRiver  = "river" // River, from bench/peers
	// ImplFloor is the delivery floor: a publish, a wake-up sent after its
	// commit, and readers that keep their positions in memory and read with
	// a plain SELECT; no claims, no offsets written (floor_pubsub.go). Not
	// a product: what a latency target is held against.
	ImplFloor = "floor"
	// ImplKafka is pgmsg through its Kafka listener, with franz-go
	// producers and consumer groups (kafka_pubsub.go).
	ImplKafka = "kafka"
)

// Env is what every run needs: a database and where to report.
type Env struct {
	// URL of the database; each run opens its own pool on it.
	URL string
	// Schema pgmsg is migrated into (created, migrated and dropped again
	// when it does not exist).
	Schema string
	// Force allows running against a schema that holds other pgmsg data.
	Force bool
	// Progress receives the live progress line (nil: none).
	Progress io.Writer
	// ProgressTTY rewrites the progress line in place instead of printing
	// one line per interval.
	ProgressTTY bool
	// Interval between progress lines. Default 1s.
	Interval time.Duration
}

func (e *Env) interval() time.Duration {
	if e.Interval <= 0 {
		return time.Second
	}
	return e.Interval
}

// newPool opens a pool of maxConns connections. pgx's defaults are what we
// want: extended protocol, statements prepared and cached per connection,
// binary formats.
func newPool(ctx context.Context, url string, maxConns int, searchPath string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("bench: invalid database URL: %w", err)
	}
	cfg.MaxConns = int32(maxConns)
	cfg.MinConns = 0
	if searchPath != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = searchPath
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "pgmsg-bench"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// payloads makes n incompressible payloads of size bytes (at least 8: the
// first 8 bytes carry the send time, see stamp).
func payloads(n, size int) [][]byte {
	size = max(size, 8)
	out := make([][]byte, n)
	buf := make([]byte, n*size)
	_, _ = rand.Read(buf)
	for i := range out {
		out[i] = buf[i*size : (i+1)*size : (i+1)*size]
	}
	return out
}

// stamp writes t into the first 8 bytes of p; sentAt reads it back. The
// end-to-end latency of a record is its receive time minus this stamp: the
// client and the clock are the same on both ends.
func stamp(p []byte, t time.Time) { binary.BigEndian.PutUint64(p, uint64(t.UnixNano())) }

func sentAt(p []byte) time.Time {
	if len(p) < 8 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(p)))
}

// window tells whether measurements count yet (after the warm-up) and how
// long the measured part lasted.
type window struct {
	start    time.Time // when load starts
	measured time.Time // end of warm-up
	end      time.Time // planned end
}

func newWindow(warmup, duration time.Duration) window {
	now := time.Now()
	return window{start: now, measured: now.Add(warmup), end: now.Add(warmup + duration)}
}

func (w window) counts(t time.Time) bool { return !t.Before(w.measured) }

// elapsed is the measured time up to t.
func (w window) elapsed(t time.Time) time.Duration {
	if t.After(w.end) {
		t = w.end
	}
	return max(t.Sub(w.measured), 0)
}

// counter is a measured-window counter.
type counter struct{ n atomic.Int64 }

func (c *counter) add(w window, n int) {
	if w.counts(time.Now()) {
		c.n.Add(int64(n))
	}
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return round(float64(n)/d.Seconds(), 1)
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// pacer spaces calls to reach perSec calls per second (0: no pacing).
type pacer struct {
	interval time.Duration
	next     time.Time
}

// newPacer returns a pacer whose first slot is phase (0 to 1) of an
// interval from now. Callers that share a rate get phases spread over the
// interval (i/n for caller i of n), so that together they make evenly
// spaced calls: with the same phase they would all call at the same
// instants, a burst of n calls every interval.
func newPacer(perSec, phase float64) *pacer {
	if perSec <= 0 {
		return &pacer{}
	}
	iv := time.Duration(float64(time.Second) / perSec)
	return &pacer{interval: iv, next: time.Now().Add(time.Duration(phase * float64(iv)))}
}

// wait sleeps until the next slot and returns the slot's time: the time
// a call was due, which latencies count from. A caller that fell behind
// (its previous call took longer than the interval) calls at once, and
// its call's latency includes the time it was late, as an open system's
// would (a stalled call delays the calls queued behind it: measured from
// when each call started instead, a stall would count once, however many
// calls it held up). A caller that fell behind by more than a second does
// not burst to catch up: its slots start again from now. Without a rate
// the slot is now.
func (p *pacer) wait(ctx context.Context) (time.Time, error) {
	now := time.Now()
	if p.interval == 0 {
		return now, ctx.Err()
	}
	if p.next.Before(now.Add(-time.Second)) {
		p.next = now
	}
	if d := p.next.Sub(now); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return p.next, ctx.Err()
		case <-t.C:
		}
	}
	slot := p.next
	p.next = p.next.Add(p.interval)
	return slot, ctx.Err()
}
