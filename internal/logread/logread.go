// Package logread is the claim engine of the log (Kafka's fetch path is
// the analogue): it makes a group's claims on a topic's partitions, with
// the direct statements when they cover the case and claim_range()
// otherwise (dropping a commit that rides on the claim when that claim
// was lost), reads the claimed records (in the claim's own statement from
// the segment the partition's last claim learnt, from a read replica that
// has replayed them, or from the primary), moves past ranges compaction
// emptied, and commits, releases and extends claims.
//
// It opens the spans of its calls (internal/telemetry: "receive",
// "commit" and "release"). It does not own the public API (pgmsg.ClaimOpts
// and its defaults, Client.Claim and friends stay in the root, which
// builds the store.ClaimParams this package takes, as the Consumer's
// engine does from the same defaults), nor the Consumer's loop
// (internal/logconsumer). Every statement goes through internal/store; it
// works on *pgmsgtype.Claim and *pgmsgtype.Record.
package logread

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/internal/telemetry"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Config is what a Reader needs, all set (the root fills in defaults and
// checks them).
type Config struct {
	// Store runs the statements.
	Store *store.Store
	// Primary is the pool claims are made on; a read on a replica asks it
	// for the WAL position when the claim did not report one.
	Primary store.DBTX
	// Replicas are pools on streaming replicas (pgmsg.Config.ReadReplicas;
	// none: every read is on the primary), ReplicaMaxWait how long a read
	// waits for a lagging one.
	Replicas       []*pgxpool.Pool
	ReplicaMaxWait time.Duration
	// LeaseMax is the longest lease the SQL API accepts: the direct
	// statements, which do not check it, leave longer ones to
	// claim_range() to refuse.
	LeaseMax time.Duration
	// Logger receives the debug line of a read that fell back from a
	// replica to the primary.
	Logger *slog.Logger
	// GatherWait is how long a direct claim of a partition waits for the
	// claims other groups of this process are about to make of it, to go
	// out with them as one statement (gather.go); 0: claims are not
	// gathered.
	GatherWait time.Duration
	// RecordCacheBytes is how many bytes of records the Reader keeps for
	// its groups' claims of partitions that several of them read
	// (cache.go); 0: none.
	RecordCacheBytes int64
	// Tracer opens the spans of claims, commits and releases (nil:
	// tracing off).
	Tracer *telemetry.Tracer
	// SendableNames refuses, before a claim, a topic or group name
	// PostgreSQL cannot receive as text (the root's sendableNames). Every other bad name is claim_range()'s to refuse
	// (PM003): the direct statements find no row for one and leave it to
	// claim_range().
	SendableNames func(topic, group string) error
}

// Reader makes claims and reads their records. Safe for concurrent use.
type Reader struct {
	store    *store.Store
	primary  store.DBTX
	leaseMax time.Duration
	logger   *slog.Logger
	tracer   *telemetry.Tracer
	sendable func(topic, group string) error

	// segments: the segment table that held each partition's last direct
	// claim (partitionKey -> relname), which the next claim reads its
	// records from in the same round trip (claimRow).
	segments sync.Map

	// replicas are Config.Replicas (nil when none).
	replicas *replicaSet

	// gather gathers the direct claims of several groups of a partition
	// into one statement (gather.go).
	gather gatherer

	// cache holds the records read of partitions that several groups
	// claim, for their next claims (cache.go).
	cache recordCache

	// epochs is what the Reader's groups were given of each partition's
	// log epochs (epochs.go).
	epochs epochMemory
}

// partitionKey names one partition of a topic (the segments' key).
type partitionKey struct {
	topic     string
	partition int32
}

// New returns a Reader for cfg.
func New(cfg *Config) *Reader {
	return &Reader{
		store: cfg.Store, primary: cfg.Primary, leaseMax: cfg.LeaseMax,
		logger: cfg.Logger, tracer: cfg.Tracer, sendable: cfg.SendableNames,
		replicas: newReplicaSet(cfg.Replicas, cfg.ReplicaMaxWait),
		gather:   gatherer{wait: cfg.GatherWait},
		cache:    recordCache{max: cfg.RecordCacheBytes},
	}
}

// Claim makes the claim params describe on exec (committing first the
// claim params names, if any: one transaction and one WAL flush per claim
// cycle) and reads its records. It returns nil, nil when there is nothing
// to read. A commit that fails because the claim was lost (ClaimExpired,
// ClaimNotHeld) rolls the call back; the claim is then made again without
// it, as Consumer.Run ignores lost claims anyway. params must be complete
// (the root's claimParams applies pgmsg.ClaimOpts' defaults); Claim
// changes its commit fields as it goes. With tracing on, a claim that
// returns records, carries a commit or fails makes its span
// (telemetry.Tracer.Claim).
func (r *Reader) Claim(ctx context.Context, exec store.DBTX, params *store.ClaimParams) (cl *pgmsgtype.Claim, err error) {
	if r.tracer.On() {
		start := time.Now()
		var commit *pgmsgtype.Claim
		if params.Commit {
			commit = &pgmsgtype.Claim{Topic: params.Topic, Group: params.Group, Partition: params.CommitPartition, Epoch: params.CommitEpoch}
		}
		defer func() { r.tracer.Claim(ctx, start, params.Topic, params.Group, commit, cl, err) }()
	}
	if r.sendable != nil {
		if err := r.sendable(params.Topic, params.Group); err != nil {
			return nil, err
		}
	}
	return r.claim(ctx, exec, params)
}

// claim is Claim without its span.
func (r *Reader) claim(ctx context.Context, exec store.DBTX, params *store.ClaimParams) (*pgmsgtype.Claim, error) {
	for {
		row, recs, lsn, err := r.claimRow(ctx, exec, params)
		if err != nil || row == nil {
			return nil, err
		}
		if r.epochs.partitionEpoch(partitionKey{params.Topic, row.Partition}, row.LogEpoch) {
			// A new history: the record cache's window of the partition
			// may hold records of the old one, and recs may come from it.
			r.cache.forget(partitionKey{params.Topic, row.Partition})
			recs = nil
		}
		if err := r.checkEpoch(ctx, exec, params.Topic, params.Group, row); err != nil {
			// Nothing is handed over: the claim goes back (its release
			// failing only leaves it to expire).
			_ = r.store.Release(ctx, exec, params.Topic, params.Group, row.Partition, row.ClaimEpoch)
			return nil, err
		}
		cl := &pgmsgtype.Claim{Topic: params.Topic, Group: params.Group, Partition: row.Partition, Epoch: row.ClaimEpoch,
			ExpiresAt: row.ClaimExpiresAt, Records: recs, LogEpoch: row.LogEpoch}
		if recs == nil {
			if cl.Records, err = r.readClaimedCached(ctx, exec, params.Topic, params.Group, row, lsn); err != nil {
				return nil, err
			}
		}
		if int64(len(cl.Records)) < row.LastOffset-row.FirstOffset+1 {
			if cl.Records, err = r.completeRecords(ctx, exec, params.Topic, row, cl.Records); err != nil {
				// Nothing is handed over: the cursor must not move past
				// records the group was not given.
				_ = r.store.Release(ctx, exec, params.Topic, params.Group, row.Partition, row.ClaimEpoch)
				return nil, err
			}
		}
		if len(cl.Records) > 0 {
			return cl, nil
		}
		// Compaction removed every record of the range: commit the empty
		// claim (the cursor moves past it) and claim again.
		params.Commit, params.CommitPartition, params.CommitEpoch = true, cl.Partition, cl.Epoch
	}
}

// readClaimedCached is readClaimed through the record cache, for the
// claims whose statement did not read their records (a member owning
// several partitions claims through ClaimAnyDirect, which names the
// partition only in its answer; claim_range()): the part of the claim the
// partition's window holds is taken from it, the rest read (nothing at
// all when the window holds the whole claim: a thousand groups of one
// process reading one topic read each record once, not once a group), and
// what was read offered to the window. Not inside a caller's transaction,
// nor with read replicas (their reads have their own checks): there it is
// readClaimed.
func (r *Reader) readClaimedCached(ctx context.Context, exec store.DBTX, topic, group string, row *store.ClaimRow, lsn int64) ([]*pgmsgtype.Record, error) {
	if _, inTx := exec.(pgx.Tx); inTx || r.replicas != nil || r.cache.max <= 0 {
		return r.readClaimed(ctx, exec, topic, row, lsn)
	}
	pk := partitionKey{topic, row.Partition}
	r.cache.note(pk, group)
	held, snap := r.cache.held(pk)
	lo, hi, ok := held.Skipped(row.TopicID, row.FirstOffset, row.LastOffset)
	var recs []*pgmsgtype.Record
	if !ok || lo != row.FirstOffset || hi != row.LastOffset {
		// Read what the window does not hold: a claim that starts in it is
		// read from past its end, one that ends in it up to its start.
		part := *row
		switch {
		case ok && lo == row.FirstOffset:
			part.FirstOffset = hi + 1
		case ok:
			part.LastOffset = lo - 1
		}
		var err error
		if recs, err = r.readClaimed(ctx, exec, topic, &part, lsn); err != nil {
			return nil, err
		}
	}
	return r.cache.take(pk, held, snap, row, recs), nil
}

// claimRow makes the claim params describe (committing the claim they
// name first), with a direct statement when it covers the case, else with
// claim_range(). A commit that fails because the claim was lost is
// dropped and the claim made without it. It clears the commit from params
// once done; nil, nil, nil means nothing to claim. recs are the claim's
// records when the statement read them too (non-nil, maybe empty), else
// nil: the caller reads them with readClaimed. lsn is the primary's WAL
// position after the claim when it is known (the direct statements report
// it), else 0.
func (r *Reader) claimRow(ctx context.Context, exec store.DBTX, params *store.ClaimParams) (*store.ClaimRow, []*pgmsgtype.Record, int64, error) {
	if r.canClaimDirect(params) {
		key := partitionKey{params.Topic, *params.Partition}
		// Read the records in the same round trip from the segment that
		// held the partition's last claim, outside a caller's transaction
		// only: retention may have dropped that table since, and the
		// error would abort the transaction. With read replicas the
		// records are read from a replica instead.
		var fetch string
		if _, inTx := exec.(pgx.Tx); !inTx && r.replicas == nil {
			if v, ok := r.segments.Load(key); ok {
				fetch = v.(string)
			}
		}
		var (
			res     claimDirectResult
			err     error
			settled bool
		)
		if fetch != "" {
			r.cache.note(key, params.Group)
		}
		if fetch != "" && r.gather.wait > 0 && exec == r.primary {
			res, settled = r.claimGathered(ctx, params, fetch)
		}
		if !settled {
			res, err = r.claimDirect(ctx, exec, params, fetch)
		}
		if fetch != "" && errs.IsUndefinedTable(err) {
			// The segment was dropped: nothing was done; claim again
			// without reading records.
			r.segments.Delete(key)
			res, err = r.claimDirect(ctx, exec, params, "")
		}
		if err != nil {
			return nil, nil, 0, err
		}
		if res.committed {
			params.Commit = false
		}
		if res.row != nil && res.row.Relname != "" && res.row.Relname != fetch {
			r.segments.Store(key, res.row.Relname)
		}
		if !res.fallback {
			return res.row, res.records, res.lsn, nil
		}
	}
	if r.canClaimAnyDirect(params) {
		res, err := r.store.ClaimAnyDirect(ctx, exec, params)
		if err != nil {
			return nil, nil, 0, err
		}
		if !res.Fallback {
			if params.Commit && !res.Committed {
				// The statement claimed but could not write the commit:
				// another transaction changed that cursor row after the
				// statement's snapshot (a rebalance marked it for
				// hand-over; store.ClaimAnyDirect). The claim it commits
				// is still held: commit it on its own, or the hand-over
				// would wait for its lease and the new owner get its
				// records again. Rare: a second round trip then only.
				if err := r.store.Commit(ctx, exec, params.Topic, params.Group, params.CommitPartition, params.CommitEpoch, nil); err != nil && !errs.IsLostClaim(err) {
					if res.Row != nil {
						_ = r.store.Release(ctx, exec, params.Topic, params.Group, res.Row.Partition, res.Row.ClaimEpoch)
					}
					return nil, nil, 0, err
				}
			}
			params.Commit = false
			if res.Row == nil {
				return nil, nil, 0, nil
			}
			return res.Row, nil, res.LSN, nil
		}
	}
	for {
		row, err := r.store.ClaimRange(ctx, exec, params)
		if err != nil {
			if params.Commit && errs.IsLostClaim(err) {
				params.Commit = false
				continue
			}
			return nil, nil, 0, err
		}
		params.Commit = false
		return row, nil, 0, nil
	}
}

// readRange reads the records of a claim from the segment table that holds
// them (store.ReadRange). A range claim_range names no segment for (it
// spans two, or the caller may not read the segment) or whose segment
// retention dropped since the claim is read through the record table
// instead.
func (r *Reader) readRange(ctx context.Context, exec store.DBTX, topic string, row *store.ClaimRow) ([]*pgmsgtype.Record, error) {
	table := store.ReadTable(row.Relname)
	recs, err := r.queryRange(ctx, exec, table, false, topic, row)
	if err == nil {
		return recs, nil
	}
	// 42P01: retention dropped the segment since the claim: read through
	// the record table, as claim() does. (Outside a transaction; inside
	// one the error has aborted it, and the caller retries.)
	if _, inTx := exec.(pgx.Tx); !inTx && table != "record" && errs.IsUndefinedTable(err) {
		row2 := *row
		row2.Relname = ""
		return r.readRange(ctx, exec, topic, &row2)
	}
	return nil, err
}

// queryRange reads the claim row describes from table on exec
// (store.ReadRange; standby: only from a standby).
func (r *Reader) queryRange(ctx context.Context, exec store.DBTX, table string, standby bool, topic string, row *store.ClaimRow) ([]*pgmsgtype.Record, error) {
	sink := recordSink{topic: topic, partition: row.Partition,
		n: min(int(row.LastOffset-row.FirstOffset+1), recordBlockMax)}
	sink.recs = make([]*pgmsgtype.Record, 0, sink.n)
	err := r.store.ReadRange(ctx, exec, table, standby, row.TopicID, row.Partition, row.FirstOffset, row.LastOffset, sink.add)
	if err != nil {
		return nil, err
	}
	return sink.recs, nil
}

// recordBlockMax caps how many Records one allocation holds.
const recordBlockMax = 4096

// recordSink collects the records a store read hands over (its add is the
// store.RecordFunc) as Records of one partition: many Record structs per
// allocation, and the keys and values the store decoded kept as they are.
type recordSink struct {
	topic     string
	partition int32
	n         int // Records per block at most, and the first capacity of recs (both capped by the rows still to come)
	recs      []*pgmsgtype.Record
	block     []pgmsgtype.Record
}

// add appends the record row describes.
func (s *recordSink) add(row *store.RecordRow) error {
	h, err := store.DecodeHeaders(row.Headers)
	if err != nil {
		return err
	}
	// Sized for the rows still to come when the read knows them: a claim
	// of 1,000 records that finds 125 does not clear room for 1,000.
	n := s.n
	if row.Left > 0 {
		n = min(n, int(row.Left))
	}
	if s.recs == nil {
		s.recs = make([]*pgmsgtype.Record, 0, n)
	}
	if len(s.block) == cap(s.block) {
		s.block = make([]pgmsgtype.Record, 0, n)
	}
	s.block = append(s.block, pgmsgtype.Record{Topic: s.topic, Partition: s.partition, Offset: row.Offset, Key: row.Key,
		Value: row.Value, Headers: h, Timestamp: row.Timestamp})
	s.recs = append(s.recs, &s.block[len(s.block)-1])
	return nil
}

// Commit advances the group's cursor past cl (to next, when not nil:
// which must lie within the claim, or just past it) and ends it, on exec.
// It fails with ClaimExpired or ClaimNotHeld (writing nothing) when the
// claim is no longer the caller's.
// It makes a "commit" span.
func (r *Reader) Commit(ctx context.Context, exec store.DBTX, cl *pgmsgtype.Claim, next *int64) error {
	end := r.tracer.StartSettle(ctx, "commit", cl)
	err := r.store.Commit(ctx, exec, cl.Topic, cl.Group, cl.Partition, cl.Epoch, next)
	end(err)
	return err
}

// Release ends cl without committing, on exec: its records are delivered
// again at once rather than when the lease runs out.
// It makes a "release" span.
func (r *Reader) Release(ctx context.Context, exec store.DBTX, cl *pgmsgtype.Claim) error {
	end := r.tracer.StartSettle(ctx, "release", cl)
	err := r.store.Release(ctx, exec, cl.Topic, cl.Group, cl.Partition, cl.Epoch)
	end(err)
	return err
}

// Extend keeps cl for lease more from now (database clock), on exec, and
// sets its ExpiresAt. It fails like Commit when the claim is lost.
func (r *Reader) Extend(ctx context.Context, exec store.DBTX, cl *pgmsgtype.Claim, lease time.Duration) error {
	// extend() refuses a lease that is not positive (one under 1µs is sent
	// as 0) or over 366 days (PM004) before it looks the claim up.
	exp, err := r.store.Extend(ctx, exec, cl.Topic, cl.Group, cl.Partition, cl.Epoch, lease)
	if err != nil {
		return err
	}
	cl.ExpiresAt = exp
	return nil
}

// completeRecords checks a read that returned fewer records than its
// claim's range (recs, in offset order): a claim's range holds every
// offset from first to last but those compaction deleted and those
// retention dropped, both below the partition's holesBelow
// (store.MissesStored). Fewer records from there on means the read
// missed stored records, and the commit of the claim, which moves the
// cursor past its whole range, would skip them for the group. The
// records are then read again from the segment tables the catalog names
// (store.ReadSegments); a read that still misses stored records fails
// the claim (the caller releases it), and the next claim reads the range
// again.
func (r *Reader) completeRecords(ctx context.Context, exec store.DBTX, topic string, row *store.ClaimRow,
	recs []*pgmsgtype.Record) ([]*pgmsgtype.Record, error) {
	_, holesBelow, err := r.store.RangeSegments(ctx, exec, row.TopicID, row.Partition, row.FirstOffset, row.LastOffset)
	if err != nil {
		return nil, err
	}
	if !store.MissesStored(recs, recordOffset, row.FirstOffset, row.LastOffset, holesBelow) {
		return recs, nil // compaction or retention left holes
	}
	// The window of the record cache may hold the same holes.
	r.cache.forget(partitionKey{topic, row.Partition})
	sink := recordSink{topic: topic, partition: row.Partition,
		n: min(int(row.LastOffset-row.FirstOffset+1), recordBlockMax)}
	if holesBelow, err = r.store.ReadSegments(ctx, exec, row.TopicID, row.Partition, row.FirstOffset, row.LastOffset, sink.add); err != nil {
		return nil, err
	}
	again := sink.recs
	if store.MissesStored(again, recordOffset, row.FirstOffset, row.LastOffset, holesBelow) {
		return nil, fmt.Errorf("pgmsg: claim of topic %q partition %d offsets %d to %d: read %d records, %d from its segments, "+
			"but the offsets from %d on are all stored: the claim was released and nothing was handed over",
			topic, row.Partition, row.FirstOffset, row.LastOffset, len(recs), len(again), max(row.FirstOffset, holesBelow))
	}
	if r.logger != nil {
		r.logger.Warn("pgmsg: a claim's read missed stored records; read them again from their segments",
			"topic", topic, "partition", row.Partition, "first", row.FirstOffset, "last", row.LastOffset,
			"read", len(recs), "segments_read", len(again))
	}
	return again, nil
}

func recordOffset(r *pgmsgtype.Record) int64 { return r.Offset }
