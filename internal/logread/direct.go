package logread

import (
	"context"
	"slices"

	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// The consumer's claim cycle runs as static statements against the tables
// for the case Consumer.Run meets on every cycle (a member that owns one
// partition claims it, committing its previous claim of the same
// partition): internal/store's ClaimDirect (its statements and their
// reasons are documented there); and for a member that owns several
// partitions and names none, ClaimAnyDirect, when a partition other than
// the one it commits has records. Every other case, and every
// answer that needs an error explained, goes to claim_range()
// (store.ClaimRange), which stays the reference for the semantics
// (docs/sql-api.md).

// claimDirectResult is what claimDirect learned: row is the claim (nil
// when nothing was claimed); fallback means claim_range() must answer
// (and committed whether the commit was done meanwhile). fetched: records
// are the claim's records (the statement read them from the right table;
// not nil, empty when compaction removed them all).
type claimDirectResult struct {
	row       *store.ClaimRow
	fallback  bool
	committed bool
	fetched   bool
	records   []*pgmsgtype.Record
	lsn       int64
}

// canClaimDirect reports whether params are the case the direct statements
// cover: a named partition claimed by its owner, no byte cap, a commit (if
// any) of the same partition, and a lease and max records claim_range()
// accepts (the statements do not check them).
func (r *Reader) canClaimDirect(params *store.ClaimParams) bool {
	return params.Partition != nil && params.RequireOwner && params.Member != "" && params.MaxBytes == 0 && params.MaxRecords >= 1 &&
		(!params.Commit || params.CommitPartition == *params.Partition) &&
		params.Lease.Microseconds() > 0 && params.Lease.Microseconds() <= r.leaseMax.Microseconds()
}

// canClaimAnyDirect reports whether params are the case
// store.ClaimAnyDirect covers: a member that names no partition (it owns
// several) claims one of its own, with no byte cap and a lease
// claim_range() accepts; a commit, if any, of any partition.
func (r *Reader) canClaimAnyDirect(params *store.ClaimParams) bool {
	return params.Partition == nil && params.RequireOwner && params.Member != "" && params.MaxBytes == 0 && params.MaxRecords >= 1 &&
		params.Lease.Microseconds() > 0 && params.Lease.Microseconds() <= r.leaseMax.Microseconds()
}

// claimDirect runs the direct claim statement params describe. With fetch
// (a segment table's name) it reads the claimed records from that table in
// the same round trip, but for those the record cache holds, which it
// takes from there.
func (r *Reader) claimDirect(ctx context.Context, exec store.DBTX, params *store.ClaimParams, fetch string) (claimDirectResult, error) {
	pk := partitionKey{params.Topic, *params.Partition}
	var (
		held store.Held
		snap []*pgmsgtype.Record
	)
	if fetch != "" {
		held, snap = r.cache.held(pk)
	}
	// The records' slice is made on the first record: none for a claim
	// that reads no records.
	sink := recordSink{topic: params.Topic, partition: *params.Partition,
		n: min(int(params.MaxRecords), recordBlockMax)}
	res0, err := r.store.ClaimDirect(ctx, exec, params, fetch, held, sink.add)
	if err != nil {
		return claimDirectResult{}, err
	}
	res := claimDirectResult{row: res0.Row, fallback: res0.Fallback, committed: res0.Committed, lsn: res0.LSN}
	if res0.Fetched {
		res.fetched, res.records = true, []*pgmsgtype.Record{}
		if sink.recs != nil {
			res.records = sink.recs
		}
		if !slices.IsSortedFunc(res.records, byOffset) {
			// The statement has no ORDER BY (a sort of up to a claim of
			// records for a plan that reads them in order anyway).
			slices.SortFunc(res.records, byOffset)
		}
		res.records = r.cache.take(pk, held, snap, res.row, res.records)
	}
	return res, nil
}
