package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
)

// JobParams is one job of a JobBatch, in Go values. A nil Payload is
// stored empty; "" Kind and UniqueKey, 0 MaxAttempts (the queue's), the
// zero RunAt (now, or after Delay), 0 Delay, UniqueFor and Timeout (the
// queue's), and nil Tags and Metadata are none.
type JobParams struct {
	Payload     []byte
	Kind        string
	Priority    int
	RunAt       time.Time
	Delay       time.Duration
	MaxAttempts int
	UniqueKey   string
	UniqueFor   time.Duration
	Timeout     time.Duration
	// Tags is the JSON array of the job's tags, Metadata its JSON object.
	Tags     []byte
	Metadata []byte
	// SequenceKey "" is none; SequenceContinue lets the sequence go on
	// past the job's failure.
	SequenceKey      string
	SequenceContinue bool
	// LimitKey "" is none given (the queue's key_field may supply one).
	LimitKey string
	// Name "" is none; DependsOn is the JSON array of the job's
	// dependencies (ids and names), nil for none.
	Name                string
	DependsOn           []byte
	DepsIgnoreCancelled bool
	DepsIgnoreDead      bool
	// Tenant "" is none (the default tenant in a fair queue).
	Tenant string
}

// JobBatch is a batch of jobs for JobEnqueueMany, held in the arrays the
// statements take, so that filling it in is all the copying an enqueue
// does. Make it with NewJobBatch and Set every job.
type JobBatch struct {
	arg dbsqlc.JobEnqueueManyParams
	// more: a job has a unique key, tags, metadata, a sequence key, a
	// limit key, a name, dependencies or a tenant, which only
	// enqueue_many() stores.
	more bool
}

// NewJobBatch returns a batch of n jobs for queue; createQueue lets the
// enqueue create a queue that does not exist (else errs.UnknownQueue).
func NewJobBatch(queue string, n int, createQueue bool) JobBatch {
	return JobBatch{arg: dbsqlc.JobEnqueueManyParams{
		Queue: queue, Payloads: make([][]byte, n), Kinds: make([]string, n), Priorities: make([]int32, n),
		RunAts: make([]pgtype.Timestamptz, n), Delays: make([]pgtype.Interval, n), MaxAttempts: make([]int32, n),
		UniqueKeys: make([]string, n), CreateQueue: createQueue,
	}}
}

// Len returns the number of jobs of the batch.
func (b *JobBatch) Len() int { return len(b.arg.Payloads) }

// Set makes p the batch's job i. It keeps p's slices (it does not copy
// them).
func (b *JobBatch) Set(i int, p *JobParams) {
	a, n := &b.arg, len(b.arg.Payloads)
	a.Payloads[i] = p.Payload
	if a.Payloads[i] == nil {
		a.Payloads[i] = []byte{}
	}
	a.Kinds[i] = p.Kind
	a.Priorities[i] = int32(p.Priority)
	if !p.RunAt.IsZero() {
		a.RunAts[i] = pgtype.Timestamptz{Time: p.RunAt, Valid: true}
	}
	if p.Delay > 0 {
		a.Delays[i] = interval(p.Delay)
	}
	a.MaxAttempts[i] = int32(min(p.MaxAttempts, 1<<30))
	a.UniqueKeys[i] = p.UniqueKey
	if p.UniqueFor > 0 {
		if a.UniqueFors == nil {
			a.UniqueFors = make([]pgtype.Interval, n)
		}
		a.UniqueFors[i] = interval(p.UniqueFor)
	}
	if p.Timeout > 0 {
		if a.Timeouts == nil {
			a.Timeouts = make([]pgtype.Interval, n)
		}
		a.Timeouts[i] = interval(p.Timeout)
	}
	if p.Tags != nil {
		if a.Tags == nil {
			a.Tags = make([][]byte, n)
		}
		a.Tags[i] = p.Tags
	}
	if p.Metadata != nil {
		if a.Metadata == nil {
			a.Metadata = make([][]byte, n)
		}
		a.Metadata[i] = p.Metadata
	}
	if p.SequenceKey != "" || p.SequenceContinue {
		if a.SequenceKeys == nil {
			a.SequenceKeys = make([]string, n)
		}
		a.SequenceKeys[i] = p.SequenceKey
		if p.SequenceContinue {
			if a.SequenceContinues == nil {
				a.SequenceContinues = make([]bool, n)
			}
			a.SequenceContinues[i] = true
		}
	}
	if p.LimitKey != "" {
		if a.LimitKeys == nil {
			a.LimitKeys = make([]string, n)
		}
		a.LimitKeys[i] = p.LimitKey
	}
	if p.Name != "" {
		if a.Names == nil {
			a.Names = make([]string, n)
		}
		a.Names[i] = p.Name
	}
	if p.DependsOn != nil {
		if a.DependsOn == nil {
			a.DependsOn = make([][]byte, n)
		}
		a.DependsOn[i] = p.DependsOn
	}
	if p.DepsIgnoreCancelled {
		if a.DepsIgnoreCancelled == nil {
			a.DepsIgnoreCancelled = make([]bool, n)
		}
		a.DepsIgnoreCancelled[i] = true
	}
	if p.DepsIgnoreDead {
		if a.DepsIgnoreDead == nil {
			a.DepsIgnoreDead = make([]bool, n)
		}
		a.DepsIgnoreDead[i] = true
	}
	if p.Tenant != "" {
		if a.Tenants == nil {
			a.Tenants = make([]string, n)
		}
		a.Tenants[i] = p.Tenant
	}
	if p.UniqueKey != "" || p.Tags != nil || p.Metadata != nil || p.SequenceKey != "" || p.SequenceContinue || p.LimitKey != "" ||
		p.Name != "" || p.DependsOn != nil || p.DepsIgnoreCancelled || p.DepsIgnoreDead || p.Tenant != "" {
		b.more = true
	}
}

// JobEnqueued is what an enqueue did with one job: the new job, or for a
// Duplicate the live job (or the window's) with the same unique key.
type JobEnqueued struct {
	ID        int64
	Duplicate bool
	State     string
	RunAt     time.Time
}

// JobEnqueueMany enqueues b's jobs in one statement on exec and calls fn
// with each job's result, in b's order. Jobs without
// unique keys, tags, metadata or sequence keys go through the direct statement
// (JobEnqueueDirect) when it covers the queue, the others through
// enqueue_many(). Bad input fails the whole batch, writing nothing
// (errs.UnknownQueue, errs.PayloadTooLarge, errs.QueueFull ...).
func (s *Store) JobEnqueueMany(ctx context.Context, exec DBTX, b *JobBatch, fn func(i int, r JobEnqueued)) error {
	if !b.more {
		ok, err := s.JobEnqueueDirect(ctx, exec, b, fn)
		if err != nil || ok {
			return err
		}
	}
	rows, err := s.q.JobEnqueueMany(ctx, s.DB(exec), b.arg)
	if err != nil {
		return errs.Map(err)
	}
	if n := b.Len(); len(rows) != n {
		return fmt.Errorf("pgmsg: enqueue returned %d results for %d jobs", len(rows), n)
	}
	for i, r := range rows {
		fn(i, JobEnqueued{ID: r.ID, Duplicate: r.Duplicate, State: r.State, RunAt: r.RunAt.Time})
	}
	return nil
}

// enqueueDirectSQL inserts a batch of jobs without unique keys in one
// statement against the tables, as enqueue_many() does on its common path,
// from the connection's cached generic plan instead of a PL/pgSQL call
// (the Go client's enqueue took twice as long as the same call
// from psql). It inserts nothing and returns no row when enqueue_many()
// has more to do or to say: an unknown queue (created, or PM101), a queue
// with a max_depth or a key_limit, a fair queue (its jobs are tagged), or a payload over max_payload_bytes (PM103). The Go
// client checks every other argument before (pgmsg.Client.EnqueueManyTx). Idle workers
// are woken in the transaction, as by enqueue_many(). TestJobEnqueueParity
// (job_enqueue_test.go) holds the two forms alike.
//
// $1 queue, $2 payloads, $3 kinds (empty for none), $4 priorities, $5 run_ats,
// $6 delays, $7 max attempts (0 for the queue's), $8 the notify channel,
// $9 timeouts (NULL, or NULL entries, for none of the job's own).
// The last column only makes the wake CTE run (a CTE without writes runs
// only if referenced).
const enqueueDirectSQL = `WITH q AS (
    SELECT qq.queue_id, qq.max_attempts, qq.name FROM pgmsg.queue qq
     WHERE qq.name = $1::text AND qq.max_depth IS NULL AND qq.key_limit IS NULL AND NOT qq.fair
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.unnest($2::bytea[]) AS u(p) WHERE pg_catalog.octet_length(u.p) > qq.max_payload_bytes)
), n AS (SELECT pg_catalog.clock_timestamp() AS ts),
src AS (
    SELECT pg_catalog.nextval('pgmsg.job_id_seq') AS id, u.*
      FROM q CROSS JOIN ROWS FROM (pg_catalog.unnest($2::bytea[]), pg_catalog.unnest($3::text[]),
                                pg_catalog.unnest($4::integer[]), pg_catalog.unnest($5::timestamptz[]),
                                pg_catalog.unnest($6::interval[]), pg_catalog.unnest($7::integer[]),
                                pg_catalog.unnest($9::interval[]))
           WITH ORDINALITY AS u(p, kd, pr, ra, d, m, tmo, ord)
), pl AS (
    INSERT INTO pgmsg.job_payload (id, payload) SELECT src.id, src.p FROM src
), ins AS (
    INSERT INTO pgmsg.job AS j (id, queue_id, state, priority, max_attempts, run_at, enqueued_at, kind, timeout)
    SELECT src.id, q.queue_id, CASE WHEN t.at > n.ts THEN 'scheduled' ELSE 'available' END,
           coalesce(src.pr, 0), coalesce(nullif(src.m, 0), q.max_attempts), t.at, n.ts, nullif(src.kd, ''), src.tmo
      FROM src CROSS JOIN q CROSS JOIN n
     CROSS JOIN LATERAL (SELECT coalesce(src.ra, n.ts + coalesce(src.d, interval '0')) AS at) t
     ORDER BY src.ord
    RETURNING j.id, j.state, j.run_at
), wake AS (
    SELECT pg_catalog.pg_notify($8::text, 'queue:' || q.name) FROM q WHERE EXISTS (SELECT 1 FROM ins WHERE ins.state = 'available')
)
SELECT ins.id, ins.state, ins.run_at, (SELECT pg_catalog.count(*) FROM wake) FROM ins ORDER BY ins.id`

// enqueueDirectRow holds the scan targets of an enqueueDirectSQL row.
type enqueueDirectRow struct {
	id    int64
	state string
	runAt pgtype.Timestamptz
	woke  int64
}

// JobEnqueueDirect runs enqueueDirectSQL for b, whose jobs must have no
// unique key, tags or metadata, and calls fn with each job's result, in
// b's order. It returns false, having enqueued
// nothing and called fn for no job, when enqueue_many() must enqueue b.
func (s *Store) JobEnqueueDirect(ctx context.Context, exec DBTX, b *JobBatch, fn func(i int, r JobEnqueued)) (bool, error) {
	a := &b.arg
	rows, err := s.DB(exec).Query(ctx, enqueueDirectSQL, a.Queue, a.Payloads, a.Kinds, a.Priorities,
		a.RunAts, a.Delays, a.MaxAttempts, s.schema+"_log", a.Timeouts)
	if err != nil {
		return false, errs.Map(err)
	}
	defer rows.Close()
	var sc *enqueueDirectRow // one per call, none when there is no row
	n := 0
	for rows.Next() {
		if sc == nil {
			sc = new(enqueueDirectRow)
		}
		if err := rows.Scan(&sc.id, &sc.state, &sc.runAt, &sc.woke); err != nil {
			return false, errs.Map(err)
		}
		if n < len(a.Payloads) {
			fn(n, JobEnqueued{ID: sc.id, State: sc.state, RunAt: sc.runAt.Time})
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return false, errs.Map(err)
	}
	if n == 0 {
		return false, nil
	}
	if n != len(a.Payloads) {
		return false, fmt.Errorf("pgmsg: enqueue returned %d results for %d jobs", n, len(a.Payloads))
	}
	return true, nil
}

// BatchCallbacks are a batch's callbacks for JobEnqueueBatch, each the JSON
// job spec job_enqueue_batch() takes, nil for none.
type BatchCallbacks struct {
	OnComplete, OnDiscard, OnFinished []byte
}

// JobEnqueueBatch enqueues b's jobs as one batch with callbacks cb through
// job_enqueue_batch(), calls fn with each job's result in b's order and
// returns the batch's id. Bad input fails the whole batch, writing nothing
// (errs.InvalidCallback, errs.EmptyBatch and JobEnqueueMany's).
func (s *Store) JobEnqueueBatch(ctx context.Context, exec DBTX, b *JobBatch, cb BatchCallbacks, fn func(i int, r JobEnqueued)) (int64, error) {
	a := &b.arg
	rows, err := s.q.JobEnqueueBatch(ctx, s.DB(exec), dbsqlc.JobEnqueueBatchParams{
		Queue: a.Queue, Payloads: a.Payloads, Kinds: a.Kinds, Priorities: a.Priorities, RunAts: a.RunAts,
		Delays: a.Delays, MaxAttempts: a.MaxAttempts, UniqueKeys: a.UniqueKeys, CreateQueue: a.CreateQueue,
		Timeouts: a.Timeouts, Tags: a.Tags, Metadata: a.Metadata, UniqueFors: a.UniqueFors,
		SequenceKeys: a.SequenceKeys, SequenceContinues: a.SequenceContinues, LimitKeys: a.LimitKeys,
		Names: a.Names, DependsOn: a.DependsOn, DepsIgnoreCancelled: a.DepsIgnoreCancelled,
		DepsIgnoreDead: a.DepsIgnoreDead, Tenants: a.Tenants, OnComplete: cb.OnComplete, OnDiscard: cb.OnDiscard, OnFinished: cb.OnFinished,
	})
	if err != nil {
		return 0, errs.Map(err)
	}
	if n := b.Len(); len(rows) != n {
		return 0, fmt.Errorf("pgmsg: enqueue returned %d results for %d jobs", len(rows), n)
	}
	for i, r := range rows {
		fn(i, JobEnqueued{ID: r.ID, Duplicate: r.Duplicate, State: r.State, RunAt: r.RunAt.Time})
	}
	return rows[0].BatchID, nil
}
