package store

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// The worker's claim has two forms: jobClaimDirectSQL (JobClaimDirect)
// and job_claim() (JobClaim). On two schemas holding the same jobs, the
// same claims must hand out the same jobs in the same order (priority
// descending, run_at, id) and set the same state, attempt, worker, lease
// and token sequence on them.
func TestJobClaimParity(t *testing.T) {
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	type job struct {
		pri   int
		runAt time.Duration // after base
		max   int
	}
	first := []job{{0, 0, 0}, {5, 0, 3}, {0, 0, 0}, {5, time.Second, 0}, {-1, 0, 0}, {0, time.Second, 0},
		{5, 0, 0}, {0, 2 * time.Second, 0}, {-1, 0, 4}, {0, 3 * time.Second, 0}, {2, 2 * time.Hour, 0},
		// In sequences (seqOf): 11 and 13 in s1, 12 in s0; 13 waits behind
		// 11 (pending), and neither claim may hand it out.
		{5, 0, 0}, {6, 0, 0}, {7, 0, 0}}
	seqOf := func(tag string, i int) string {
		if tag == "a" && i >= 11 {
			return fmt.Sprintf("s%d", i%2)
		}
		return ""
	}
	// Enqueued after the first claim: ahead of the claim position only
	// (a higher priority, a lower one, the same one later), where the
	// positioned reads and the whole read agree.
	later := []job{{9, 0, 0}, {-5, 0, 0}, {0, 50 * time.Minute, 0}}
	enqueue := func(b *pgtest.Bundle, s *Store, tag string, jobs []job) {
		t.Helper()
		batch := NewJobBatch("q", len(jobs), false)
		for i, j := range jobs {
			batch.Set(i, &JobParams{Payload: []byte(fmt.Sprintf("%s%d", tag, i)), Kind: "k" + tag, Priority: j.pri,
				RunAt: base.Add(j.runAt), MaxAttempts: j.max, Timeout: time.Duration(i+1) * time.Second,
				SequenceKey: seqOf(tag, i)})
		}
		if _, err := s.q.JobEnqueueMany(ctx, s.DB(b.Pool), batch.arg); err != nil {
			t.Fatal(err)
		}
	}
	setup := func() (*pgtest.Bundle, *Store) {
		b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 1}) // one session: job_claim()'s position settings persist
		s := New(b.Schema)
		if _, err := b.Pool.Exec(ctx, `SELECT `+pgx.Identifier{b.Schema}.Sanitize()+`.queue_create('q', p_lease => interval '7 minutes')`); err != nil {
			t.Fatal(err)
		}
		enqueue(b, s, "a", first)
		return b, s
	}
	// claimed is a job as a claim hands it out, without what differs by
	// draw or by clock: id (compared through the payload), token, times.
	type claimed struct {
		Payload, Kind, Worker, State string
		Priority, Attempt, Max       int
		Lease, Timeout, RunAt        time.Duration
		TokenStep                    int64 // the token's distance from the claim's first
	}
	norm := func(js []*Job) []claimed {
		var out []claimed
		for _, j := range js {
			out = append(out, claimed{Payload: string(j.Payload), Kind: j.Kind, Worker: j.Worker, State: string(j.State),
				Priority: j.Priority, Attempt: j.Attempt, Max: j.MaxAttempts, Lease: j.LeaseExpiresAt.Sub(*j.AttemptedAt),
				Timeout: j.Timeout, RunAt: j.RunAt.Sub(base), TokenStep: j.LeaseToken - js[0].LeaseToken})
		}
		return out
	}
	// What the claims left in the table, job by job.
	table := func(b *pgtest.Bundle) []string {
		rows, err := b.Pool.Query(ctx, `SELECT pl.payload, j.state, j.attempt, coalesce(j.worker, ''),
		        coalesce(j.lease_expires_at - j.attempted_at, interval '0')::text, j.lease_token IS NOT NULL
		   FROM `+pgx.Identifier{b.Schema}.Sanitize()+`.job j JOIN `+pgx.Identifier{b.Schema}.Sanitize()+`.job_payload pl ON pl.id = j.id
		  ORDER BY pl.payload`)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var p []byte
			var state, worker, lease string
			var attempt int
			var tok bool
			if err := rows.Scan(&p, &state, &attempt, &worker, &lease, &tok); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s %s %d %q %s %v", p, state, attempt, worker, lease, tok))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}

	bd, sd := setup()
	bf, sf := setup()
	claims := []struct {
		max    int
		lease  time.Duration
		worker string
	}{{3, 0, "w1"}, {2, 45 * time.Second, ""}, {4, 0, "w2"}, {100, time.Minute, "w3"}, {5, 0, "w4"}}
	var pos JobClaimPosition
	total := 0
	for i, c := range claims {
		if i == 1 {
			enqueue(bd, sd, "b", later)
			enqueue(bf, sf, "b", later)
		}
		var direct, fn []*Job
		res, err := sd.JobClaimDirect(ctx, bd.Pool, JobClaimDirectParams{Queue: "q", Max: c.max, Lease: c.lease, Worker: c.worker,
			Position: pos}, func(j *Job) error { direct = append(direct, j); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if res != (JobClaimDirectResult{}) {
			t.Fatalf("claim %d: direct statement answered %+v", i, res)
		}
		if err := sf.JobClaim(ctx, bf.Pool, JobClaimParams{Queue: "q", Max: c.max, Lease: c.lease, Worker: c.worker},
			func(_, _ int, j *Job) error { fn = append(fn, j); return nil }); err != nil {
			t.Fatal(err)
		}
		if got, want := norm(direct), norm(fn); !reflect.DeepEqual(got, want) {
			t.Fatalf("claim %d (max %d):\ndirect statement %+v\njob_claim()       %+v", i, c.max, got, want)
		}
		total += len(direct)
		if len(direct) > 0 {
			l := direct[len(direct)-1]
			pos = JobClaimPosition{Valid: true, Priority: int16(l.Priority), RunAt: *l.RunAt, ID: l.ID}
		}
	}
	if total != 15 {
		t.Fatalf("the claims handed out %d jobs, want the 15 claimable", total)
	}
	if got, want := table(bd), table(bf); !reflect.DeepEqual(got, want) {
		t.Fatalf("jobs after the claims:\ndirect statement %q\njob_claim()       %q", got, want)
	}
}
