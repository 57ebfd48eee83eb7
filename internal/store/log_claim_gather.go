package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// The gathered claim: the direct claim statements (log_claim.go) for
// several groups of one partition at once, in one statement, with their
// records read once for all of them in the same round trip. A process
// that runs several groups' consumers of a topic (a service with several
// projections, the bench's five groups) is woken for a partition once for
// all of them, and each of them then claimed the same new records and read
// them on its own: five round trips, five transactions and five copies of
// the records on the wire where one does (the mixed load at 5,000
// writes/s, docs/benchmarks.md). Each group keeps its own
// cursor row, claim epoch and lease, so fencing and the commit's
// semantics are the direct statements'; a request the statement cannot
// settle (the claim to commit is no longer held, or its row is locked,
// the partition is not the member's, the group does not exist) is left
// to the caller, which makes it on its own (ClaimDirect, then
// claim_range()). TestClaimParity (log_claim_test.go) runs the same
// claims through all three.

// claimGatherSQL claims for each request (one element of the arrays $2
// to $7) as claimDirectCTE does (the rows found by their ctids,
// cursorTID and partitionRow), or, with a commit epoch, commits that
// claim and claims on as claimCommitDirectCTE does. A request's row is
// skipped while another transaction holds it (SKIP LOCKED, the commit's
// included: the caller then commits it on its own). It returns one row
// per request, in order: whether the statement settled it (it found the
// row), whether the partition is the member's (for an unsettled request
// without a commit: true means there was nothing to claim), the claim's
// columns (NULL: nothing claimed), its segment table, and the claim's WAL
// position. $1 topic, $2 groups, $3 members, $4 max records, $5 leases in
// microseconds, $6 commit epochs (NULL: no commit), $7 the new claims'
// epochs as drawn by the client, $8 partition, $9 commit asynchronously.
var claimGatherSQL = `WITH n AS (SELECT pg_catalog.clock_timestamp() AS ts, pg_catalog.pg_current_wal_insert_lsn() AS lsn),
q AS (
    SELECT * FROM ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[]), pg_catalog.unnest($4::integer[]),
                             pg_catalog.unnest($5::bigint[]), pg_catalog.unnest($6::bigint[]), pg_catalog.unnest($7::bigint[]))
        WITH ORDINALITY AS q(grp, member, max_records, lease_us, commit_epoch, token, ord)
),
cur AS (
    SELECT c.tid, q.ord, q.member, q.max_records, q.lease_us, q.token,
           q.commit_epoch IS NOT NULL AS committing, c.claim_epoch,
           CASE WHEN q.commit_epoch IS NULL THEN c.next_offset ELSE c.claim_end + 1 END AS done_to,
           tp.next_offset AS tip, tp.log_epoch, (c.owner = q.member AND c.next_owner IS NULL) AS owned
      FROM pgmsg.topic tt
      CROSS JOIN LATERAL (` + partitionRow("tt.topic_id", "$8::integer") + `) tp
      CROSS JOIN q
      CROSS JOIN n
      CROSS JOIN LATERAL (
        SELECT c.ctid AS tid, c.claim_epoch, c.claim_end, c.next_offset, c.owner, c.next_owner
          FROM pgmsg.group_cursor c
         WHERE c.ctid = ` + cursorTID("tt.topic_id", "q.grp", "$8::integer") + `
           AND c.topic_id = tt.topic_id AND c.group_name = q.grp AND c.partition = $8::integer
           AND CASE WHEN q.commit_epoch IS NULL
                    THEN c.owner = q.member AND c.next_owner IS NULL
                         AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= n.ts) AND tp.next_offset > c.next_offset
                    ELSE c.claim_epoch = q.commit_epoch AND c.claim_end IS NOT NULL AND c.claim_expires_at > n.ts END
           FOR UPDATE SKIP LOCKED) c
     WHERE tt.name = $1::text
), p AS (
    SELECT cur.*, (cur.owned AND cur.tip > cur.done_to) AS claiming FROM cur
), upd AS (
    UPDATE pgmsg.group_cursor c
       SET next_offset = p.done_to,
           committed_at = CASE WHEN p.committing THEN n.ts ELSE c.committed_at END,
           claim_epoch = CASE WHEN NOT p.claiming THEN c.claim_epoch
                              ELSE ` + stmt("claim_epoch", "p.token", "p.claim_epoch") + ` END,
           claim_start = CASE WHEN p.claiming THEN p.done_to END,
           claim_end = CASE WHEN p.claiming THEN least(p.tip - 1, p.done_to + p.max_records - 1) END,
           claim_expires_at = CASE WHEN p.claiming THEN n.ts + p.lease_us * interval '1 microsecond' END,
           claim_owner = CASE WHEN p.claiming THEN p.member END,
           claimed_at = CASE WHEN p.claiming THEN n.ts ELSE c.claimed_at END
      FROM p, n
     WHERE c.ctid = p.tid
    RETURNING p.ord, p.owned, p.claiming, c.topic_id, c.claim_epoch, c.claim_expires_at, c.claim_start, c.claim_end,
              p.log_epoch
)
SELECT u.ord IS NOT NULL,
       CASE WHEN u.ord IS NOT NULL THEN u.owned
            ELSE (SELECT c.owner = q.member AND c.next_owner IS NULL
                    FROM pgmsg.topic tt
                    CROSS JOIN LATERAL (` + cursorRow("c.owner, c.next_owner", "tt.topic_id", "q.grp", "$8::integer") + `
                    OFFSET 0) c
                   WHERE tt.name = $1::text) END,
       CASE WHEN u.claiming THEN u.claim_epoch END, u.claim_expires_at, u.claim_start, u.claim_end, u.topic_id,
       (SELECT s.relname FROM pgmsg.segment s
         WHERE u.claiming AND s.topic_id = u.topic_id AND s.partition = $8::integer AND s.start_offset <= u.claim_start
           AND s.end_offset > u.claim_end
         ORDER BY s.start_offset DESC LIMIT 1),
       CASE WHEN u.ord IS NOT NULL AND $9::boolean THEN pg_catalog.set_config('synchronous_commit', 'off', true) END,
       ` + claimLSNColumn + `, u.log_epoch
  FROM q LEFT JOIN upd u ON u.ord = q.ord
 ORDER BY q.ord`

// claimGatherRecordsSQL reads the records of the claims the gathered claim
// statement just made (in the same pipeline, as claimRecordsSQL) from the
// segment table relname, once per distinct range: the groups of a
// partition that keep up claim the same range, and its records cross the
// wire once, but for the part the caller holds (Held). $1 topic, $2
// groups, $3 the claims' epochs as drawn ($7 of the claim statement), $4
// partition, $5 to $7 Held.args.
func claimGatherRecordsSQL(relname string) string {
	return `SELECT r."offset", r."timestamp", r.key, r.value, r.headers
  FROM (SELECT DISTINCT c.topic_id, c.claim_start, c.claim_end
          FROM pgmsg.topic tt
          CROSS JOIN ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::bigint[])) AS q(grp, token)
          CROSS JOIN LATERAL (` + cursorRow("c.topic_id, c.claim_start, c.claim_end", "tt.topic_id", "q.grp", "$4::integer") + `
               AND c.claim_epoch IN (q.token, ` + stmt("token_next", "q.token") + `) AND c.claim_start IS NOT NULL
            OFFSET 0) c
         WHERE tt.name = $1::text) g
  CROSS JOIN LATERAL (
    SELECT r."offset", r."timestamp", r.key, r.value, r.headers
      FROM pgmsg.` + pgx.Identifier{relname}.Sanitize() + ` r
     WHERE r.topic_id = g.topic_id AND r.partition = $4::integer
       AND r."offset" BETWEEN ` + heldLow("g", "$5", "$6", "$7") + ` AND ` + heldHigh("g", "$5", "$6", "$7") + `
    OFFSET 0) r`
}

// ClaimGatherReq is one group's request in a gathered claim: a claim of
// the partition by its owner Member, committing CommitEpoch first when
// Commit (a claim of the same partition).
type ClaimGatherReq struct {
	Group, Member string
	MaxRecords    int32
	Lease         time.Duration
	Commit        bool
	CommitEpoch   int64
}

// ClaimGatherResult is what the gathered claim did for one request.
type ClaimGatherResult struct {
	// Settled: the statement found the request's cursor row and did what
	// it asked (committed, claimed, or both), or found nothing to claim
	// for the partition's owner. Else nothing was done for it and the
	// caller makes it on its own.
	Settled bool
	// Committed: the claim to commit was committed.
	Committed bool
	// Row is the claim made, nil when none.
	Row *ClaimRow
	// Fetched: the records the RecordFunc received include the claim's
	// (it is in the segment they were read from).
	Fetched bool
	// LSN is the primary's WAL position when the claim was made.
	LSN int64
}

// ClaimGather makes the requests' claims of one partition of topic in
// one statement on pool, and reads the claimed records from the segment
// table fetch in the same round trip, each distinct range once, handing
// them to add (in no particular order; a record may come twice when two
// claims' ranges overlap without being equal), but for those held covers
// (Held.Skipped, claim by claim). Each request must be the
// case ClaimDirect covers, and no two may name the same group. async
// commits the transaction asynchronously. An error means nothing was done
// for any request.
func (s *Store) ClaimGather(ctx context.Context, pool BatchSender, topic string, partition int32, fetch string, async bool,
	held Held, reqs []ClaimGatherReq, add RecordFunc) ([]ClaimGatherResult, error) {
	n := len(reqs)
	groups, members := make([]string, n), make([]string, n)
	maxRecords := make([]int32, n)
	leases := make([]int64, n)
	commits := make([]pgtype.Int8, n)
	tokens := make([]int64, n)
	for i, r := range reqs {
		groups[i], members[i], maxRecords[i], leases[i] = r.Group, r.Member, r.MaxRecords, r.Lease.Microseconds()
		if r.Commit {
			commits[i] = pgtype.Int8{Int64: r.CommitEpoch, Valid: true}
		}
		tokens[i] = leaseToken()
	}
	b := &pgx.Batch{}
	// The arrays' length is known to a custom plan (unnest's estimate),
	// so the plan cache would find every generic plan dearer and plan
	// each call again (the planner was the server's top symbols): the
	// pipeline's transaction asks for the generic plan.
	b.Queue(rowTIDPlanSQL)
	b.Queue(s.SQL(claimGatherSQL), topic, groups, members, maxRecords, leases, commits, tokens, partition, async)
	b.Queue(s.SQL(claimGatherRecordsSQL(fetch)), append([]any{topic, groups, tokens, partition}, held.args()...)...)
	br := pool.SendBatch(ctx, b)
	_, err := br.Exec()
	var res []ClaimGatherResult
	if err == nil {
		res, err = s.scanGather(br, partition, reqs, fetch)
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = decodeRecords(rows, gatherExpect(res), add)
		}
	}
	if cerr := br.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return nil, errs.Map(err)
	}
	return res, nil
}

// gatherExpect is how many rows the records' statement returns at most:
// the lengths of the distinct ranges claimed.
func gatherExpect(res []ClaimGatherResult) int64 {
	type span struct{ first, last int64 }
	seen := map[span]bool{}
	var n int64
	for _, r := range res {
		if r.Row == nil {
			continue
		}
		if s := (span{r.Row.FirstOffset, r.Row.LastOffset}); !seen[s] {
			seen[s] = true
			n += s.last - s.first + 1
		}
	}
	return n
}

// scanGather reads the gathered claim statement's rows (one per request).
func (s *Store) scanGather(br pgx.BatchResults, partition int32, reqs []ClaimGatherReq, fetch string) ([]ClaimGatherResult, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	res := make([]ClaimGatherResult, 0, len(reqs))
	for rows.Next() {
		var (
			settled bool
			h       claimHead
		)
		if err := rows.Scan(append([]any{&settled}, h.dest()...)...); err != nil {
			return nil, err
		}
		i := len(res)
		if i >= len(reqs) {
			return nil, errors.New("pgmsg: the gathered claim returned more rows than requests")
		}
		r := ClaimGatherResult{LSN: h.lsn.Int64}
		switch {
		case settled:
			r.Settled, r.Committed = true, reqs[i].Commit
			if h.epoch.Valid {
				r.Row = h.row(partition)
				r.Fetched = h.relname.Valid && h.relname.String == fetch
			}
		case !reqs[i].Commit && h.owned.Valid && h.owned.Bool:
			// The owner's partition has nothing to claim (or another
			// transaction is claiming it): the direct statement's answer.
			r.Settled = true
		}
		res = append(res, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(res) != len(reqs) {
		return nil, errors.New("pgmsg: the gathered claim returned fewer rows than requests")
	}
	return res, nil
}
