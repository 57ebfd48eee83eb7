package store

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// JobClaimParams are the arguments of JobClaim: Lease 0 is the queue's,
// Worker "" none, MaxBytes 0 no byte cap; Async lets a claim that is its
// own transaction commit without waiting for its WAL flush.
type JobClaimParams struct {
	Queue    string
	Max      int
	Lease    time.Duration
	Worker   string
	MaxBytes int64
	Async    bool
}

// jobFromClaimRow is a job as the claim statements return it.
func jobFromClaimRow(r *dbsqlc.JobClaimRow, worker string) (*Job, error) {
	history, err := jobErrors(r.Errors)
	if err != nil {
		return nil, err
	}
	return &Job{
		ID: r.ID, Queue: r.Queue, State: pgmsgtype.JobStateRunning, Kind: r.Kind, Payload: r.Payload,
		Priority: int(r.Priority), Attempt: int(r.Attempt), MaxAttempts: int(r.MaxAttempts),
		LeaseToken: r.LeaseToken, LeaseExpiresAt: timePtr(r.LeaseExpiresAt), RunAt: timePtr(r.RunAt),
		EnqueuedAt: r.EnqueuedAt.Time, AttemptedAt: timePtr(r.AttemptedAt), Worker: worker,
		UniqueKey: r.UniqueKey, Errors: history, Timeout: micros(r.TimeoutUs),
	}, nil
}

// JobClaim claims through job_claim() on exec and calls fn with each job
// (j, the i-th of the n claimed, in claim order; fn may keep it). An error of fn ends the call with it. It
// fails with errs.UnknownQueue.
func (s *Store) JobClaim(ctx context.Context, exec DBTX, p JobClaimParams, fn func(i, n int, j *Job) error) error {
	arg := dbsqlc.JobClaimParams{
		Queue: p.Queue, MaxJobs: limit32(p.Max), Lease: optInterval(p.Lease), Worker: optText(p.Worker),
		Async: p.Async,
	}
	if p.MaxBytes != 0 { // a negative one for job_claim() to refuse
		arg.MaxBytes = pgtype.Int8{Int64: p.MaxBytes, Valid: true}
	}
	rows, err := s.q.JobClaim(ctx, s.DB(exec), arg)
	if err != nil {
		return errs.Map(err)
	}
	for i, r := range rows {
		j, err := jobFromClaimRow(r, p.Worker)
		if err != nil {
			return err
		}
		if err := fn(i, len(rows), j); err != nil {
			return err
		}
	}
	return nil
}

// The worker's claim as a static statement against the tables, run from
// the connection's cached generic plan instead of a PL/pgSQL call:
// job_claim() spent about 40 % of its time outside the statements
// that do the work (planning its statements' custom plans, the pinned
// settings' save and restore, the returned rows' tuplestore). job_claim()
// stays the reference for the semantics (docs/sql-api.md); the statement
// covers its common path and leaves the rest to it, and TestJobClaimParity
// (job_claim_test.go) holds the two forms alike on that path. (Completions
// are the sqlc query JobCompleteMany, job_complete_many() against the
// tables.)

// jobClaimDirectSQL claims up to $2 jobs of queue $1, as job_claim() does,
// starting from the claim position $5, $6, $7 (priority, run_at, id of the
// last job the client handed out; NULLs: none) and reading the whole
// job_claim index, in claim order, when the positioned reads find too few.
// $3 lease (NULL: the queue's), $4 worker, $8 commit asynchronously, $9 the
// claim's first lease token (the client draws it, as job_claim() draws
// one with _lease_token(): job k of the claim gets token_next($9 + k - 1),
// statements/token_next.sql, as in job_claim(), through the SET list both
// run, statements/job_claim_set.sql; a SQL function call here,
// planned on every call, was 4 % of the server's time).
//
// It returns the claimed jobs in claim order, then one row with a NULL id
// and a reason in the last column when job_claim() has to follow:
// 'unknown' when the queue does not exist (job_claim() raises the error),
// 'expired' when $10 asked for a probe of the job_lease index and it found
// an expired lease (the client's next claim rescues it with job_rescue()),
// 'limited' when the queue has a rate limit or a running cap.
// It needs no byte cap: the client calls job_claim() for those
// (internal/queue's direct claim).
//
// A paused queue hands out nothing: its reads find no queue id. Nor does a
// queue with a rate limit or a running cap (rate_limit, max_running): the statement
// answers 'limited', and job_claim(), which applies the limits, claims.
//
// A fair queue (fair share across tenants) is read as job_claim() reads
// it: its tagged jobs in virtual start tag order (job_fair) from the fair
// position $11 (a tag the client claimed a while ago; NULL: none, fp reads
// nothing), then from the start (fr) when fp found too few, then
// untagged ones (fu); the positioned and whole reads get no queue id and
// read nothing. Another queue's fp, fr and fu get none. Each claimed
// job's tag is returned last (NULL outside fair queues).
//
// Reads, as job_claim() does: first any claimable job of a higher
// priority than the position, then the same priority after it, then lower
// priorities, each an ordered read of job_claim that stops at $2 rows, and
// read only as far as the statement asks for rows. The whole index is read
// last, skipping what the positioned reads locked (those rows are this
// transaction's, so SKIP LOCKED does not skip them). The reads return each
// locked row's ctid, by which the update finds it (JobClaimSettingsSQL);
// a locked row keeps its ctid until this statement updates it. Payloads
// are looked up one job at a time (a subquery, not a join that the
// planner could turn into a read of the whole payload index).
var jobClaimDirectSQL = `WITH q AS (
    SELECT qq.queue_id, qq.name, qq.lease, qq.paused OR qq.rate_limit IS NOT NULL OR qq.max_running IS NOT NULL AS held,
           qq.rate_limit IS NOT NULL OR qq.max_running IS NOT NULL AS limited, qq.job_timeout, qq.fair
      FROM pgmsg.queue qq WHERE qq.name = $1::text
), n AS (SELECT pg_catalog.clock_timestamp() AS ts),
fp AS (
    SELECT j.id, j.priority, j.run_at, j.fair_tag, j.ctid FROM pgmsg.job j
     WHERE j.queue_id = (SELECT q.queue_id FROM q WHERE q.fair AND NOT q.held) AND j.fair_tag IS NOT NULL
       AND j.state IN ('available', 'scheduled', 'retrying') AND j.fair_tag >= $11::double precision
       AND j.run_at <= (SELECT n.ts FROM n)
     ORDER BY j.fair_tag, j.id
     LIMIT $2::integer FOR UPDATE OF j SKIP LOCKED
), fr AS (
    SELECT j.id, j.priority, j.run_at, j.fair_tag, j.ctid FROM pgmsg.job j
     WHERE j.queue_id = (SELECT q.queue_id FROM q WHERE q.fair AND NOT q.held) AND j.fair_tag IS NOT NULL
       AND j.state IN ('available', 'scheduled', 'retrying') AND j.run_at <= (SELECT n.ts FROM n)
     ORDER BY j.fair_tag, j.id
     LIMIT $2::integer FOR UPDATE OF j SKIP LOCKED
), fu AS (
    SELECT j.id, j.priority, j.run_at, j.ctid FROM pgmsg.job j
     WHERE j.queue_id = (SELECT q.queue_id FROM q WHERE q.fair AND NOT q.held) AND j.fair_tag IS NULL
       AND j.state IN ('available', 'scheduled', 'retrying') AND j.run_at <= (SELECT n.ts FROM n)
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT $2::integer FOR UPDATE OF j SKIP LOCKED
), hi AS (
    SELECT j.id, j.priority, j.run_at, j.ctid FROM pgmsg.job j
     WHERE j.queue_id = (SELECT q.queue_id FROM q WHERE NOT q.held AND NOT q.fair) AND j.state IN ('available', 'scheduled', 'retrying')
       AND j.priority > $5::smallint AND j.run_at <= (SELECT n.ts FROM n)
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT $2::integer FOR UPDATE OF j SKIP LOCKED
), eq AS (
    SELECT j.id, j.priority, j.run_at, j.ctid FROM pgmsg.job j
     WHERE j.queue_id = (SELECT q.queue_id FROM q WHERE NOT q.held AND NOT q.fair) AND j.state IN ('available', 'scheduled', 'retrying')
       AND j.priority = $5::smallint AND (j.run_at, j.id) > ($6::timestamptz, $7::bigint)
       AND j.run_at <= (SELECT n.ts FROM n)
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT $2::integer FOR UPDATE OF j SKIP LOCKED
), lo AS (
    SELECT j.id, j.priority, j.run_at, j.ctid FROM pgmsg.job j
     WHERE j.queue_id = (SELECT q.queue_id FROM q WHERE NOT q.held AND NOT q.fair) AND j.state IN ('available', 'scheduled', 'retrying')
       AND j.priority < $5::smallint AND j.run_at <= (SELECT n.ts FROM n)
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT $2::integer FOR UPDATE OF j SKIP LOCKED
), pos AS (
    SELECT hi.*, 1 AS b FROM hi UNION ALL SELECT eq.*, 2 FROM eq UNION ALL SELECT lo.*, 3 FROM lo
), whole AS (
    SELECT j.id, j.priority, j.run_at, j.ctid FROM pgmsg.job j
     WHERE j.queue_id = (SELECT q.queue_id FROM q WHERE NOT q.held AND NOT q.fair) AND j.state IN ('available', 'scheduled', 'retrying')
       AND j.run_at <= (SELECT n.ts FROM n)
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT $2::integer FOR UPDATE OF j SKIP LOCKED
), x AS (
    SELECT fp.id, fp.priority, fp.run_at, 0 AS b, fp.fair_tag AS t, fp.ctid FROM fp
    UNION ALL
    SELECT fr.id, fr.priority, fr.run_at, 0, fr.fair_tag, fr.ctid FROM fr WHERE fr.id NOT IN (SELECT fp.id FROM fp)
    UNION ALL
    SELECT fu.id, fu.priority, fu.run_at, 5, NULL, fu.ctid FROM fu
    UNION ALL
    SELECT pos.id, pos.priority, pos.run_at, pos.b, NULL, pos.ctid FROM pos
    UNION ALL
    SELECT w.id, w.priority, w.run_at, 4, NULL, w.ctid FROM whole w WHERE w.id NOT IN (SELECT pos.id FROM pos)
    LIMIT $2::integer
), k AS (
    SELECT x.id, x.ctid, pg_catalog.row_number() OVER (ORDER BY x.b, x.t, x.priority DESC, x.run_at, x.id) AS ord FROM x
), u AS (
    UPDATE pgmsg.job j
       SET ` + stmt("job_claim_set", "$9::bigint", "n.ts + coalesce($3::interval, q.lease)", "n.ts", "$4::text") + `
      FROM k, n, q
     WHERE j.ctid = k.ctid AND j.id = k.id
    RETURNING k.ord, j.id, j.kind, j.priority, j.attempt, j.max_attempts, j.lease_token,
              j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.unique_key, j.errors, j.timeout, j.fair_tag
), a AS (
    SELECT CASE WHEN $8::boolean AND EXISTS (SELECT 1 FROM u) THEN pg_catalog.set_config('synchronous_commit', 'off', true) END AS s
)
SELECT u.ord, u.id, q.name, coalesce(u.kind, ''), (SELECT pl.payload FROM pgmsg.job_payload pl WHERE pl.id = u.id), u.priority::integer, u.attempt, u.max_attempts, u.lease_token,
       u.lease_expires_at, u.run_at, u.enqueued_at, u.attempted_at, coalesce(u.unique_key, ''), u.errors,
       coalesce((extract(epoch FROM coalesce(u.timeout, q.job_timeout)) * 1000000)::bigint, 0), a.s, u.fair_tag
  FROM u CROSS JOIN q CROSS JOIN a
UNION ALL
SELECT NULL, NULL, '', '', NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, '', NULL, 0, 'unknown', NULL
 WHERE NOT EXISTS (SELECT 1 FROM q)
UNION ALL
SELECT NULL, NULL, '', '', NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, '', NULL, 0, 'limited', NULL
 WHERE EXISTS (SELECT 1 FROM q WHERE q.limited)
UNION ALL
SELECT NULL, NULL, '', '', NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, '', NULL, 0, 'expired', NULL
 WHERE $10::boolean AND EXISTS (
       SELECT 1 FROM pgmsg.job j
        WHERE j.queue_id = (SELECT q.queue_id FROM q) AND j.state = 'running'
          AND j.lease_expires_at <= (SELECT n.ts FROM n))
 ORDER BY 1`

// JobClaimSettingsSQL pins the claim's plan to the ordered scans of
// job_claim, as job_claim()'s SET clauses do (see 002: right after a burst
// of enqueues the statistics can still say the queue is nearly empty, and
// the planner would pick a bitmap scan of the whole backlog plus a sort),
// and the claimed rows' update to a probe by ctid: with index scans
// disabled too, the TID scan is the one access to job not disabled (the
// reads still take their indexes, the cheapest of the disabled paths). A
// queue vacuumed or analyzed while it was empty has statistics of 0 rows
// in thousands of pages, and the planner then joined the claimed rows to a
// full scan of job_pkey, read once per claim
// (TestJobHotPathsWithEmptyStatistics: 60,200 index entries for 57 jobs;
// `bench queue` at ~1k jobs/s instead of ~20k). Disabled paths carry a
// huge cost, which would compile every execution with JIT: jit is off;
// and they made the plan cache re-plan the claim on every call (its
// generic plan's cost no longer compared well with the custom plans'):
// PostgreSQL CPU per job 54-61 us against 39-40, until plan_cache_mode
// pinned the generic plan (40-41 us, as before; bench queue, alternating).
// All of it for the transaction the statement shares with the claim (one pipelined
// batch, one implicit transaction); $1 also lets that transaction commit
// without waiting for its WAL flush, as job_claim()'s p_async.
const JobClaimSettingsSQL = `SELECT pg_catalog.set_config('enable_bitmapscan', 'off', true), pg_catalog.set_config('enable_seqscan', 'off', true),
       pg_catalog.set_config('enable_indexscan', 'off', true), pg_catalog.set_config('jit', 'off', true),
       pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true),
       CASE WHEN $1::boolean THEN pg_catalog.set_config('synchronous_commit', 'off', true) END`

// BatchSender runs a pipelined batch of statements: a pool, a connection or
// a pgx.Tx.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// JobClaimPosition is a claim position: the claim order's key (priority,
// run time, id) of the last job a client handed out of a queue. Valid
// false is none: the claim reads the whole job_claim index.
type JobClaimPosition struct {
	Valid    bool
	Priority int16
	RunAt    time.Time
	ID       int64
	// FairValid and FairTag: where the reads of a fair queue start, a
	// virtual start tag the client claimed a while ago (internal/queue's
	// claimFairLag: jobs tagged while the claims went on are behind the
	// latest one).
	FairValid bool
	FairTag   float64
}

// JobClaimDirectParams are the arguments of JobClaimDirect: Lease 0 is
// the queue's and Worker "" none, as for JobClaim; Position is where the
// claim starts, Probe asks for a probe for expired leases, and Async lets
// the claim commit without waiting for its WAL flush. The statement checks
// none of them: its caller sends only a Max of at least 1 and a Lease
// job_claim() accepts (0, or 1µs to 366 days), and leaves the rest to
// JobClaim.
type JobClaimDirectParams struct {
	Queue    string
	Max      int
	Lease    time.Duration
	Worker   string
	Position JobClaimPosition
	Async    bool
	Probe    bool
}

// JobClaimDirectResult is what JobClaimDirect learnt besides the jobs it
// claimed.
type JobClaimDirectResult struct {
	// Unknown: the queue does not exist. Limited: it has a rate limit or
	// a running cap. Either way nothing was claimed, and job_claim()
	// (JobClaim) must answer.
	Unknown, Limited bool
	// Expired: the probe found an expired lease, for job_rescue()
	// (JobRescue) to make claimable.
	Expired bool
	// FairTag is the largest virtual start tag claimed (FairValid: the
	// queue is fair and a job was claimed).
	FairValid bool
	FairTag   float64
}

// JobClaimDirect claims through jobClaimDirectSQL on pool (a pool, or a
// connection outside a transaction: the settings are local to the
// transaction), in one pipelined batch with JobClaimSettingsSQL (one
// implicit transaction), and
// calls fn with each job, in claim order (fn may keep it). An error of fn ends the call with it.
func (s *Store) JobClaimDirect(ctx context.Context, pool BatchSender, p JobClaimDirectParams, fn func(j *Job) error) (JobClaimDirectResult, error) {
	var res JobClaimDirectResult
	var pri pgtype.Int2
	var runAt pgtype.Timestamptz
	var posID pgtype.Int8
	var fairTag pgtype.Float8
	if p.Position.FairValid {
		fairTag = pgtype.Float8{Float64: p.Position.FairTag, Valid: true}
	}
	if p.Position.Valid {
		pri, runAt, posID = pgtype.Int2{Int16: p.Position.Priority, Valid: true},
			pgtype.Timestamptz{Time: p.Position.RunAt, Valid: true}, pgtype.Int8{Int64: p.Position.ID, Valid: true}
	}
	var b pgx.Batch
	b.Queue(JobClaimSettingsSQL, p.Async)
	b.Queue(s.SQL(jobClaimDirectSQL), p.Queue, limit32(p.Max), optInterval(p.Lease),
		optText(p.Worker), pri, runAt, posID, p.Async, leaseToken(), p.Probe, fairTag)
	br := pool.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return res, errs.Map(err)
	}
	rows, err := br.Query()
	if err != nil {
		return res, errs.Map(err)
	}
	defer rows.Close()
	// The scan targets that are not a Job's fields: one set per call.
	var sc struct {
		ord, id                                    pgtype.Int8
		leaseExpiresAt, runAt, enqueued, attempted pgtype.Timestamptz
		timeoutUs                                  int64
		history                                    []byte
		reason                                     pgtype.Text
		tag                                        pgtype.Float8
	}
	for rows.Next() {
		j := new(Job) // the caller's to keep
		if err := rows.Scan(&sc.ord, &sc.id, &j.Queue, &j.Kind, &j.Payload, &j.Priority, &j.Attempt, &j.MaxAttempts,
			&j.LeaseToken, &sc.leaseExpiresAt, &sc.runAt, &sc.enqueued, &sc.attempted, &j.UniqueKey, &sc.history, &sc.timeoutUs,
			&sc.reason, &sc.tag); err != nil {
			return res, errs.Map(err)
		}
		if !sc.id.Valid {
			switch sc.reason.String {
			case "limited":
				res.Limited = true
				return res, nil
			case "expired":
				res.Expired = true // the claim's jobs are handed out all the same
				continue
			}
			res.Unknown = true
			return res, nil
		}
		// The fields the statement does not return are the same for every
		// job (FinishedAt, Progress, Result, Tags and Metadata stay nil).
		var err error
		if j.Errors, err = jobErrors(sc.history); err != nil {
			return res, err
		}
		j.ID, j.State, j.Worker = sc.id.Int64, pgmsgtype.JobStateRunning, p.Worker
		j.LeaseExpiresAt, j.RunAt, j.AttemptedAt = timePtr(sc.leaseExpiresAt), timePtr(sc.runAt), timePtr(sc.attempted)
		j.EnqueuedAt, j.Timeout = sc.enqueued.Time, micros(sc.timeoutUs)
		if sc.tag.Valid && (!res.FairValid || sc.tag.Float64 > res.FairTag) {
			res.FairValid, res.FairTag = true, sc.tag.Float64
		}
		if err := fn(j); err != nil {
			return res, err
		}
	}
	if err := rows.Err(); err != nil {
		return res, errs.Map(err)
	}
	rows.Close()
	return res, errs.Map(br.Close())
}

// leaseToken draws a lease token as _lease_token() does
// (statements/lease_token.sql): a uniformly random integer in
// [1, 2^53-1] (exact in JSON for JavaScript and jq), from the operating
// system's cryptographic source.
func leaseToken() int64 {
	var u [16]byte
	_, _ = rand.Read(u[:9]) // never fails (crypto/rand); bytes 9 to 15 are not read
	return leaseTokenOf(u)
}

// leaseTokenOf is statements/lease_token.sql's draw from a version 4
// UUID's bytes u: the 16 hex digits it reads (the UUID's digits 1 to 12,
// 14 to 16 and 18: bytes 0 to 5, the low half of byte 6, byte 7, the low
// half of byte 8) as a 64-bit number, masked to 53 bits, 0 mapped to 1.
// TestLeaseTokenParity holds the two equal.
func leaseTokenOf(u [16]byte) int64 {
	v := uint64(u[0])<<56 | uint64(u[1])<<48 | uint64(u[2])<<40 | uint64(u[3])<<32 | uint64(u[4])<<24 |
		uint64(u[5])<<16 | uint64(u[6]&15)<<12 | uint64(u[7])<<4 | uint64(u[8]&15)
	return max(int64(v&(1<<53-1)), 1)
}
