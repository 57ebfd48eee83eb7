package pgmsg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/store"
)

// Read replicas (issue 20): claims, commits and cursors stay on the
// primary; the records of a claim are read from a streaming replica when
// it holds all of them, else from the primary. A replica never causes a
// short read:
//
//   - The read on a replica returns rows only while the server is in
//     recovery (a promoted replica no longer follows the primary, and may
//     diverge from it).
//   - A claim covers the offsets first..last, gapless in every topic that
//     is not compacted: a read that returns last-first+1 rows returned the
//     whole claim, and that is the common case, one round trip.
//   - Otherwise (the replica lags, or compaction left holes in the range)
//     the client compares the replica's replay position with the
//     primary's WAL position when the claim was made (every record the
//     claim can see was committed before it): once the replica has
//     replayed that far, what it returns is the claim's records. Until
//     then it polls, reading again (the position can include other
//     sessions' WAL that the primary flushes later than the records), for
//     at most Config.ReplicaMaxWait.
//   - A replica that cannot answer in time, fails, or was promoted is
//     skipped (from one second, doubling to 30 s) and the primary reads
//     the claim.

// ReplicaMaxWaitDefault is how long a claim's read waits for a lagging
// replica before it reads from the primary.
const ReplicaMaxWaitDefault = 100 * time.Millisecond

const (
	replicaSkipMin = time.Second
	replicaSkipMax = 30 * time.Second
	// replicaPoll is how often a read waiting for a replica asks for its
	// replay position.
	replicaPoll = 2 * time.Millisecond
)

// ReplicaStats are one read replica's counters since the client started.
type ReplicaStats struct {
	// Replica is the replica's host:port.
	Replica string
	// Reads is how many claims' records it served, Records how many
	// records.
	Reads, Records int64
	// Fallbacks is how many claims it could not serve (it lagged past
	// ReplicaMaxWait, failed or was promoted): the primary read them.
	Fallbacks int64
	// LagBytes is how far its replay position was behind a claim's
	// position when last measured (0 when it had caught up).
	LagBytes int64
	// Healthy is false while the replica is skipped after a fallback.
	Healthy bool
	// LastError describes the last fallback ("" when none).
	LastError string
}

var (
	errReplicaLagging  = errors.New("replica did not replay the claim's position in time")
	errReplicaPromoted = errors.New("replica is not in recovery (promoted?)")
)

type replicaSet struct {
	replicas []*replica
	next     atomic.Uint32
	maxWait  time.Duration
	// primaryReads and primaryRecords count claims (and their records)
	// read on the primary because no replica was healthy or the chosen one
	// fell back.
	primaryReads, primaryRecords atomic.Int64
}

type replica struct {
	pool *pgxpool.Pool
	name string

	reads, records, fallbacks, lagBytes atomic.Int64

	mu        sync.Mutex
	failures  int
	skipUntil time.Time
	lastErr   string
}

func newReplicaSet(pools []*pgxpool.Pool, maxWait time.Duration) *replicaSet {
	if len(pools) == 0 {
		return nil
	}
	s := &replicaSet{maxWait: maxWait}
	for _, p := range pools {
		cc := p.Config().ConnConfig
		s.replicas = append(s.replicas, &replica{pool: p, name: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))})
	}
	return s
}

// pick returns the next healthy replica, round robin, or nil.
func (s *replicaSet) pick(now time.Time) *replica {
	n := len(s.replicas)
	start := int(s.next.Add(1))
	for i := range n {
		r := s.replicas[(start+i)%n]
		r.mu.Lock()
		ok := !now.Before(r.skipUntil)
		r.mu.Unlock()
		if ok {
			return r
		}
	}
	return nil
}

func (r *replica) succeeded(records int) {
	r.reads.Add(1)
	r.records.Add(int64(records))
	r.mu.Lock()
	r.failures = 0
	r.mu.Unlock()
}

// failed skips the replica for a while, longer after each failure in a row.
func (r *replica) failed(err error) {
	r.fallbacks.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures++
	skip := replicaSkipMin << min(r.failures-1, 5)
	r.skipUntil = time.Now().Add(min(skip, replicaSkipMax))
	r.lastErr = err.Error()
}

func (r *replica) stats(now time.Time) ReplicaStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ReplicaStats{Replica: r.name, Reads: r.reads.Load(), Records: r.records.Load(), Fallbacks: r.fallbacks.Load(),
		LagBytes: r.lagBytes.Load(), Healthy: !now.Before(r.skipUntil), LastError: r.lastErr}
}

// ReplicaReadStats are the client's read replica counters.
type ReplicaReadStats struct {
	// Replicas are Config.ReadReplicas' counters, in that order.
	Replicas []ReplicaStats
	// PrimaryReads and PrimaryRecords count the claims, and their
	// records, read on the primary although replicas are configured.
	PrimaryReads, PrimaryRecords int64
}

// ReplicaStats returns the read replicas' counters since the client
// started (nil without Config.ReadReplicas). pgmsgprom exposes them.
func (c *Client) ReplicaStats() *ReplicaReadStats {
	if c.replicas == nil {
		return nil
	}
	now := time.Now()
	out := &ReplicaReadStats{PrimaryReads: c.replicas.primaryReads.Load(), PrimaryRecords: c.replicas.primaryRecords.Load()}
	for _, r := range c.replicas.replicas {
		out.Replicas = append(out.Replicas, r.stats(now))
	}
	return out
}

// readClaimed reads a claim's records: from a read replica when one is
// configured and holds them (outside a caller's transaction), else from
// the primary. lsn is the primary's WAL position when the claim was made,
// or 0 when the claim did not report it.
func (c *Client) readClaimed(ctx context.Context, exec DBTX, topic string, row *store.ClaimRow, lsn int64) ([]*Record, error) {
	if _, inTx := exec.(pgx.Tx); c.replicas == nil || inTx {
		return c.readRange(ctx, exec, topic, row)
	}
	if r := c.replicas.pick(time.Now()); r != nil {
		recs, err := c.readReplica(ctx, r, topic, row, lsn)
		if err == nil {
			r.succeeded(len(recs))
			return recs, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.failed(err)
		c.config.Logger.Debug("pgmsg: reading a claim from the primary instead of a read replica",
			"replica", r.name, "topic", topic, "partition", row.Partition, "error", err)
	}
	recs, err := c.readRange(ctx, exec, topic, row)
	if err == nil {
		c.replicas.primaryReads.Add(1)
		c.replicas.primaryRecords.Add(int64(len(recs)))
	}
	return recs, err
}

// readReplica reads the claim row describes from replica r, and returns
// an error when r cannot be trusted to have all of it in time.
func (c *Client) readReplica(ctx context.Context, r *replica, topic string, row *store.ClaimRow, lsn int64) ([]*Record, error) {
	table := store.ReadTable(row.Relname)
	want := int(row.LastOffset - row.FirstOffset + 1)
	read := func() ([]*Record, error) { return c.queryRange(ctx, r.pool, table, true, topic, row) }
	deadline := time.Now().Add(c.replicas.maxWait)
	recs, err := read()
	for {
		if err == nil && len(recs) == want {
			r.lagBytes.Store(0)
			return recs, nil // the whole range: nothing can be missing
		}
		if err != nil && !errs.IsUndefinedTable(err) {
			return nil, err
		}
		// Short, or the segment table is not there (not replayed yet, or
		// dropped since): has the replica replayed as far as the claim?
		if lsn == 0 {
			// The claim did not report the primary's position: after the
			// claim committed, the current one is at least as far.
			var err error
			if lsn, err = c.store.WALInsertLSN(ctx, c.pool); err != nil {
				return nil, fmt.Errorf("primary's WAL position: %w", err)
			}
		}
		recovering, replay, perr := c.store.ReplayPosition(ctx, r.pool)
		if perr != nil {
			return nil, perr
		}
		if !recovering {
			return nil, errReplicaPromoted
		}
		r.lagBytes.Store(max(lsn-replay, 0))
		if replay >= lsn {
			// Every record of the claim is replayed: what the replica
			// returns now is the range (compaction may have left holes).
			// A missing table now means retention dropped it: the primary
			// reads through the record table.
			return read()
		}
		// The position may include WAL written after the records (other
		// sessions' asynchronous commits) that the primary has not flushed
		// yet: the records themselves may well be there already, so read
		// again rather than only wait for the position.
		if !time.Now().Add(replicaPoll).Before(deadline) {
			return nil, fmt.Errorf("%w (%d bytes behind after %s)", errReplicaLagging, lsn-replay, c.replicas.maxWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(replicaPoll):
		}
		recs, err = read()
	}
}
