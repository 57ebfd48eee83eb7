package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
)

// The consumer's claim cycle as static statements against the tables:
// claim_range() for the case Consumer.Run meets on every cycle (a member
// that owns one partition claims it, committing its previous claim of the
// same partition), run from the connection's cached generic plan instead
// of a PL/pgSQL call (profiled under mixed load: the calls' executor set-up, the pinned
// search_path's save and restore and the returned rows' tuplestore were
// the largest share of the server's time under mixed load; see
// docs/benchmarks.md). Every other case, and every answer that needs an
// error explained (the claim to commit is no longer held, the partition
// is not this member's, the group does not exist), goes to claim_range(),
// which stays the reference for the semantics (docs/sql-api.md);
// TestClaimParity (log_claim_test.go) holds the direct, gathered and
// claim_range() forms alike on the common path.
//
// Parameters: $1 topic, $2 group, $3 partition, $4 member, $5 max records,
// $6 lease, $8 the token drawn for the claim's epoch, drawn by the client
// (leaseToken) as _claim_token() draws claim_range()'s, and made the epoch
// by the same rule (statements/claim_epoch.sql): a PL/pgSQL call with a pinned
// search_path on every claim cost its executor set-up and PostgreSQL 15's
// walk of every setting when the call's own ended (AtEOXact_GUC), for a
// random number the client draws from the same kind of source.

// claimDirectCTE and claimDirectHead (one statement) claim the next
// records of one partition for its owner, skipping it if another
// transaction holds its cursor row ($7: commit
// asynchronously, as claim_range's p_async). It returns one row: the
// claim's columns, or NULLs when nothing was claimed, and then whether the
// partition is the member's (NULL: no cursor row). The cursor row is read
// once when it claims (the UPDATE finds the locked row by its ctid), and
// it and the counter row are found by their ctids (cursorTID,
// partitionRow): with a long snapshot held, a read by the key walks every
// version the row has had since, which made the claim 10 times slower
// when it read it three times.
var claimDirectCTE = `WITH n AS (SELECT pg_catalog.clock_timestamp() AS ts, pg_catalog.pg_current_wal_insert_lsn() AS lsn),
cur AS (
    SELECT c.tid, c.topic_id, c.next_offset, c.claim_epoch, tp.next_offset AS tip, tp.log_epoch
      FROM pgmsg.topic tt
      CROSS JOIN n
      CROSS JOIN LATERAL (` + partitionRow("tt.topic_id", "$3::integer") + `) tp
      CROSS JOIN LATERAL (
        SELECT c.ctid AS tid, c.topic_id, c.next_offset, c.claim_epoch
          FROM pgmsg.group_cursor c
         WHERE c.ctid = ` + cursorTID("tt.topic_id", "$2::text", "$3::integer") + `
           AND c.topic_id = tt.topic_id AND c.group_name = $2::text AND c.partition = $3::integer
           AND c.owner = $4::text AND c.next_owner IS NULL
           AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= n.ts)
           AND tp.next_offset > c.next_offset
           FOR UPDATE OF c SKIP LOCKED) c
     WHERE tt.name = $1::text
), upd AS (
    UPDATE pgmsg.group_cursor c
       SET claim_epoch = ` + stmt("claim_epoch", "$8::bigint", "cur.claim_epoch") + `,
           claim_start = cur.next_offset, claim_end = least(cur.tip - 1, cur.next_offset + $5::integer - 1),
           claim_expires_at = n.ts + $6::interval, claim_owner = $4::text, claimed_at = n.ts
      FROM cur, n
     WHERE c.ctid = cur.tid
    RETURNING c.topic_id, c.claim_epoch, c.claim_expires_at, c.claim_start, c.claim_end, cur.log_epoch
)`

var claimDirectHead = `
SELECT CASE WHEN upd.claim_epoch IS NOT NULL THEN true
            ELSE (SELECT c.owner = $4::text AND c.next_owner IS NULL
                    FROM pgmsg.topic tt
                    CROSS JOIN LATERAL (` + cursorRow("c.owner, c.next_owner", "tt.topic_id", "$2::text", "$3::integer") + `
                    OFFSET 0) c
                   WHERE tt.name = $1::text) END,
       upd.claim_epoch, upd.claim_expires_at, upd.claim_start, upd.claim_end, upd.topic_id,
       (SELECT s.relname FROM pgmsg.segment s
         WHERE s.topic_id = upd.topic_id AND s.partition = $3::integer AND s.start_offset <= upd.claim_start
           AND s.end_offset > upd.claim_end
         ORDER BY s.start_offset DESC LIMIT 1),
       CASE WHEN upd.claim_epoch IS NOT NULL AND $7::boolean THEN pg_catalog.set_config('synchronous_commit', 'off', true) END,
       ` + claimLSNColumn + `, upd.log_epoch
  FROM (SELECT 1) one LEFT JOIN upd ON true`

// claimCommitDirectCTE and claimCommitDirectHead (one statement) commit
// the claim $7 (an epoch) of the partition
// and claims the partition's next records in the same row version: it
// returns no row when that claim is no longer held (claim_range() then
// raises the error commit() would). $9: commit asynchronously, as
// claim_range's p_async with a riding commit (Consumer.Run's, which no
// caller is told of: a server crash that loses it only delivers its
// records again).
var claimCommitDirectCTE = `WITH n AS (SELECT pg_catalog.clock_timestamp() AS ts, pg_catalog.pg_current_wal_insert_lsn() AS lsn),
cur AS (
    SELECT c.tid, c.topic_id, c.claim_end + 1 AS done_to, c.claim_epoch, tp.next_offset AS tip, tp.log_epoch,
           (c.owner = $4::text AND c.next_owner IS NULL) AS owned
      FROM pgmsg.topic tt
      CROSS JOIN n
      CROSS JOIN LATERAL (` + partitionRow("tt.topic_id", "$3::integer") + `) tp
      CROSS JOIN LATERAL (
        SELECT c.ctid AS tid, c.topic_id, c.claim_end, c.claim_epoch, c.owner, c.next_owner
          FROM pgmsg.group_cursor c
         WHERE c.ctid = ` + cursorTID("tt.topic_id", "$2::text", "$3::integer") + `
           AND c.topic_id = tt.topic_id AND c.group_name = $2::text AND c.partition = $3::integer
           AND c.claim_epoch = $7::bigint AND c.claim_end IS NOT NULL AND c.claim_expires_at > n.ts
           FOR UPDATE OF c) c
     WHERE tt.name = $1::text
), p AS (
    SELECT cur.*, (cur.owned AND cur.tip > cur.done_to) AS claiming FROM cur
), upd AS (
    UPDATE pgmsg.group_cursor c
       SET next_offset = p.done_to, committed_at = n.ts,
           claim_epoch = CASE WHEN NOT p.claiming THEN c.claim_epoch
                              ELSE ` + stmt("claim_epoch", "$8::bigint", "p.claim_epoch") + ` END,
           claim_start = CASE WHEN p.claiming THEN p.done_to END,
           claim_end = CASE WHEN p.claiming THEN least(p.tip - 1, p.done_to + $5::integer - 1) END,
           claim_expires_at = CASE WHEN p.claiming THEN n.ts + $6::interval END,
           claim_owner = CASE WHEN p.claiming THEN $4::text END,
           claimed_at = CASE WHEN p.claiming THEN n.ts ELSE c.claimed_at END
      FROM p, n
     WHERE c.ctid = p.tid
    RETURNING p.owned, p.claiming, c.topic_id, c.claim_epoch, c.claim_expires_at, c.claim_start, c.claim_end, p.log_epoch
)`

var claimCommitDirectHead = `
SELECT upd.owned, CASE WHEN upd.claiming THEN upd.claim_epoch END, upd.claim_expires_at, upd.claim_start,
       upd.claim_end, upd.topic_id,
       (SELECT s.relname FROM pgmsg.segment s
         WHERE s.topic_id = upd.topic_id AND s.partition = $3::integer AND s.start_offset <= upd.claim_start
           AND s.end_offset > upd.claim_end
         ORDER BY s.start_offset DESC LIMIT 1),
       CASE WHEN $9::boolean THEN pg_catalog.set_config('synchronous_commit', 'off', true) END, ` + claimLSNColumn + `,
       upd.log_epoch
  FROM upd`

// claimDirectSQL and claimCommitDirectSQL are the two direct claim
// statements whole, joined once rather than on every claim.
var (
	claimDirectSQL       = claimDirectCTE + claimDirectHead
	claimCommitDirectSQL = claimCommitDirectCTE + claimCommitDirectHead
)

// claimRecordsSQL reads the records of the claim a direct claim statement
// just made, from the segment table relname: the claim statement and this
// one go in one pipeline (one round trip, one implicit transaction), so it
// sees the claim's cursor row. It is a plain SELECT, which PostgreSQL
// streams to the client as it reads: the claim statement is a
// data-modifying WITH, whose rows PostgreSQL runs to completion into a
// tuplestore before it sends them, and returning the records from it cost
// a copy of each record into fresh memory (form, zero, page faults) and a
// read back (8 % of the server's samples reading a backlog).
// $4 is the claim statement's $8: the claim's epoch is that or the next
// token (statements/claim_epoch.sql). relname is the table that held the partition's previous claim:
// when the claim statement's head names another segment (the range moved
// on to the next one, or spans two), the records read are not the claim's
// and the caller reads them with internal/logread's readRange. The
// statement names a plain table, so it runs from a cached generic plan.
func claimRecordsSQL(relname string) string {
	// The claim's range comes first (one cursor row), and the records
	// are read by it through a LATERAL subquery that OFFSET 0 keeps from
	// being flattened: a generic plan may otherwise drive the join from
	// the segment's rows and look the cursor up for each.
	return `SELECT r."offset", r."timestamp", r.key, r.value, r.headers
  FROM pgmsg.topic tt
  CROSS JOIN LATERAL (` + cursorRow("c.topic_id, c.claim_start, c.claim_end", "tt.topic_id", "$2::text", "$3::integer") + `
       AND c.claim_epoch IN ($4::bigint, ` + stmt("token_next", "$4::bigint") + `)
    OFFSET 0) c
  CROSS JOIN LATERAL (
    SELECT r."offset", r."timestamp", r.key, r.value, r.headers
      FROM pgmsg.` + pgx.Identifier{relname}.Sanitize() + ` r
     WHERE r.topic_id = c.topic_id AND r.partition = $3::integer
       AND r."offset" BETWEEN ` + heldLow("c", "$5", "$6", "$7") + ` AND ` + heldHigh("c", "$5", "$6", "$7") + `
    OFFSET 0) r
 WHERE tt.name = $1::text`
}

// Held is a range of one partition's records that the caller holds in
// memory (a record cache shared by a process's groups, internal/logread):
// a claim's records statement skips the part of the claim it covers when
// the claim begins or ends inside it (Skipped says which). The zero Held
// holds nothing: it names topic id 0, and topic ids start at 1 (an
// identity column).
type Held struct {
	TopicID     int32
	First, Last int64 // Last < First: nothing held
}

// args are the statement parameters of h: topic id, first, last.
func (h Held) args() []any {
	if h.Last < h.First {
		return []any{int32(-1), int64(1), int64(0)}
	}
	return []any{h.TopicID, h.First, h.Last}
}

// Skipped is the part first..last of the claim [first, last] of topicID
// whose records the statement did not read because h holds them (ok
// false: none). It mirrors heldLow and heldHigh: a claim that starts in h
// is read from past h's end, one that ends in h up to before its start,
// one that does both is not read, and one that covers h at both ends is
// read whole.
func (h Held) Skipped(topicID int32, first, last int64) (lo, hi int64, ok bool) {
	if h.Last < h.First || topicID != h.TopicID {
		return 0, 0, false
	}
	startIn, endIn := first >= h.First && first <= h.Last, last >= h.First && last <= h.Last
	switch {
	case startIn && endIn:
		return first, last, true
	case startIn:
		return first, h.Last, true
	case endIn:
		return h.First, last, true
	}
	return 0, 0, false
}

// heldLow and heldHigh bound the records a claim (alias c: topic_id,
// claim_start, claim_end) reads when the caller holds first..last of the
// topic id tid (Held.Skipped).
func heldLow(c, tid, first, last string) string {
	return `CASE WHEN ` + c + `.topic_id = ` + tid + `::integer AND ` + c + `.claim_start BETWEEN ` + first + `::bigint AND ` + last +
		`::bigint THEN ` + last + `::bigint + 1 ELSE ` + c + `.claim_start END`
}

func heldHigh(c, tid, first, last string) string {
	return `CASE WHEN ` + c + `.topic_id = ` + tid + `::integer AND ` + c + `.claim_end BETWEEN ` + first + `::bigint AND ` + last +
		`::bigint THEN ` + first + `::bigint - 1 ELSE ` + c + `.claim_end END`
}

// batcher is what sends a pipeline: a pool, a connection or a transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// claimLSNColumn is the primary's WAL insert position when the claim
// statement began (read before its UPDATE), in bytes: every record the
// claim can see was committed before it, so a read replica that has
// replayed this far holds them all (the root package's replica.go).
const claimLSNColumn = `(SELECT (n.lsn - '0/0'::pg_lsn)::bigint FROM n)`

// rowTIDPlanSQL comes first in every transaction whose statements find
// the counter or cursor rows by their ctid (row_tid.sql): the COPY
// publish, the direct claims and the gathered claim. It makes those
// statements run from their cached generic plans and keeps the plans off
// sequential and bitmap scans, for the rest of the transaction only.
// row_tid.sql's lookup must walk the key's index entries newest first and
// stop at the first visible version; a bitmap scan reads every entry of
// the key and sorts them instead. The planner estimates one row either
// way and often takes the bitmap scan once the table has grown under a
// held snapshot: seen in `bench pubsub --hold-snapshot` after 4 minutes,
// the counter lookup of every COPY publish at 371 heap pages (5.3 ms)
// where the backward index scan reads 3, and writes falling from 75k to
// 13k records/s. A sequential scan would read every version of every
// row, for a plan made while the table was one page. Disabled paths carry
// a huge cost, which would make the plan's execution JIT-compiled: jit is
// off too.
const rowTIDPlanSQL = `SELECT pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true), ` +
	`pg_catalog.set_config('enable_seqscan', 'off', true), pg_catalog.set_config('enable_bitmapscan', 'off', true), ` +
	`pg_catalog.set_config('jit', 'off', true)`

// cursorTID is the ctid of the version the statement sees of the cursor
// row of group grp's partition of topic id topicID (SQL expressions),
// found from its newest index entry down (statements/row_tid.sql): the
// claim and record statements read the row by it, so that a held
// snapshot, which keeps every version a cursor row leaves (one per
// claim), does not make each read walk all of them.
func cursorTID(topicID, grp, partition string) string {
	return stmt("row_tid", "group_cursor", "x.topic_id = "+topicID+" AND x.group_name = "+grp, partition)
}

// cursorRow is a subquery for columns cols of the version the statement
// sees of that cursor row, read by its ctid (cursorTID; a LATERAL
// subquery kept from being flattened, so that topicID and grp are
// parameters of it and the ctid a TID scan's).
func cursorRow(cols, topicID, grp, partition string) string {
	return `SELECT ` + cols + ` FROM pgmsg.group_cursor c
         WHERE c.ctid = ` + cursorTID(topicID, grp, partition) + `
           AND c.topic_id = ` + topicID + ` AND c.group_name = ` + grp + ` AND c.partition = ` + partition
}

// partitionRow is a subquery for the next_offset and log_epoch of the
// version the statement sees of the counter row of partition of topic id
// topicID, read by its ctid as cursorTID's (the counter row has a version
// per publish).
func partitionRow(topicID, partition string) string {
	return `SELECT tp.next_offset, tp.log_epoch FROM pgmsg.topic_partition tp
         WHERE tp.ctid = ` + stmt("row_tid", "topic_partition", "x.topic_id = "+topicID, partition) + `
           AND tp.topic_id = ` + topicID + ` AND tp.partition = ` + partition
}

// ClaimParams describe a claim (claim_range()'s parameters as Go values).
type ClaimParams struct {
	Topic, Group string
	// Partition restricts the claim to one partition; nil: any.
	Partition *int32
	// Member names the claimant; "": none (NULL).
	Member string
	// MaxRecords caps the records of the claim.
	MaxRecords int32
	// MaxBytes caps the key+value bytes of the claim; 0: no cap (NULL).
	MaxBytes int64
	// Lease is how long the claim is held.
	Lease time.Duration
	// Start is where a group that does not exist yet starts.
	Start string
	// RequireOwner restricts the claim to partitions assigned to Member.
	RequireOwner bool
	// Async commits the call's transaction asynchronously (claim_range's
	// p_async), the riding commit (Commit) included.
	Async bool
	// Commit, when set, commits the claim CommitEpoch of CommitPartition
	// first, in the same statement.
	Commit          bool
	CommitPartition int32
	CommitEpoch     int64
}

// ClaimRow is a claim made: a range of one partition's records.
type ClaimRow struct {
	Partition      int32
	ClaimEpoch     int64
	ClaimExpiresAt time.Time
	FirstOffset    int64
	LastOffset     int64
	TopicID        int32
	// Relname is the segment table that holds the whole range, or "" when
	// none does (ReadTable).
	Relname string
	// LogEpoch is the partition's log epoch when the claim was made
	// (log_epoch_end() and internal/logread's epochs.go).
	LogEpoch int32
}

// lease is d as the interval parameter of the claim statements.
func lease(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// ClaimRange makes the claim p describes with claim_range(), committing
// the claim p names first. It returns nil, nil when there is nothing to
// claim. Errors are mapped (errs.Map): a lost claim to commit fails with
// errs.ClaimExpired or errs.ClaimNotHeld.
func (s *Store) ClaimRange(ctx context.Context, exec DBTX, p *ClaimParams) (*ClaimRow, error) {
	arg := dbsqlc.GroupClaimRangeParams{
		Topic: p.Topic, GroupName: p.Group, MaxRecords: p.MaxRecords, Lease: lease(p.Lease),
		Start: p.Start, RequireOwner: p.RequireOwner, Async: p.Async,
	}
	if p.Partition != nil {
		arg.Partition = pgtype.Int4{Int32: *p.Partition, Valid: true}
	}
	if p.Member != "" {
		arg.Member = pgtype.Text{String: p.Member, Valid: true}
	}
	if p.MaxBytes != 0 {
		arg.MaxBytes = pgtype.Int8{Int64: p.MaxBytes, Valid: true}
	}
	if p.Commit {
		arg.CommitPartition = pgtype.Int4{Int32: p.CommitPartition, Valid: true}
		arg.CommitEpoch = pgtype.Int8{Int64: p.CommitEpoch, Valid: true}
	}
	rows, err := s.q.GroupClaimRange(ctx, s.DB(exec), arg)
	if err != nil {
		return nil, errs.Map(err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	r := rows[0]
	return &ClaimRow{Partition: r.Partition, ClaimEpoch: r.ClaimEpoch, ClaimExpiresAt: r.ClaimExpiresAt.Time,
		FirstOffset: r.FirstOffset, LastOffset: r.LastOffset, TopicID: r.TopicID, Relname: r.Relname, LogEpoch: r.LogEpoch}, nil
}

// ClaimDirectResult is what ClaimDirect learned.
type ClaimDirectResult struct {
	// Row is the claim, nil when nothing was claimed.
	Row *ClaimRow
	// Fallback: claim_range() must answer (ClaimRange), to create the
	// group or to raise the error that explains why nothing was claimed.
	Fallback bool
	// Committed: the claim to commit was committed. ClaimAnyDirect may
	// make a claim (Row) without writing the commit asked for (see
	// claimAnyDirectSQL): the caller must then commit it on its own.
	Committed bool
	// Fetched: the RecordFunc received the claim's records (the statement
	// read them from the claim's segment; none when compaction removed
	// them all). Else whatever it received is not the claim's.
	Fetched bool
	// LSN is the primary's WAL position when the claim was made.
	LSN int64
}

// claimHead is the row a direct claim statement's head returns: whether
// the partition is the member's, the claim's columns (NULL when nothing
// was claimed), the segment table holding its whole range, the
// set_config column, and the claim's WAL position.
type claimHead struct {
	owned       pgtype.Bool
	epoch       pgtype.Int8
	expires     pgtype.Timestamptz
	first, last pgtype.Int8
	topicID     pgtype.Int4
	relname     pgtype.Text
	ignored     pgtype.Text
	lsn         pgtype.Int8
	logEpoch    pgtype.Int4
}

// dest is what Scan fills.
func (h *claimHead) dest() []any {
	return []any{&h.owned, &h.epoch, &h.expires, &h.first, &h.last, &h.topicID, &h.relname, &h.ignored, &h.lsn, &h.logEpoch}
}

// row is the claim made, of partition.
func (h *claimHead) row(partition int32) *ClaimRow {
	return &ClaimRow{Partition: partition, ClaimEpoch: h.epoch.Int64, ClaimExpiresAt: h.expires.Time,
		FirstOffset: h.first.Int64, LastOffset: h.last.Int64, TopicID: h.topicID.Int32, Relname: h.relname.String,
		LogEpoch: h.logEpoch.Int32}
}

// ClaimDirect runs the direct claim statement for p, which must be the
// case the direct statements cover (the caller checks): p.Partition set
// and claimed by its owner p.Member, no byte cap, a commit, if any, of the
// same partition, and a lease claim_range() accepts. With fetch
// (a segment table's name) and an exec that can send a pipeline, it reads
// the claimed records from that table in the same round trip and
// transaction (claimRecordsSQL) and hands them to add, but for those held
// covers (Held.Skipped); they are the claim's records when the result
// says Fetched.
func (s *Store) ClaimDirect(ctx context.Context, exec DBTX, p *ClaimParams, fetch string, held Held, add RecordFunc) (ClaimDirectResult, error) {
	var h claimHead
	args := []any{p.Topic, p.Group, *p.Partition, p.Member, p.MaxRecords, lease(p.Lease)}
	query := claimDirectSQL
	if p.Commit {
		query = claimCommitDirectSQL
		args = append(args, p.CommitEpoch)
	} else {
		args = append(args, p.Async)
	}
	token := leaseToken()
	args = append(args, token)
	if p.Commit {
		args = append(args, p.Async)
	}
	// Outside a caller's transaction, one pipeline: rowTIDPlanSQL (the
	// claim finds its rows by ctid), the claim, and the records with
	// fetch. A caller's transaction keeps its own settings, and the claim
	// runs alone in it.
	sb, ok := exec.(batcher)
	if _, inTx := exec.(pgx.Tx); inTx {
		ok = false
	}
	if !ok {
		fetch = ""
	}
	var (
		err     error
		headRow bool
		fetched bool
	)
	if !ok {
		err = s.DB(exec).QueryRow(ctx, query, args...).Scan(h.dest()...)
	} else {
		b := &pgx.Batch{}
		b.Queue(rowTIDPlanSQL)
		b.Queue(s.SQL(query), args...)
		if fetch != "" {
			b.Queue(s.SQL(claimRecordsSQL(fetch)), append([]any{p.Topic, p.Group, *p.Partition, token}, held.args()...)...)
		}
		br := sb.SendBatch(ctx, b)
		if _, err = br.Exec(); err == nil {
			err = br.QueryRow().Scan(h.dest()...)
		}
		if fetch != "" && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
			// The records' statement runs either way: its error (the
			// segment was dropped) aborts the pipeline's transaction,
			// the claim included. Its rows are the claim's only when the
			// claim's range is in that segment.
			fetched = err == nil && h.epoch.Valid && h.relname.Valid && h.relname.String == fetch
			rows, qerr := br.Query()
			if qerr == nil {
				if fetched {
					qerr = decodeRecords(rows, h.last.Int64-h.first.Int64+1, add)
				} else {
					rows.Close()
					qerr = rows.Err()
				}
			}
			if qerr != nil {
				err = qerr
			}
		}
		if cerr := br.Close(); cerr != nil && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
			err = cerr
		}
	}
	headRow = err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	if err != nil {
		return ClaimDirectResult{}, errs.Map(err)
	}
	if !headRow {
		// No cursor row (claim_range creates the group, or says why), or
		// the claim to commit is no longer held (it raises the error).
		return ClaimDirectResult{Fallback: true}, nil
	}
	if !h.epoch.Valid {
		// Nothing claimed: nothing to read, or not this member's partition
		// (claim_range then raises ErrNotAssigned or ErrNotMember).
		return ClaimDirectResult{Fallback: !h.owned.Valid || !h.owned.Bool, Committed: p.Commit}, nil
	}
	return ClaimDirectResult{Committed: p.Commit, LSN: h.lsn.Int64, Fetched: fetched, Row: h.row(*p.Partition)}, nil
}

// Commit advances the group's cursor past the claim epoch of partition
// (to next, when not nil) and ends the claim (commit()). It fails with
// errs.ClaimExpired or errs.ClaimNotHeld when the claim was lost.
func (s *Store) Commit(ctx context.Context, exec DBTX, topic, group string, partition int32, epoch int64, next *int64) error {
	arg := dbsqlc.GroupCommitParams{Topic: topic, GroupName: group, Partition: partition, ClaimEpoch: epoch}
	if next != nil {
		arg.NextOffset = pgtype.Int8{Int64: *next, Valid: true}
	}
	_, err := s.q.GroupCommit(ctx, s.DB(exec), arg)
	return errs.Map(err)
}

// Release ends the claim epoch of partition without committing
// (release()).
func (s *Store) Release(ctx context.Context, exec DBTX, topic, group string, partition int32, epoch int64) error {
	return errs.Map(s.q.GroupRelease(ctx, s.DB(exec), dbsqlc.GroupReleaseParams{
		Topic: topic, GroupName: group, Partition: partition, ClaimEpoch: epoch,
	}))
}

// Extend keeps the claim epoch of partition for lease more from now
// (extend()) and returns its new expiry.
func (s *Store) Extend(ctx context.Context, exec DBTX, topic, group string, partition int32, epoch int64, d time.Duration) (time.Time, error) {
	exp, err := s.q.GroupExtend(ctx, s.DB(exec), dbsqlc.GroupExtendParams{
		Topic: topic, GroupName: group, Partition: partition, ClaimEpoch: epoch, Lease: lease(d),
	})
	if err != nil {
		return time.Time{}, errs.Map(err)
	}
	return exp.Time, nil
}

// logEpochEndSQL is log_epoch_end(): the partition's current log epoch and
// where epoch $3 ends on this server.
const logEpochEndSQL = `SELECT e.log_epoch, e.end_offset FROM pgmsg.log_epoch_end($1::text, $2::integer, $3::integer) e`

// LogEpochEnd returns partition's current log epoch and the end
// (exclusive) of its log epoch epoch on this server (log_epoch_end()).
func (s *Store) LogEpochEnd(ctx context.Context, exec DBTX, topic string, partition, epoch int32) (current int32, end int64, err error) {
	err = s.DB(exec).QueryRow(ctx, logEpochEndSQL, topic, partition, epoch).Scan(&current, &end)
	return current, end, errs.Map(err)
}
