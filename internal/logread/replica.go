package logread

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
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Read replicas: claims, commits and cursors stay on the
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

const (
	replicaSkipMin = time.Second
	replicaSkipMax = 30 * time.Second
	// replicaPoll is how often a read waiting for a replica asks for its
	// replay position.
	replicaPoll = 2 * time.Millisecond
)

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

func (r *replica) stats(now time.Time) pgmsgtype.ReplicaStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return pgmsgtype.ReplicaStats{Replica: r.name, Reads: r.reads.Load(), Records: r.records.Load(), Fallbacks: r.fallbacks.Load(),
		LagBytes: r.lagBytes.Load(), Healthy: !now.Before(r.skipUntil), LastError: r.lastErr}
}

// ReplicaStats returns the read replicas' counters since the Reader was
// made (nil without Config.Replicas).
func (r *Reader) ReplicaStats() *pgmsgtype.ReplicaReadStats {
	if r.replicas == nil {
		return nil
	}
	now := time.Now()
	out := &pgmsgtype.ReplicaReadStats{PrimaryReads: r.replicas.primaryReads.Load(), PrimaryRecords: r.replicas.primaryRecords.Load()}
	for _, rp := range r.replicas.replicas {
		out.Replicas = append(out.Replicas, rp.stats(now))
	}
	return out
}

// readClaimed reads a claim's records: from a read replica when one is
// configured and holds them (outside a caller's transaction), else from
// the primary. lsn is the primary's WAL position when the claim was made,
// or 0 when the claim did not report it.
func (r *Reader) readClaimed(ctx context.Context, exec store.DBTX, topic string, row *store.ClaimRow, lsn int64) ([]*pgmsgtype.Record, error) {
	if _, inTx := exec.(pgx.Tx); r.replicas == nil || inTx {
		return r.readRange(ctx, exec, topic, row)
	}
	if rp := r.replicas.pick(time.Now()); rp != nil {
		recs, err := r.readReplica(ctx, rp, topic, row, lsn)
		if err == nil {
			rp.succeeded(len(recs))
			return recs, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		rp.failed(err)
		r.logger.Debug("pgmsg: reading a claim from the primary instead of a read replica",
			"replica", rp.name, "topic", topic, "partition", row.Partition, "error", err)
	}
	recs, err := r.readRange(ctx, exec, topic, row)
	if err == nil {
		r.replicas.primaryReads.Add(1)
		r.replicas.primaryRecords.Add(int64(len(recs)))
	}
	return recs, err
}

// readReplica reads the claim row describes from replica rp, and returns
// an error when rp cannot be trusted to have all of it in time.
func (r *Reader) readReplica(ctx context.Context, rp *replica, topic string, row *store.ClaimRow, lsn int64) ([]*pgmsgtype.Record, error) {
	table := store.ReadTable(row.Relname)
	want := int(row.LastOffset - row.FirstOffset + 1)
	read := func() ([]*pgmsgtype.Record, error) { return r.queryRange(ctx, rp.pool, table, true, topic, row) }
	deadline := time.Now().Add(r.replicas.maxWait)
	recs, err := read()
	for {
		if err == nil && len(recs) == want {
			rp.lagBytes.Store(0)
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
			if lsn, err = r.store.WALInsertLSN(ctx, r.primary); err != nil {
				return nil, fmt.Errorf("primary's WAL position: %w", err)
			}
		}
		recovering, replay, perr := r.store.ReplayPosition(ctx, rp.pool)
		if perr != nil {
			return nil, perr
		}
		if !recovering {
			return nil, errReplicaPromoted
		}
		rp.lagBytes.Store(max(lsn-replay, 0))
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
			return nil, fmt.Errorf("%w (%d bytes behind after %s)", errReplicaLagging, lsn-replay, r.replicas.maxWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(replicaPoll):
		}
		recs, err = read()
	}
}
