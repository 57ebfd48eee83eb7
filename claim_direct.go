package pgmsg

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
)

// The consumer's claim cycle as static statements against the tables:
// claim_range() for the case Consumer.Run meets on every cycle (a member
// that owns one partition claims it, committing its previous claim of the
// same partition), run from the connection's cached generic plan instead
// of a PL/pgSQL call (issue 12: the calls' executor set-up, the pinned
// search_path's save and restore and the returned rows' tuplestore were
// the largest share of the server's time under mixed load; see
// docs/benchmarks.md). Every other case, and every answer that needs an
// error explained (the claim to commit is no longer held, the partition
// is not this member's, the group does not exist), goes to claim_range(),
// which stays the reference for the semantics (docs/sql-api.md).
//
// Parameters: $1 topic, $2 group, $3 partition, $4 member, $5 max records,
// $6 lease. A claim's epoch is drawn by _claim_token, as in claim_range.

// claimDirectCTE and claimDirectHead (one statement) claim the next
// records of one partition for its owner, skipping it if another
// transaction holds its cursor row ($7: commit
// asynchronously, as claim_range's p_async). It returns one row: the
// claim's columns, or NULLs when nothing was claimed, and then whether the
// partition is the member's (NULL: no cursor row). The cursor row is read
// once when it claims (the UPDATE finds the locked row by its ctid): with
// a long snapshot held, each read walks every version the row has had
// since, which made the claim 10 times slower when it read it three times.
const claimDirectCTE = `WITH n AS (SELECT clock_timestamp() AS ts, pg_current_wal_insert_lsn() AS lsn),
cur AS (
    SELECT c.ctid AS tid, c.topic_id, c.next_offset, c.claim_epoch, tp.next_offset AS tip
      FROM pgmsg.topic tt
      JOIN pgmsg.group_cursor c ON c.topic_id = tt.topic_id
      JOIN pgmsg.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
      CROSS JOIN n
     WHERE tt.name = $1::text AND c.group_name = $2::text AND c.partition = $3::integer
       AND c.owner = $4::text AND c.next_owner IS NULL
       AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= n.ts)
       AND tp.next_offset > c.next_offset
       FOR UPDATE OF c SKIP LOCKED
), upd AS (
    UPDATE pgmsg.group_cursor c
       SET claim_epoch = pgmsg._claim_token(cur.claim_epoch),
           claim_start = cur.next_offset, claim_end = least(cur.tip - 1, cur.next_offset + $5::integer - 1),
           claim_expires_at = n.ts + $6::interval, claim_owner = $4::text, claimed_at = n.ts
      FROM cur, n
     WHERE c.ctid = cur.tid
    RETURNING c.topic_id, c.claim_epoch, c.claim_expires_at, c.claim_start, c.claim_end
)`

const claimDirectHead = `
SELECT CASE WHEN upd.claim_epoch IS NOT NULL THEN true
            ELSE (SELECT c.owner = $4::text AND c.next_owner IS NULL
                    FROM pgmsg.topic tt JOIN pgmsg.group_cursor c ON c.topic_id = tt.topic_id
                   WHERE tt.name = $1::text AND c.group_name = $2::text AND c.partition = $3::integer) END,
       upd.claim_epoch, upd.claim_expires_at, upd.claim_start, upd.claim_end, upd.topic_id,
       (SELECT s.relname FROM pgmsg.segment s
         WHERE s.topic_id = upd.topic_id AND s.partition = $3::integer AND s.start_offset <= upd.claim_start
           AND s.end_offset > upd.claim_end
         ORDER BY s.start_offset DESC LIMIT 1),
       CASE WHEN upd.claim_epoch IS NOT NULL AND $7::boolean THEN set_config('synchronous_commit', 'off', true) END,
       ` + claimLSNColumn + `
  FROM (SELECT 1) one LEFT JOIN upd ON true`

// claimCommitDirectCTE and claimCommitDirectHead (one statement) commit
// the claim $7 (an epoch) of the partition
// and claims the partition's next records in the same row version: it
// returns no row when that claim is no longer held (claim_range() then
// raises the error commit() would). The commit is synchronous.
const claimCommitDirectCTE = `WITH n AS (SELECT clock_timestamp() AS ts, pg_current_wal_insert_lsn() AS lsn),
cur AS (
    SELECT c.ctid AS tid, c.topic_id, c.claim_end + 1 AS done_to, c.claim_epoch, tp.next_offset AS tip,
           (c.owner = $4::text AND c.next_owner IS NULL) AS owned
      FROM pgmsg.topic tt
      JOIN pgmsg.group_cursor c ON c.topic_id = tt.topic_id
      JOIN pgmsg.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
      CROSS JOIN n
     WHERE tt.name = $1::text AND c.group_name = $2::text AND c.partition = $3::integer
       AND c.claim_epoch = $7::bigint AND c.claim_end IS NOT NULL AND c.claim_expires_at > n.ts
       FOR UPDATE OF c
), p AS (
    SELECT cur.*, (cur.owned AND cur.tip > cur.done_to) AS claiming FROM cur
), upd AS (
    UPDATE pgmsg.group_cursor c
       SET next_offset = p.done_to, committed_at = n.ts,
           claim_epoch = CASE WHEN p.claiming THEN pgmsg._claim_token(p.claim_epoch) ELSE c.claim_epoch END,
           claim_start = CASE WHEN p.claiming THEN p.done_to END,
           claim_end = CASE WHEN p.claiming THEN least(p.tip - 1, p.done_to + $5::integer - 1) END,
           claim_expires_at = CASE WHEN p.claiming THEN n.ts + $6::interval END,
           claim_owner = CASE WHEN p.claiming THEN $4::text END,
           claimed_at = CASE WHEN p.claiming THEN n.ts ELSE c.claimed_at END
      FROM p, n
     WHERE c.ctid = p.tid
    RETURNING p.owned, p.claiming, c.topic_id, c.claim_epoch, c.claim_expires_at, c.claim_start, c.claim_end
)`

const claimCommitDirectHead = `
SELECT upd.owned, CASE WHEN upd.claiming THEN upd.claim_epoch END, upd.claim_expires_at, upd.claim_start,
       upd.claim_end, upd.topic_id,
       (SELECT s.relname FROM pgmsg.segment s
         WHERE s.topic_id = upd.topic_id AND s.partition = $3::integer AND s.start_offset <= upd.claim_start
           AND s.end_offset > upd.claim_end
         ORDER BY s.start_offset DESC LIMIT 1),
       NULL::text, ` + claimLSNColumn + `
  FROM upd`

// claimFetchSQL is a direct claim statement (its CTEs and its head row,
// as above) that also returns the claimed records, read from the segment
// table relname in the same statement: one round trip per claim cycle
// instead of two (issue 12). The head row comes first with the record
// columns NULL, then one row per record with the head's columns NULL.
// relname is the table that held the partition's previous claim: when
// the head names another segment (the range moved on to the next one, or
// spans two), the records read are not the claim's and the caller reads
// them with readRange. The statement names a plain table, so it runs from
// a cached generic plan.
func claimFetchSQL(cte, head, relname string) string {
	return cte + `, h AS (` + head + `)
SELECT h.*, NULL::bigint, NULL::timestamptz, NULL::bytea, NULL::bytea, NULL::jsonb FROM h
UNION ALL
SELECT NULL::boolean, NULL::bigint, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::integer, NULL::text, NULL::text,
       NULL::bigint, r."offset", r."timestamp", r.key, r.value, r.headers
  FROM upd JOIN pgmsg.` + pgx.Identifier{relname}.Sanitize() + ` r
    ON r.topic_id = upd.topic_id AND r.partition = $3::integer AND r."offset" BETWEEN upd.claim_start AND upd.claim_end`
}

// claimFetchColumns is how many columns of claimFetchSQL's rows are the
// head's; the record's five follow.
const claimFetchColumns = 9

// claimLSNColumn is the primary's WAL insert position when the claim
// statement began (read before its UPDATE), in bytes: every record the
// claim can see was committed before it, so a read replica that has
// replayed this far holds them all (replica.go).
const claimLSNColumn = `(SELECT (n.lsn - '0/0'::pg_lsn)::bigint FROM n)`

// claimDirectResult is what claimDirect learned: row is the claim (nil
// when nothing was claimed); fallback means claim_range() must answer
// (and committed whether the commit was done meanwhile). fetched: records
// are the claim's records (claimFetchSQL read them from the right table;
// not nil, empty when compaction removed them all).
type claimDirectResult struct {
	row       *dbsqlc.GroupClaimRangeRow
	fallback  bool
	committed bool
	fetched   bool
	records   []*Record
	lsn       int64
}

// canClaimDirect reports whether params are the case the direct statements
// cover: a named partition claimed by its owner, no byte cap, a commit (if
// any) of the same partition, and a lease claim_range() accepts (the
// statements do not check it).
func canClaimDirect(params *dbsqlc.GroupClaimRangeParams) bool {
	return params.Partition.Valid && params.RequireOwner && params.Member.Valid && !params.MaxBytes.Valid &&
		(!params.CommitEpoch.Valid || params.CommitPartition == params.Partition) &&
		params.Lease.Valid && params.Lease.Months == 0 && params.Lease.Days == 0 &&
		params.Lease.Microseconds > 0 && params.Lease.Microseconds <= durationMax.Microseconds()
}

// claimDirect runs the direct claim statement params describe. With fetch
// (a segment table's name) it reads the claimed records from that table in
// the same statement (claimFetchSQL).
func (c *Client) claimDirect(ctx context.Context, exec DBTX, params *dbsqlc.GroupClaimRangeParams, fetch string) (claimDirectResult, error) {
	var (
		owned   pgtype.Bool
		epoch   pgtype.Int8
		expires pgtype.Timestamptz
		first   pgtype.Int8
		last    pgtype.Int8
		topicID pgtype.Int4
		relname pgtype.Text
		ignored pgtype.Text
		lsn     pgtype.Int8
	)
	args := []any{params.Topic, params.GroupName, params.Partition.Int32, params.Member.String, params.MaxRecords, params.Lease}
	cte, head := claimDirectCTE, claimDirectHead
	if params.CommitEpoch.Valid {
		cte, head = claimCommitDirectCTE, claimCommitDirectHead
		args = append(args, params.CommitEpoch.Int64)
	} else {
		args = append(args, params.Async)
	}
	var (
		err     error
		headRow bool
		recs    *recordDecoder
	)
	if fetch == "" {
		err = c.db(exec).QueryRow(ctx, cte+head, args...).Scan(&owned, &epoch, &expires, &first, &last, &topicID, &relname, &ignored, &lsn)
		headRow = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	} else {
		var rows pgx.Rows
		rows, err = c.db(exec).Query(ctx, claimFetchSQL(cte, head, fetch), args...)
		if err == nil {
			for rows.Next() && err == nil {
				if v := rows.RawValues(); len(v) > claimFetchColumns && v[claimFetchColumns] != nil {
					if recs == nil {
						recs = newRecordDecoder(rows.FieldDescriptions(), claimFetchColumns, params.Topic,
							params.Partition.Int32, int(params.MaxRecords))
					}
					err = recs.add(rows)
					continue
				}
				headRow = true
				err = rows.Scan(&owned, &epoch, &expires, &first, &last, &topicID, &relname, &ignored, &lsn,
					nil, nil, nil, nil, nil)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	}
	if err != nil {
		return claimDirectResult{}, err
	}
	if !headRow {
		// No cursor row (claim_range creates the group, or says why), or
		// the claim to commit is no longer held (it raises the error).
		return claimDirectResult{fallback: true}, nil
	}
	committed := params.CommitEpoch.Valid
	if !epoch.Valid {
		// Nothing claimed: nothing to read, or not this member's partition
		// (claim_range then raises ErrNotAssigned or ErrNotMember).
		return claimDirectResult{fallback: !owned.Valid || !owned.Bool, committed: committed}, nil
	}
	res := claimDirectResult{committed: committed, lsn: lsn.Int64, row: &dbsqlc.GroupClaimRangeRow{
		Partition: params.Partition.Int32, ClaimEpoch: epoch.Int64, ClaimExpiresAt: expires,
		FirstOffset: first.Int64, LastOffset: last.Int64, TopicID: topicID.Int32, Relname: relname.String,
	}}
	if fetch != "" && relname.Valid && relname.String == fetch {
		res.fetched, res.records = true, []*Record{}
		if recs != nil {
			res.records = recs.recs
		}
		if !slices.IsSortedFunc(res.records, func(a, b *Record) int { return cmp.Compare(a.Offset, b.Offset) }) {
			// The statement has no ORDER BY (a sort of up to a claim of
			// records for a plan that reads them in order anyway).
			slices.SortFunc(res.records, func(a, b *Record) int { return cmp.Compare(a.Offset, b.Offset) })
		}
	}
	return res, nil
}
