package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// A queue that drained is often vacuumed or analyzed empty: the job
// tables' statistics then say 0 rows in thousands of pages, and the
// planner costs a probe of a primary key as a read of the whole index.
// Claims that joined the payloads then read the whole payload index once
// per claim (a full index scan, materialized, filtered by id): on a queue
// refilled after such an analyze, `pgmsg bench queue` fell from ~20k to
// ~1k jobs/s, each claim of 57 jobs reading ~456k index entries. The
// claims and completions must look jobs and payloads up by id, one probe
// each, whatever the statistics say: counted here as the index entries
// their scans returned (pg_stat_user_indexes.idx_tup_read).
func TestJobHotPathsWithEmptyStatistics(t *testing.T) {
	ctx := context.Background()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 1})
	s := New(b.Schema)
	sch := pgx.Identifier{b.Schema}.Sanitize()
	const gone = 60000
	for _, q := range []string{
		`SELECT ` + sch + `.queue_create('q')`,
		`ALTER TABLE ` + sch + `.job_payload SET (autovacuum_enabled = false)`,
		`ALTER TABLE ` + sch + `.job SET (autovacuum_enabled = false)`,
		// Jobs and payloads long gone, then the analyze of empty tables.
		fmt.Sprintf(`INSERT INTO %s.job_payload (id, payload) SELECT -g, convert_to(repeat('x', 300), 'UTF8') FROM generate_series(1, %d) g`, sch, gone),
		fmt.Sprintf(`INSERT INTO %s.job (id, queue_id, state, max_attempts, run_at, enqueued_at)
		 SELECT -g, q.queue_id, 'dead', 1, now(), now() FROM generate_series(1, %d) g, %s.queue q`, sch, gone, sch),
		`DELETE FROM ` + sch + `.job_payload`,
		`DELETE FROM ` + sch + `.job`,
		`ANALYZE ` + sch + `.job_payload`,
		`ANALYZE ` + sch + `.job`,
	} {
		if _, err := b.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var empty bool
	if err := b.Pool.QueryRow(ctx, `SELECT bool_and(reltuples = 0 AND relpages > 100) FROM pg_catalog.pg_class WHERE oid IN ($1::regclass, $2::regclass)`,
		b.Schema+".job_payload", b.Schema+".job").Scan(&empty); err != nil {
		t.Fatal(err)
	}
	if !empty {
		t.Fatal("job and job_payload do not have the statistics under test (0 rows in over 100 pages)")
	}
	batch := NewJobBatch("q", 200, false)
	for i := range 200 {
		batch.Set(i, &JobParams{Payload: fmt.Appendf(nil, "p%d", i)})
	}
	if _, err := s.q.JobEnqueueMany(ctx, s.DB(b.Pool), batch.arg); err != nil {
		t.Fatal(err)
	}

	// One connection: its counts are flushed when it goes idle and read
	// after that.
	conn, err := b.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	read := func() (payload, job int64) {
		t.Helper()
		if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, `SELECT (SELECT pg_catalog.pg_stat_clear_snapshot()) IS NULL,
		        (SELECT idx_tup_read FROM pg_catalog.pg_stat_user_indexes WHERE indexrelid = $1::regclass),
		        (SELECT idx_tup_read FROM pg_catalog.pg_stat_user_indexes WHERE indexrelid = $2::regclass)`,
			b.Schema+".job_payload_pkey", b.Schema+".job_pkey").Scan(new(bool), &payload, &job); err != nil {
			t.Fatal(err)
		}
		return payload, job
	}
	var ids, tokens []int64
	check := func(what string, n int, do func()) {
		t.Helper()
		p0, j0 := read()
		do()
		p1, j1 := read()
		// Each job: one probe of each index (the claim's UPDATE, the
		// payload's lookup, the completion's DELETE); at most twice that.
		if p1-p0 > int64(2*n) || j1-j0 > int64(2*n) {
			t.Errorf("%s of %d jobs read %d entries of the payload index and %d of the job index (of %d gone): want at most %d each",
				what, n, p1-p0, j1-j0, gone, 2*n)
		}
	}
	// claimed keeps a claimed job (its payload checked) and counts it.
	n := 0
	claimed := func(j *Job) {
		if string(j.Payload) == "" {
			t.Errorf("job %d claimed without its payload", j.ID)
		}
		ids, tokens = append(ids, j.ID), append(tokens, j.LeaseToken)
		n++
	}
	claim := func(what string, do func() error) {
		t.Helper()
		n = 0
		check(what, 57, func() {
			if err := do(); err != nil {
				t.Fatal(err)
			}
		})
		if n != 57 {
			t.Fatalf("%s handed out %d jobs, want 57", what, n)
		}
	}
	claim("the direct claim", func() error {
		_, err := s.JobClaimDirect(ctx, conn, JobClaimDirectParams{Queue: "q", Max: 57}, func(j *Job) error { claimed(j); return nil })
		return err
	})
	claim("job_claim()", func() error {
		return s.JobClaim(ctx, conn, JobClaimParams{Queue: "q", Max: 57}, func(_, _ int, j *Job) error { claimed(j); return nil })
	})
	check("the lease extension", len(ids), func() {
		leases, err := s.JobExtendMany(ctx, conn, ids, tokens, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(leases) != len(ids) {
			t.Fatalf("extended %d of %d leases", len(leases), len(ids))
		}
	})
	check("the completion", len(ids), func() {
		done, err := s.JobCompleteMany(ctx, conn, ids, tokens, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(done) != len(ids) {
			t.Fatalf("completed %d of %d jobs", len(done), len(ids))
		}
	})
}
