package pgmsg

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
)

// The worker's claim as a static statement against the tables, run from
// the connection's cached generic plan instead of a PL/pgSQL call (issue
// 13): job_claim() spent about 40 % of its time outside the statements
// that do the work (planning its statements' custom plans, the pinned
// settings' save and restore, the returned rows' tuplestore). job_claim()
// stays the reference for the semantics (docs/sql-api.md); the statement
// covers its common path and leaves the rest to it. (Completions are the
// sqlc query JobCompleteMany, job_complete_many() against the tables.)

// jobClaimDirectSQL claims up to $2 jobs of queue $1, as job_claim() does,
// starting from the claim position $5, $6, $7 (priority, run_at, id of the
// last job the client handed out; NULLs: none) and reading the whole
// job_claim index, in claim order, when the positioned reads find too few.
// $3 lease (NULL: the queue's), $4 worker, $8 commit asynchronously, $9 the
// claim's first lease token (the client draws it, as job_claim() draws
// one with _lease_token(): job k of the claim gets $9 + k - 1, wrapped into
// [1, 2^53-1]; a SQL function call here, planned on every call, was 4 % of
// the server's time).
//
// It returns the claimed jobs in claim order, then one row with a NULL id
// and a reason in the last column when job_claim() has to follow:
// 'unknown' when the queue does not exist (job_claim() raises the error),
// 'expired' when $10 asked for a probe of the job_lease index and it found
// an expired lease (the client's next claim rescues it with job_rescue()),
// 'limited' when the queue has a rate limit or a running cap.
// It needs no byte cap: the client calls job_claim() for those
// (claimJobsDirect).
//
// A paused queue hands out nothing: its reads find no queue id. Nor does a
// queue with a rate limit or a running cap (migration 010): the statement
// answers 'limited', and job_claim(), which applies the limits, claims.
//
// Reads, as job_claim() does: first any claimable job of a higher
// priority than the position, then the same priority after it, then lower
// priorities, each an ordered read of job_claim that stops at $2 rows, and
// read only as far as the statement asks for rows. The whole index is read
// last, skipping what the positioned reads locked (those rows are this
// transaction's, so SKIP LOCKED does not skip them).
const jobClaimDirectSQL = `WITH q AS (
    SELECT qq.queue_id, qq.name, qq.lease, qq.paused OR qq.rate_limit IS NOT NULL OR qq.max_running IS NOT NULL AS held,
           qq.rate_limit IS NOT NULL OR qq.max_running IS NOT NULL AS limited, qq.job_timeout
      FROM pgmsg.queue qq WHERE qq.name = $1::text
), n AS (SELECT clock_timestamp() AS ts),
hi AS (
    SELECT j.id, j.priority, j.run_at FROM pgmsg.job j
     WHERE j.queue_id = (SELECT q.queue_id FROM q WHERE NOT q.held) AND j.state IN ('available', 'scheduled', 'retrying')
       AND j.priority > $5::smallint AND j.run_at <= (SELECT n.ts FROM n)
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT $2::integer FOR UPDATE OF j SKIP LOCKED
), eq AS (
    SELECT j.id, j.priority, j.run_at FROM pgmsg.job j
     WHERE j.queue_id = (SELECT q.queue_id FROM q WHERE NOT q.held) AND j.state IN ('available', 'scheduled', 'retrying')
       AND j.priority = $5::smallint AND (j.run_at, j.id) > ($6::timestamptz, $7::bigint)
       AND j.run_at <= (SELECT n.ts FROM n)
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT $2::integer FOR UPDATE OF j SKIP LOCKED
), lo AS (
    SELECT j.id, j.priority, j.run_at FROM pgmsg.job j
     WHERE j.queue_id = (SELECT q.queue_id FROM q WHERE NOT q.held) AND j.state IN ('available', 'scheduled', 'retrying')
       AND j.priority < $5::smallint AND j.run_at <= (SELECT n.ts FROM n)
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT $2::integer FOR UPDATE OF j SKIP LOCKED
), pos AS (
    SELECT hi.*, 1 AS b FROM hi UNION ALL SELECT eq.*, 2 FROM eq UNION ALL SELECT lo.*, 3 FROM lo
), whole AS (
    SELECT j.id, j.priority, j.run_at FROM pgmsg.job j
     WHERE j.queue_id = (SELECT q.queue_id FROM q WHERE NOT q.held) AND j.state IN ('available', 'scheduled', 'retrying')
       AND j.run_at <= (SELECT n.ts FROM n)
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT $2::integer FOR UPDATE OF j SKIP LOCKED
), x AS (
    SELECT pos.id, pos.priority, pos.run_at, pos.b FROM pos
    UNION ALL
    SELECT w.id, w.priority, w.run_at, 4 FROM whole w WHERE w.id NOT IN (SELECT pos.id FROM pos)
    LIMIT $2::integer
), k AS (
    SELECT x.id, row_number() OVER (ORDER BY x.b, x.priority DESC, x.run_at, x.id) AS ord FROM x
), u AS (
    UPDATE pgmsg.job j
       SET state = 'running', attempt = j.attempt + 1, lease_token = ($9::bigint + k.ord - 1) % 9007199254740991 + 1,
           lease_expires_at = n.ts + coalesce($3::interval, q.lease), attempted_at = n.ts, worker = $4::text
      FROM k, n, q
     WHERE j.id = k.id
    RETURNING k.ord, j.id, j.kind, j.priority, j.attempt, j.max_attempts, j.lease_token,
              j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.unique_key, j.errors, j.timeout
), a AS (
    SELECT CASE WHEN $8::boolean AND EXISTS (SELECT 1 FROM u) THEN set_config('synchronous_commit', 'off', true) END AS s
)
SELECT u.ord, u.id, q.name, coalesce(u.kind, ''), pl.payload, u.priority::integer, u.attempt, u.max_attempts, u.lease_token,
       u.lease_expires_at, u.run_at, u.enqueued_at, u.attempted_at, coalesce(u.unique_key, ''), u.errors,
       coalesce((extract(epoch FROM coalesce(u.timeout, q.job_timeout)) * 1000000)::bigint, 0), a.s
  FROM u CROSS JOIN q CROSS JOIN a LEFT JOIN pgmsg.job_payload pl ON pl.id = u.id
UNION ALL
SELECT NULL, NULL, '', '', NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, '', NULL, 0, 'unknown'
 WHERE NOT EXISTS (SELECT 1 FROM q)
UNION ALL
SELECT NULL, NULL, '', '', NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, '', NULL, 0, 'limited'
 WHERE EXISTS (SELECT 1 FROM q WHERE q.limited)
UNION ALL
SELECT NULL, NULL, '', '', NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, '', NULL, 0, 'expired'
 WHERE $10::boolean AND EXISTS (
       SELECT 1 FROM pgmsg.job j
        WHERE j.queue_id = (SELECT q.queue_id FROM q) AND j.state = 'running'
          AND j.lease_expires_at <= (SELECT n.ts FROM n))
 ORDER BY 1`

// jobClaimSettingsSQL pins the claim's plan to the ordered scans of
// job_claim, as job_claim()'s SET clauses do (see 002: right after a burst
// of enqueues the statistics can still say the queue is nearly empty, and
// the planner would pick a bitmap scan of the whole backlog plus a sort),
// for the transaction the statement shares with the claim (one pipelined
// batch, one implicit transaction); $1 also lets that transaction commit
// without waiting for its WAL flush, as job_claim()'s p_async.
const jobClaimSettingsSQL = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true),
       CASE WHEN $1::boolean THEN set_config('synchronous_commit', 'off', true) END`

// jobClaimFullEvery is how often a client's direct claims read the whole
// job_claim index (a claim without a position) and probe for expired
// leases, as job_claim() does at most once a second per session. The
// direct statement does both, so that no claim waits for job_claim():
// called once a second from a pool, it ran on a connection that had not
// run it lately and took 19 ms (the function's compilation and first
// plans) against 1 ms for the statement, which set the p99 latency at
// 1,000 jobs/s.
const jobClaimFullEvery = time.Second

// jobClaimState is what a Client remembers of its claims from one queue:
// the claim position (the last job handed out, in claim order), when its
// claims last read the whole index and probed for expired leases, and
// whether the last probe found an expired lease to rescue.
type jobClaimState struct {
	mu       sync.Mutex
	valid    bool
	priority int16
	runAt    time.Time
	id       int64
	full     time.Time // last claim without a position
	probed   time.Time // last probe for expired leases
	rescue   bool      // the last probe found an expired lease
	limited  time.Time // when the queue was last found limited
	// limitChecked is when checkLimited last read the queue's limits.
	limitChecked time.Time
}

// queueLimited reports whether the client's last direct claim of queue
// found it limited (a rate limit or running cap), within
// jobClaimLimitedFor.
func (c *Client) queueLimited(queue string) bool {
	st := c.jobClaimState(queue, false)
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return !st.limited.IsZero() && time.Since(st.limited) < jobClaimLimitedFor
}

// jobClaimLimitedFor is how long a client sends the claims of a queue
// found to have a rate limit or running cap straight to job_claim(), before
// trying the direct statement again (the limits may have been removed).
const jobClaimLimitedFor = 10 * time.Second

// jobClaimState returns the state of queue, creating it if create is set.
// Only a claim through job_claim() creates one, so the map holds queues
// that existed when claimed from, not every name a caller tried (the HTTP
// API passes callers' queue names through).
func (c *Client) jobClaimState(queue string, create bool) *jobClaimState {
	if v, ok := c.jobClaims.Load(queue); ok {
		return v.(*jobClaimState)
	}
	if !create {
		return nil
	}
	v, _ := c.jobClaims.LoadOrStore(queue, &jobClaimState{})
	return v.(*jobClaimState)
}

// next returns what the next direct claim sends: the claim position
// (none when the whole index is due), whether it probes for expired
// leases, and whether expired leases are to be rescued first.
func (s *jobClaimState) next(now time.Time) (pri pgtype.Int2, runAt pgtype.Timestamptz, id pgtype.Int8, probe, rescue bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rescue = s.rescue
	if now.Sub(s.full) >= jobClaimFullEvery {
		s.full = now
	} else if s.valid {
		pri, runAt, id = pgtype.Int2{Int16: s.priority, Valid: true}, pgtype.Timestamptz{Time: s.runAt, Valid: true},
			pgtype.Int8{Int64: s.id, Valid: true}
	}
	if now.Sub(s.probed) >= jobClaimFullEvery {
		s.probed, probe = now, true
	}
	return pri, runAt, id, probe, rescue
}

// claimed records a claim: its last job is the new position; fn says it
// went through job_claim() at now, which read the whole index and probed
// for expired leases (unless its session had this second).
func (s *jobClaimState) claimed(jobs []*Job, fn bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fn {
		s.full, s.probed = now, now
	}
	if len(jobs) > 0 {
		last := jobs[len(jobs)-1]
		if last.RunAt != nil {
			s.valid, s.priority, s.runAt, s.id = true, int16(last.Priority), *last.RunAt, last.ID
		}
	}
}

// claimJobsDirect claims through jobClaimDirectSQL on the pool; ok false
// means job_claim() must answer (the queue is unknown, or the direct
// statement may not claim now).
func (c *Client) claimJobsDirect(ctx context.Context, queue string, o *ClaimJobsOpts, async bool) (jobs []*Job, ok bool, err error) {
	st := c.jobClaimState(queue, false)
	if st == nil {
		return nil, false, nil
	}
	st.mu.Lock()
	limited := time.Since(st.limited) < jobClaimLimitedFor
	st.mu.Unlock()
	if limited {
		return nil, false, nil
	}
	pri, runAt, posID, probe, rescue := st.next(time.Now())
	if rescue {
		// The last probe found an expired lease: job_rescue() makes its
		// job claimable again (job_claim()'s own probe is throttled per
		// session, and a pool spreads calls over sessions).
		if _, err := c.queries.JobRescue(ctx, c.db(c.pool), dbsqlc.JobRescueParams{Queue: jobOptText(queue), MaxJobs: 1000}); err != nil {
			return nil, false, err
		}
		st.mu.Lock()
		st.rescue = false
		st.mu.Unlock()
	}
	var b pgx.Batch
	b.Queue(jobClaimSettingsSQL, async)
	b.Queue(c.schemaSQL(jobClaimDirectSQL), queue, int32(min(o.Max, 1<<30)), jobOptInterval(o.Lease),
		jobOptText(o.Worker), pri, runAt, posID, async, leaseToken(), probe)
	br := c.pool.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, false, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ord pgtype.Int8
			id  pgtype.Int8
			r   dbsqlc.JobClaimRow
			s   pgtype.Text
		)
		if err := rows.Scan(&ord, &id, &r.Queue, &r.Kind, &r.Payload, &r.Priority, &r.Attempt, &r.MaxAttempts,
			&r.LeaseToken, &r.LeaseExpiresAt, &r.RunAt, &r.EnqueuedAt, &r.AttemptedAt, &r.UniqueKey, &r.Errors, &r.TimeoutUs, &s); err != nil {
			return nil, false, err
		}
		if !id.Valid {
			if s.String == "limited" {
				// Nothing was claimed: job_claim() applies the limits.
				st.mu.Lock()
				st.limited = time.Now()
				st.mu.Unlock()
				return nil, false, nil
			}
			if s.String == "expired" {
				// The jobs of this claim are handed out; the next claim
				// rescues the lease first.
				st.mu.Lock()
				st.rescue = true
				st.mu.Unlock()
				continue
			}
			// Unknown queue (deleted meanwhile): job_claim() raises the
			// error, and the state goes.
			c.jobClaims.Delete(queue)
			return nil, false, nil
		}
		r.ID = id.Int64
		j, err := jobFromClaimRow(&r, o.Worker)
		if err != nil {
			return nil, false, err
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	rows.Close()
	if err := br.Close(); err != nil {
		return nil, false, err
	}
	st.claimed(jobs, false, time.Time{})
	return jobs, true, nil
}

// leaseToken draws a lease token as _lease_token() does: a uniformly
// random integer in [1, 2^53-1] (exact in JSON for JavaScript and jq),
// from the operating system's cryptographic source.
func leaseToken() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return max(int64(binary.LittleEndian.Uint64(b[:])&(1<<53-1)), 1)
}
