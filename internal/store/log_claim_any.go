package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// claimAnyDirectSQL is claim_range() for a member that owns several
// partitions of a topic and names none (Consumer.Run's claim when the
// membership gave it more than one): it claims the owned partition with
// unread records and no live claim that was claimed least recently,
// committing the claim $7 of partition $3 first (none when $7 is NULL;
// that partition counts as committed: unclaimed, its cursor past the
// claim), as one static statement from the connection's cached generic
// plan instead of a PL/pgSQL call (with 256 partitions and 16 members,
// claim_range()'s call was 9 % of the server's samples; docs/benchmarks.md,
// "Scale"). It writes the cursor rows as claim_range() does: the claimed
// one, and the committed one when that is another or nothing is claimed.
//
// It returns one row: whether it claimed, whether it wrote the commit,
// and the claim's columns (NULL when it only committed, or when it found
// nothing to claim without a commit for a member of the group:
// claim_range() would return nothing then, after the same check of the
// member's row, and the poll of an idle member is one statement, not
// two). No row means it wrote nothing and claim_range() must answer: the
// claim to commit is no longer held, or the member is not in the group
// (claim_range() creates the group, or explains the error).
//
// A claim may be made while the commit is not written. d locks the
// committed claim's cursor row; when a transaction that committed after
// this statement took its snapshot changed that row (a rebalance marking
// the partition for hand-over: next_owner), the lock moves on to the
// row's newest version (READ COMMITTED) and d returns that version's
// ctid, but the UPDATE reads the table through the statement's snapshot,
// which cannot see that version: it writes nothing for it, and still
// claims another partition. The commit's column says so, and the caller
// commits on its own (internal/logread). Taking such a commit as made
// left the claim live until its lease ran out, the hand-over waiting for
// it, and then gave the handled records to the partition's new owner
// again (TestClaimAnyDirectCommitRace).
//
// Parameters: $1 topic, $2 group, $3 the partition to commit (NULL:
// none), $4 member, $5 max records, $6 lease, $7 the epoch to commit, $8
// the token drawn for the claim's epoch (claim_epoch.sql), $9 commit
// asynchronously (claim_range's p_async).
var claimAnyDirectSQL = `WITH n AS (SELECT pg_catalog.clock_timestamp() AS ts, pg_catalog.pg_current_wal_insert_lsn() AS lsn),
d AS (
    SELECT c.ctid AS tid, c.claim_end + 1 AS done_to
      FROM pgmsg.group_cursor c CROSS JOIN n
     WHERE c.topic_id = (SELECT tt.topic_id FROM pgmsg.topic tt WHERE tt.name = $1::text)
       AND c.group_name = $2::text AND c.partition = $3::integer
       AND c.claim_epoch = $7::bigint AND c.claim_end IS NOT NULL AND c.claim_expires_at > n.ts
       FOR UPDATE OF c
), cur AS (
    SELECT c.ctid AS tid, coalesce(c.partition = $3::integer, false) AS commits, f.next, c.claim_epoch,
           tp.next_offset AS tip, tp.log_epoch
      FROM pgmsg.group_cursor c
      JOIN pgmsg.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
      CROSS JOIN n
      CROSS JOIN LATERAL (SELECT CASE WHEN c.partition = $3::integer THEN (SELECT d.done_to FROM d) ELSE c.next_offset END AS next) f
     WHERE c.topic_id = (SELECT tt.topic_id FROM pgmsg.topic tt WHERE tt.name = $1::text)
       AND c.group_name = $2::text AND c.owner = $4::text AND c.next_owner IS NULL
       AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= n.ts OR c.partition = $3::integer)
       AND tp.next_offset > f.next
       AND ($7::bigint IS NULL OR EXISTS (SELECT 1 FROM d))
     ORDER BY c.claimed_at NULLS FIRST, c.partition
     LIMIT 1
       FOR UPDATE OF c SKIP LOCKED
), x AS (
    SELECT cur.tid, true AS claiming, cur.commits, cur.next, cur.claim_epoch, cur.tip, cur.log_epoch FROM cur
    UNION ALL
    SELECT d.tid, false, true, d.done_to, NULL, NULL, NULL FROM d
     WHERE NOT EXISTS (SELECT 1 FROM cur WHERE cur.commits)
       AND (EXISTS (SELECT 1 FROM cur)
            OR EXISTS (SELECT 1 FROM pgmsg.group_member m
                        WHERE m.topic_id = (SELECT tt.topic_id FROM pgmsg.topic tt WHERE tt.name = $1::text)
                          AND m.group_name = $2::text AND m.member_id = $4::text))
), upd AS (
    UPDATE pgmsg.group_cursor c
       SET next_offset = x.next,
           committed_at = CASE WHEN x.commits THEN n.ts ELSE c.committed_at END,
           claim_epoch = CASE WHEN x.claiming THEN ` + stmt("claim_epoch", "$8::bigint", "x.claim_epoch") + ` ELSE c.claim_epoch END,
           claim_start = CASE WHEN x.claiming THEN x.next END,
           claim_end = CASE WHEN x.claiming THEN least(x.tip - 1, x.next + $5::integer - 1) END,
           claim_expires_at = CASE WHEN x.claiming THEN n.ts + $6::interval END,
           claim_owner = CASE WHEN x.claiming THEN $4::text END,
           claimed_at = CASE WHEN x.claiming THEN n.ts ELSE c.claimed_at END
      FROM x, n
     WHERE c.ctid = x.tid
    RETURNING x.claiming, x.commits, c.partition, c.topic_id, c.claim_epoch, c.claim_expires_at, c.claim_start, c.claim_end, x.log_epoch
), u AS (
    SELECT * FROM upd ORDER BY upd.claiming DESC LIMIT 1
)
SELECT u.claiming, EXISTS (SELECT 1 FROM upd WHERE upd.commits), u.partition, u.claim_epoch, u.claim_expires_at, u.claim_start,
       u.claim_end, u.topic_id,
       CASE WHEN u.claiming THEN
       (SELECT s.relname FROM pgmsg.segment s
         WHERE s.topic_id = u.topic_id AND s.partition = u.partition AND s.start_offset <= u.claim_start
           AND s.end_offset > u.claim_end
         ORDER BY s.start_offset DESC LIMIT 1) END,
       CASE WHEN $9::boolean THEN pg_catalog.set_config('synchronous_commit', 'off', true) END, ` + claimLSNColumn + `,
       u.log_epoch
  FROM u
UNION ALL
SELECT false, false, NULL::integer, NULL::bigint, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::integer, NULL::text,
       NULL::text, NULL::bigint, NULL::integer
 WHERE $7::bigint IS NULL AND NOT EXISTS (SELECT 1 FROM u)
   AND EXISTS (SELECT 1 FROM pgmsg.group_member m
                WHERE m.topic_id = (SELECT tt.topic_id FROM pgmsg.topic tt WHERE tt.name = $1::text)
                  AND m.group_name = $2::text AND m.member_id = $4::text)`

// ClaimAnyDirect runs claimAnyDirectSQL for p, which must be the case it
// covers (the caller checks): no partition named, claimed by the owner
// p.Member, no byte cap, and a lease claim_range() accepts; a commit, if
// any, of any partition. Fallback in the result means it wrote nothing
// and claim_range() must answer (ClaimRange, with p's commit); otherwise
// the commit, if any, was made and Row is the claim (nil: nothing to
// claim).
func (s *Store) ClaimAnyDirect(ctx context.Context, exec DBTX, p *ClaimParams) (ClaimDirectResult, error) {
	var (
		commitPart pgtype.Int4
		commitEp   pgtype.Int8
		claiming   bool
		committed  bool
		partition  pgtype.Int4
		h          claimHead
	)
	if p.Commit {
		commitPart = pgtype.Int4{Int32: p.CommitPartition, Valid: true}
		commitEp = pgtype.Int8{Int64: p.CommitEpoch, Valid: true}
	}
	err := s.DB(exec).QueryRow(ctx, claimAnyDirectSQL, p.Topic, p.Group, commitPart, p.Member, p.MaxRecords, lease(p.Lease),
		commitEp, leaseToken(), p.Async).Scan(&claiming, &committed, &partition, &h.epoch, &h.expires, &h.first, &h.last,
		&h.topicID, &h.relname, &h.ignored, &h.lsn, &h.logEpoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return ClaimDirectResult{Fallback: true}, nil
	}
	if err != nil {
		return ClaimDirectResult{}, errs.Map(err)
	}
	if !claiming {
		// The row is the committed claim's (written), or says there was
		// nothing to claim and no commit.
		return ClaimDirectResult{Committed: p.Commit}, nil
	}
	return ClaimDirectResult{Committed: p.Commit && committed, LSN: h.lsn.Int64, Row: h.row(partition.Int32)}, nil
}
