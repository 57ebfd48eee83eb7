package pgmsg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// Job progress and results: progress recorded by the
// holder is visible while the job runs and kept in the archive; a result
// set before completion is archived with the job, through Complete,
// CompleteMany and the Worker; what cannot be stored is refused with
// ErrInvalidArgument and writes nothing.
func TestJobProgressAndResult(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	ids := b.enqueueN(t, "q", 3, nil)

	job := b.claimWithin(t, "q", 10*time.Second, &pgmsg.ClaimJobsOpts{Max: 1})
	require.Equal(t, ids[0], job.ID)
	require.NoError(t, b.client.SetJobProgress(b.ctx, job, map[string]int{"done": 1, "of": 3}))
	got, err := b.client.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateRunning, got.State)
	require.JSONEq(t, `{"done": 1, "of": 3}`, string(got.Progress))
	require.Nil(t, got.Result)

	// Refused, and nothing changes.
	for _, bad := range []any{
		json.RawMessage(`{"unterminated": `),
		map[string]string{"nul": "a\x00b"},
		strings.Repeat("x", pgmsg.JobDocumentMaxBytes),
		func() {},
	} {
		require.ErrorIs(t, b.client.SetJobProgress(b.ctx, job, bad), pgmsg.ErrInvalidArgument)
		require.ErrorIs(t, job.SetResult(bad), pgmsg.ErrInvalidArgument)
	}
	got, err = b.client.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"done": 1, "of": 3}`, string(got.Progress))
	job.Result = json.RawMessage(`not json`)
	require.ErrorIs(t, b.client.Complete(b.ctx, job), pgmsg.ErrInvalidArgument)
	got, err = b.client.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateRunning, got.State, "a refused result completes nothing")

	require.NoError(t, job.SetResult(map[string]any{"rows": 42}))
	require.NoError(t, b.client.Complete(b.ctx, job))
	got, err = b.client.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateCompleted, got.State)
	require.JSONEq(t, `{"rows": 42}`, string(got.Result))
	require.JSONEq(t, `{"done": 1, "of": 3}`, string(got.Progress), "progress kept in the archive")

	// Progress of a job no longer held.
	require.ErrorIs(t, b.client.SetJobProgress(b.ctx, job, 1), pgmsg.ErrJobNotHeld)

	// CompleteMany: one with a result, one without.
	j2 := b.claimWithin(t, "q", 10*time.Second, &pgmsg.ClaimJobsOpts{Max: 1})
	j3 := b.claimWithin(t, "q", 10*time.Second, &pgmsg.ClaimJobsOpts{Max: 1})
	require.NoError(t, j3.SetResult(json.RawMessage(`[1, 2, 3]`)))
	res, err := b.client.CompleteMany(b.ctx, []*pgmsg.Job{j2, j3})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{j2.ID, j3.ID}, res.Completed)
	got, err = b.client.GetJob(b.ctx, j2.ID)
	require.NoError(t, err)
	require.Nil(t, got.Result)
	got, err = b.client.GetJob(b.ctx, j3.ID)
	require.NoError(t, err)
	require.JSONEq(t, `[1, 2, 3]`, string(got.Result))

	// The SQL API: the server's limit is on jsonb's text form.
	_, err = b.Pool.Exec(b.ctx, b.sqlAPI(`SELECT {s}.job_progress($1, 1, to_jsonb(repeat('x', 70000)))`), j2.ID)
	require.Equal(t, "PM004", sqlState(err), "%v", err)
}

// The Worker archives what the handler set with SetResult, and the
// progress it recorded. A result the server refuses although the client
// let it through (jsonb's text form is longer than compact JSON) makes
// that job dead with the reason, and the other jobs of the completion
// batch complete as usual.
func TestWorkerJobResults(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	// [1,1,...]: 60,001 bytes compact, 90,000 as jsonb text.
	tooLong := json.RawMessage("[" + strings.Repeat("1,", 29999) + "1]")
	require.LessOrEqual(t, len(tooLong), pgmsg.JobDocumentMaxBytes)
	ids := b.enqueueN(t, "q", 20, func(i int) pgmsg.EnqueueParams {
		kind := "ok"
		if i == 7 {
			kind = "too-long"
		}
		return pgmsg.EnqueueParams{Kind: kind, Payload: []byte(`{}`)}
	})
	var mu sync.Mutex
	completed := map[int64]bool{}
	stop := b.runWorker(t, "q", func(ctx context.Context, job *pgmsg.Job) error {
		if job.Kind == "too-long" {
			return job.SetResult(tooLong)
		}
		if err := b.client.SetJobProgress(ctx, job, map[string]int64{"id": job.ID}); err != nil {
			return err
		}
		return job.SetResult(map[string]int64{"double": 2 * job.ID})
	}, &pgmsg.WorkerOpts{Concurrency: 20, CompleteLinger: 50 * time.Millisecond, OnCompleted: func(jobs []*pgmsg.Job) {
		mu.Lock()
		defer mu.Unlock()
		for _, j := range jobs {
			completed[j.ID] = true
		}
	}})
	waitFor(t, 30*time.Second, "19 jobs completed and one dead", func() bool {
		mu.Lock()
		n := len(completed)
		mu.Unlock()
		s := b.stats(t, "q")
		return n == 19 && s.Dead == 1
	})
	require.ErrorIs(t, stop(), context.Canceled)
	for i, id := range ids {
		got, err := b.client.GetJob(b.ctx, id)
		require.NoError(t, err)
		if i == 7 {
			require.Equal(t, pgmsg.JobStateDead, got.State)
			require.NotEmpty(t, got.Errors)
			require.Contains(t, got.Errors[len(got.Errors)-1].Error, "result not stored")
			continue
		}
		require.Equal(t, pgmsg.JobStateCompleted, got.State, "job %d", id)
		var r struct{ Double int64 }
		require.NoError(t, json.Unmarshal(got.Result, &r))
		require.Equal(t, 2*id, r.Double)
		require.JSONEq(t, `{"id": `+jsonInt(id)+`}`, string(got.Progress))
	}
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// A NUL character is refused only when it is one: an escaped backslash
// followed by u0000 is text.
func TestJobDocumentNul(t *testing.T) {
	t.Parallel()
	var j pgmsg.Job
	for doc, bad := range map[string]bool{
		`"a\u0000b"`:    true,
		`"a\\\u0000b"`:  true,
		`"a\\u0000b"`:   false,
		`"u0000"`:       false,
		`{"k\u0000":1}`: true,
	} {
		err := j.SetResult(json.RawMessage(doc))
		if bad {
			require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, doc)
		} else {
			require.NoError(t, err, doc)
		}
	}
}

// ListJobs: a queue's jobs, live and archived, by id,
// filtered by state, kind and enqueue time, paged; bad filters refused.
func TestListJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	b.queue(t, "other", pgmsg.QueueConfig{})
	b.enqueueN(t, "other", 3, nil)
	ids := b.enqueueN(t, "q", 10, func(i int) pgmsg.EnqueueParams {
		return pgmsg.EnqueueParams{Kind: []string{"a", "b"}[i%2], Payload: []byte(`{}`)}
	})
	// Two running (one completed later), one dead, one cancelled.
	jobs, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 3})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	require.NoError(t, jobs[0].SetResult("ok"))
	require.NoError(t, b.client.Complete(b.ctx, jobs[0]))
	_, err = b.client.Fail(b.ctx, jobs[1], errors.New("boom"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	_, err = b.client.CancelJob(b.ctx, ids[9])
	require.NoError(t, err)

	list := func(o *pgmsg.ListJobsOpts) []int64 {
		t.Helper()
		js, err := b.client.ListJobs(b.ctx, "q", o)
		require.NoError(t, err)
		out := []int64{}
		for _, j := range js {
			require.Equal(t, "q", j.Queue)
			out = append(out, j.ID)
		}
		return out
	}
	require.Equal(t, ids, list(nil))
	require.Equal(t, []int64{ids[0]}, list(&pgmsg.ListJobsOpts{State: pgmsg.JobStateCompleted}))
	require.Equal(t, []int64{ids[1]}, list(&pgmsg.ListJobsOpts{State: pgmsg.JobStateDead}))
	require.Equal(t, []int64{ids[2]}, list(&pgmsg.ListJobsOpts{State: pgmsg.JobStateRunning}))
	require.Equal(t, []int64{ids[9]}, list(&pgmsg.ListJobsOpts{State: pgmsg.JobStateCancelled}))
	require.Equal(t, ids[3:9], list(&pgmsg.ListJobsOpts{State: pgmsg.JobStateAvailable}))
	require.Equal(t, []int64{ids[1], ids[3], ids[5], ids[7], ids[9]}, list(&pgmsg.ListJobsOpts{Kind: "b"}))
	require.Equal(t, []int64{ids[5], ids[7]}, list(&pgmsg.ListJobsOpts{Kind: "b", Limit: 2, AfterID: ids[4]}))
	require.Empty(t, list(&pgmsg.ListJobsOpts{Until: time.Now().Add(-time.Hour)}))
	require.Equal(t, ids, list(&pgmsg.ListJobsOpts{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)}))

	// Paging through everything, three at a time.
	var paged []int64
	for after := int64(0); ; {
		page := list(&pgmsg.ListJobsOpts{Limit: 3, AfterID: after})
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1]
	}
	require.Equal(t, ids, paged)

	// Newest first: the same jobs reversed, paged downwards by the same
	// cursor, live and archived interleaved; filters apply alike.
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	require.Equal(t, rev, list(&pgmsg.ListJobsOpts{Order: pgmsg.JobOrderDesc}))
	require.Equal(t, ids, list(&pgmsg.ListJobsOpts{Order: pgmsg.JobOrderAsc}))
	paged = nil
	for after := int64(0); ; {
		page := list(&pgmsg.ListJobsOpts{Limit: 3, AfterID: after, Order: pgmsg.JobOrderDesc})
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1]
	}
	require.Equal(t, rev, paged)
	require.Equal(t, []int64{ids[3], ids[1]}, list(&pgmsg.ListJobsOpts{Kind: "b", Limit: 2, AfterID: ids[4], Order: pgmsg.JobOrderDesc}))
	// The newest is archived (cancelled), the next live: both tables, one order.
	require.Equal(t, []int64{ids[9], ids[8]}, list(&pgmsg.ListJobsOpts{Limit: 2, Order: pgmsg.JobOrderDesc}))

	// The SQL API as psql users call it: named p_order, the cursor below.
	rows, err := b.Pool.Query(b.ctx, b.sqlAPI(`SELECT id FROM {s}.job_list('q', p_limit => 4, p_order => 'desc', p_after_id => $1)`), ids[7])
	require.NoError(t, err)
	sqlIDs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{ids[6], ids[5], ids[4], ids[3]}, sqlIDs)
	_, err = b.Pool.Exec(b.ctx, b.sqlAPI(`SELECT * FROM {s}.job_list('q', p_order => 'newest')`))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "PM004", pgErr.Code)
	require.Contains(t, pgErr.Message, "order must be asc or desc")

	js, err := b.client.ListJobs(b.ctx, "q", &pgmsg.ListJobsOpts{State: pgmsg.JobStateCompleted})
	require.NoError(t, err)
	require.JSONEq(t, `"ok"`, string(js[0].Result))

	for _, bad := range []*pgmsg.ListJobsOpts{
		{State: "finished"}, {Limit: 1001}, {Limit: -1}, {AfterID: -1}, {Order: "newest"}, {Order: "DESC"},
		{Since: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		_, err := b.client.ListJobs(b.ctx, "q", bad)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%+v", bad)
	}
	_, err = b.client.ListJobs(b.ctx, "nope", nil)
	require.ErrorIs(t, err, pgmsg.ErrUnknownQueue)
}

// Tags and metadata: stored by every enqueue path
// (plain, unique keys, the SQL API), shown by GetJob and ListJobs, kept in
// the archive, searchable by tag; malformed ones refused with nothing
// written.
func TestJobTagsAndMetadata(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	res, err := b.client.EnqueueMany(b.ctx, "q", []pgmsg.EnqueueParams{
		{Payload: []byte(`1`), Tags: []string{"eu", "customer:42", "eu"}, Metadata: json.RawMessage(`{"by": "ann"}`)},
		{Payload: []byte(`2`)},
		{Payload: []byte(`3`), Tags: []string{"us"}, UniqueKey: "k3", Metadata: json.RawMessage(`{"by": "bob"}`)},
	}, nil)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, b.sqlAPI(`SELECT * FROM {s}.enqueue('q', 'x', p_tags => '["eu"]', p_metadata => '{"by": "sql"}')`))
	require.NoError(t, err)

	j, err := b.client.GetJob(b.ctx, res[0].ID)
	require.NoError(t, err)
	require.Equal(t, []string{"customer:42", "eu"}, j.Tags, "stored once each, sorted")
	require.JSONEq(t, `{"by": "ann"}`, string(j.Metadata))
	j, err = b.client.GetJob(b.ctx, res[1].ID)
	require.NoError(t, err)
	require.Nil(t, j.Tags)
	require.Nil(t, j.Metadata)

	tagged := func(tag string) []string {
		t.Helper()
		js, err := b.client.ListJobs(b.ctx, "q", &pgmsg.ListJobsOpts{Tag: tag})
		require.NoError(t, err)
		var out []string
		for _, j := range js {
			out = append(out, string(j.Payload))
		}
		return out
	}
	require.Equal(t, []string{"1", "x"}, tagged("eu"))
	require.Equal(t, []string{"3"}, tagged("us"))
	require.Empty(t, tagged("nope"))

	// Kept in the archive, and still searchable there.
	jobs, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 1})
	require.NoError(t, err)
	require.Equal(t, res[0].ID, jobs[0].ID)
	require.NoError(t, b.client.Complete(b.ctx, jobs[0]))
	j, err = b.client.GetJob(b.ctx, res[0].ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateCompleted, j.State)
	require.Equal(t, []string{"customer:42", "eu"}, j.Tags)
	require.JSONEq(t, `{"by": "ann"}`, string(j.Metadata))
	require.Equal(t, []string{"1", "x"}, tagged("eu"))

	before, err := b.client.ListJobs(b.ctx, "q", nil)
	require.NoError(t, err)
	for _, bad := range []pgmsg.EnqueueParams{
		{Tags: []string{""}},
		{Tags: []string{"has space"}},
		{Tags: []string{strings.Repeat("t", 101)}},
		{Tags: make([]string, 21)},
		{Metadata: json.RawMessage(`[1]`)},
		{Metadata: json.RawMessage(`{"a": `)},
		{Metadata: json.RawMessage(`{"a": "` + strings.Repeat("m", pgmsg.JobDocumentMaxBytes) + `"}`)},
	} {
		_, err := b.client.EnqueueMany(b.ctx, "q", []pgmsg.EnqueueParams{{Payload: []byte(`ok`)}, bad}, nil)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%+v", bad.Tags)
	}
	for _, q := range []string{
		`SELECT * FROM {s}.enqueue('q', 'x', p_tags => '"eu"')`,
		`SELECT * FROM {s}.enqueue('q', 'x', p_tags => '[1]')`,
		`SELECT * FROM {s}.enqueue('q', 'x', p_tags => '["a b"]')`,
		`SELECT * FROM {s}.enqueue('q', 'x', p_metadata => '"text"')`,
	} {
		_, err := b.Pool.Exec(b.ctx, b.sqlAPI(q))
		require.Equal(t, "PM004", sqlState(err), "%s: %v", q, err)
	}
	after, err := b.client.ListJobs(b.ctx, "q", nil)
	require.NoError(t, err)
	require.Len(t, after, len(before), "nothing written")
}

// sqlState is err's SQLSTATE, "" when err is not a PostgreSQL error.
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// A job claim is capped by payload bytes as well as by count. The
// cap is enforced by job_claim itself, so the jobs beyond it are not leased;
// a claim always hands out at least one job, however large.
func TestJobClaimMaxBytes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	// Five jobs of 1000 bytes, then one of 5000.
	b.enqueueN(t, "q", 6, func(i int) pgmsg.EnqueueParams {
		n := 1000
		if i == 5 {
			n = 5000
		}
		return pgmsg.EnqueueParams{Payload: bytes.Repeat([]byte{'a' + byte(i)}, n)}
	})

	jobs, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 10, MaxBytes: 2500})
	require.NoError(t, err)
	require.Len(t, jobs, 2, "2000 bytes fit in 2500, a third job would not")
	require.Equal(t, byte('a'), jobs[0].Payload[0])
	require.Equal(t, byte('b'), jobs[1].Payload[0])
	s := b.stats(t, "q")
	require.Equal(t, int64(2), s.Running, "jobs beyond the cap are not leased")
	require.Equal(t, int64(4), s.Available)

	// Exactly at the cap is in.
	jobs, err = b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 10, MaxBytes: 3000})
	require.NoError(t, err)
	require.Len(t, jobs, 3)

	// The 5000-byte job alone is larger than the cap: it is handed out
	// anyway, alone.
	jobs, err = b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 10, MaxBytes: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Len(t, jobs[0].Payload, 5000)
	require.Equal(t, int64(0), b.stats(t, "q").Available)

	_, err = b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{MaxBytes: -1})
	requireCode(t, err, pgmsg.ErrInvalidArgument, "PM004")
}

// Migration 013: job_claim starts reading the claim index where the
// session's previous claim ended. These tests run every claim on one
// connection (one session), as the position is kept per session.

func (tb *testBundle) claimOn(t *testing.T, conn *pgxpool.Conn, queue string, limit int) []int64 {
	t.Helper()
	rows, err := conn.Query(tb.ctx, tb.sqlAPI(`SELECT id FROM {s}.job_claim($1, $2)`), queue, limit)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

func (tb *testBundle) enqueueSQL(t *testing.T, queue string, priority int, runAt *time.Time) int64 {
	t.Helper()
	var id int64
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, tb.sqlAPI(`SELECT id FROM {s}.enqueue($1, 'x', p_priority => $2, p_run_at => $3)`),
		queue, priority, runAt).Scan(&id))
	return id
}

// A job that becomes claimable behind the session's position (here: run_at
// in the past, enqueued after the claims passed it) is still claimed, first,
// by the next claim that finds fewer jobs ahead of the position than it
// asks for.
func TestJobClaimFindsJobsBehindThePosition(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	conn, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()

	a := b.enqueueSQL(t, "q", 0, nil)
	bID := b.enqueueSQL(t, "q", 0, nil)
	require.Equal(t, []int64{a}, b.claimOn(t, conn, "q", 1))
	past := time.Now().Add(-time.Hour)
	late := b.enqueueSQL(t, "q", 0, &past)
	require.Equal(t, []int64{late, bID}, b.claimOn(t, conn, "q", 10), "the late job sorts first and is not skipped")
	require.Empty(t, b.claimOn(t, conn, "q", 10))
}

// A job of a higher priority than the position's is claimed first at once,
// even when jobs ahead of the position would fill the claim.
func TestJobClaimPositionHigherPriorityFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	conn, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()

	low := make([]int64, 5)
	for i := range low {
		low[i] = b.enqueueSQL(t, "q", 0, nil)
	}
	require.Equal(t, low[:1], b.claimOn(t, conn, "q", 1))
	urgent := b.enqueueSQL(t, "q", 7, nil)
	require.Equal(t, []int64{urgent, low[1]}, b.claimOn(t, conn, "q", 2))
	// And a lower priority comes after the position's own.
	lower := b.enqueueSQL(t, "q", -3, nil)
	require.Equal(t, []int64{low[2], low[3], low[4], lower}, b.claimOn(t, conn, "q", 4))
}

// A job behind the position is claimed within about a second even while
// jobs ahead of the position would fill every claim: the claim reads the
// whole index at least once a second per session.
func TestJobClaimBehindPositionNotStarvedByBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	b.enqueueN(t, "q", 200, nil)
	conn, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()

	require.Len(t, b.claimOn(t, conn, "q", 1), 1)
	past := time.Now().Add(-time.Hour)
	late := b.enqueueSQL(t, "q", 0, &past)
	start := time.Now()
	for {
		ids := b.claimOn(t, conn, "q", 1)
		require.Len(t, ids, 1, "the backlog is not exhausted")
		if ids[0] == late {
			break
		}
		// At most 199 claims pass it over; each takes a while, so a
		// bound on claims would depend on speed. The bound is in time,
		// from the other side: it is found once a new second starts.
		require.Less(t, time.Since(start), 30*time.Second, "the late job was never claimed")
		time.Sleep(20 * time.Millisecond)
	}
}

// The point of the position: with a snapshot held open (vacuum can remove
// nothing), a claim reads the few index entries ahead of the position, not
// one entry per job claimed since the snapshot was taken. A session without
// a position (the old behaviour) still reads them all.
func TestJobClaimUnderHeldSnapshotReadsFewIndexEntries(t *testing.T) {
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})

	holder, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer holder.Rollback(b.ctx)
	_, err = holder.Exec(b.ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	require.NoError(t, err)
	var one int
	require.NoError(t, holder.QueryRow(b.ctx, "SELECT 1").Scan(&one))

	const claimed = 2000
	b.enqueueN(t, "q", claimed+200, nil)
	conn, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	for i := 0; i < claimed/100; i++ {
		require.Len(t, b.claimOn(t, conn, "q", 100), 100)
	}

	// Index entries of job_claim read by one claim of 10: the backend's
	// not yet flushed count (pg_stat_get_xact_tuples_returned, idx_tup_read
	// in pg_stat_user_indexes once flushed) before and after the claim, in
	// one transaction (stats are flushed between transactions only).
	entriesRead := func(c *pgxpool.Conn) int64 {
		tx, err := c.Begin(b.ctx)
		require.NoError(t, err)
		defer tx.Rollback(b.ctx)
		count := b.sqlAPI(`SELECT pg_catalog.pg_stat_get_xact_tuples_returned('{s}.job_claim'::regclass)`)
		var before, after int64
		require.NoError(t, tx.QueryRow(b.ctx, count).Scan(&before))
		var n int
		require.NoError(t, tx.QueryRow(b.ctx, b.sqlAPI(`SELECT count(*) FROM {s}.job_claim('q', 10)`)).Scan(&n))
		require.Equal(t, 10, n)
		require.NoError(t, tx.QueryRow(b.ctx, count).Scan(&after))
		return after - before
	}
	// A claim uses its position within the second of the session's last
	// full read: a committed claim just before makes sure of one, unless a
	// second boundary falls in between (then try again).
	var read int64
	for i := 0; i < 5; i++ {
		require.Len(t, b.claimOn(t, conn, "q", 1), 1)
		if read = entriesRead(conn); read < claimed {
			break
		}
	}
	require.Less(t, read, int64(100), "a positioned claim walked the claimed jobs' index entries")

	fresh, err := b.Pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer fresh.Release()
	// Make sure this is a different session than conn.
	var pidA, pidB int
	require.NoError(t, conn.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&pidA))
	require.NoError(t, fresh.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&pidB))
	require.NotEqual(t, pidA, pidB)
	require.GreaterOrEqual(t, entriesRead(fresh), int64(claimed), "without a position the claim reads every dead entry (the test would prove nothing)")
}

// p_async lets a standalone claim commit without waiting for its WAL
// flush (ClaimJobs passes it); a claim inside the caller's transaction
// (ClaimJobsTx, or the SQL API's default) leaves the caller's
// synchronous_commit alone.
func TestJobClaimAsyncOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	b.enqueueN(t, "q", 3, nil)
	setting := func(tx pgx.Tx) string {
		var v string
		require.NoError(t, tx.QueryRow(b.ctx, "SELECT pg_catalog.current_setting('synchronous_commit')").Scan(&v))
		return v
	}
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	// The test clusters may run with synchronous_commit off: start from on.
	_, err = tx.Exec(b.ctx, "SET LOCAL synchronous_commit = on")
	require.NoError(t, err)
	require.Equal(t, "on", setting(tx))
	jobs, err := b.client.ClaimJobsTx(b.ctx, tx, "q", &pgmsg.ClaimJobsOpts{Max: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, "on", setting(tx), "ClaimJobsTx changed the caller's synchronous_commit")
	var n int
	require.NoError(t, tx.QueryRow(b.ctx, b.sqlAPI(`SELECT count(*) FROM {s}.job_claim('q', 1)`)).Scan(&n))
	require.Equal(t, "on", setting(tx))
	require.NoError(t, tx.QueryRow(b.ctx, b.sqlAPI(`SELECT count(*) FROM {s}.job_claim('q', 1, p_async => true)`)).Scan(&n))
	require.Equal(t, 1, n)
	require.Equal(t, "off", setting(tx))
	require.NoError(t, tx.Commit(b.ctx))
}

// benchQueue returns a client and a queue "q" in a fresh schema.
func benchQueue(b *testing.B) (*pgmsg.Client, context.Context) {
	bundle := pgtest.Schema(b, nil)
	client, err := pgmsg.NewClient(bundle.Pool, &pgmsg.Config{Schema: bundle.Schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	ctx := context.Background()
	if _, err := client.CreateQueue(ctx, "q", pgmsg.QueueConfig{}); err != nil {
		b.Fatal(err)
	}
	return client, ctx
}

// BenchmarkJobBatch measures the queue's hot paths per batch of 100 jobs
// (allocs/op is what the storage layer must not raise): the direct
// enqueue, the direct claim, and the completion of the claimed jobs, or
// their failure one by one.
func BenchmarkJobBatch(b *testing.B) {
	const n = 100
	params := make([]pgmsg.EnqueueParams, n)
	for i := range params {
		params[i] = pgmsg.EnqueueParams{Payload: []byte(`{"n":1}`), Kind: "k"}
	}
	for _, finish := range []string{"complete", "fail"} {
		b.Run(finish, func(b *testing.B) {
			client, ctx := benchQueue(b)
			// The first claim of a queue goes through job_claim(); the
			// next ones are direct.
			if _, err := client.ClaimJobs(ctx, "q", nil); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := client.EnqueueMany(ctx, "q", params, nil); err != nil {
					b.Fatal(err)
				}
				jobs, err := client.ClaimJobs(ctx, "q", &pgmsg.ClaimJobsOpts{Max: n})
				if err != nil || len(jobs) != n {
					b.Fatalf("claim: %d jobs, %v", len(jobs), err)
				}
				if finish == "complete" {
					res, err := client.CompleteMany(ctx, jobs)
					if err != nil || len(res.Completed) != n {
						b.Fatalf("complete: %v %v", res, err)
					}
					continue
				}
				for _, j := range jobs {
					if _, err := client.Fail(ctx, j, errors.New("boom"), &pgmsg.FailOpts{Dead: true}); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkWorker measures a Worker end to end per batch of 100 jobs
// (allocs/op is what the worker's engine must not raise): the enqueue of
// the batch, and the worker's claims, handler calls and batched
// completions until the last of its jobs is archived.
func BenchmarkWorker(b *testing.B) {
	const n = 100
	params := make([]pgmsg.EnqueueParams, n)
	for i := range params {
		params[i] = pgmsg.EnqueueParams{Payload: []byte(`{"n":1}`), Kind: "k"}
	}
	client, ctx := benchQueue(b)
	completed := make(chan int, 1024)
	w, err := client.NewWorker("q", func(context.Context, *pgmsg.Job) error { return nil },
		&pgmsg.WorkerOpts{OnCompleted: func(jobs []*pgmsg.Job) { completed <- len(jobs) }})
	if err != nil {
		b.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	b.Cleanup(func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			b.Errorf("Run: %v", err)
		}
	})
	for b.Loop() {
		if _, err := client.EnqueueMany(ctx, "q", params, nil); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < n; {
			got += <-completed
		}
	}
}

// RetryJob makes a scheduled or retrying job claimable now, keeping its
// attempts, and wakes the queue's workers; running, dead and finished jobs
// are refused.
func TestRetryJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "r", pgmsg.QueueConfig{})
	enqueue := func(p pgmsg.EnqueueParams) int64 {
		res, err := tb.client.Enqueue(tb.ctx, "r", p, nil)
		require.NoError(t, err)
		return res.ID
	}
	claimOne := func() *pgmsg.Job {
		jobs, err := tb.client.ClaimJobs(tb.ctx, "r", nil)
		require.NoError(t, err)
		if len(jobs) == 0 {
			return nil
		}
		require.Len(t, jobs, 1)
		return jobs[0]
	}

	// Scheduled for an hour from now: retried now, claimable at once.
	later := enqueue(pgmsg.EnqueueParams{Payload: []byte("later"), Delay: time.Hour})
	require.Nil(t, claimOne())
	require.NoError(t, tb.client.RetryJob(tb.ctx, later))
	j := claimOne()
	require.NotNil(t, j)
	require.Equal(t, later, j.ID)
	require.Equal(t, 1, j.Attempt)

	// Running: refused.
	err := tb.client.RetryJob(tb.ctx, later)
	require.ErrorIs(t, err, pgmsg.ErrJobNotWaiting)
	require.Equal(t, "PM110", pgmsg.ErrorCode(err))

	// Failed, waiting for an hour's backoff: retried now, attempts kept.
	_, err = tb.client.Fail(tb.ctx, j, errors.New("boom"), &pgmsg.FailOpts{RetryIn: time.Hour})
	require.NoError(t, err)
	require.Nil(t, claimOne())
	got, err := tb.client.GetJob(tb.ctx, later)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateRetrying, got.State)
	require.NoError(t, tb.client.RetryJob(tb.ctx, later))
	j = claimOne()
	require.NotNil(t, j)
	require.Equal(t, 2, j.Attempt, "the retried job keeps its attempts")
	require.Len(t, j.Errors, 1)

	// Finished: refused. Dead: refused, pointing at dead_requeue.
	require.NoError(t, tb.client.Complete(tb.ctx, j))
	require.ErrorIs(t, tb.client.RetryJob(tb.ctx, later), pgmsg.ErrJobNotWaiting)
	dead := enqueue(pgmsg.EnqueueParams{Payload: []byte("dead")})
	j = claimOne()
	_, err = tb.client.Fail(tb.ctx, j, errors.New("fatal"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	err = tb.client.RetryJob(tb.ctx, dead)
	require.ErrorIs(t, err, pgmsg.ErrJobNotWaiting)
	require.Contains(t, err.Error(), "dead_requeue")

	// Available: left as it is. Unknown: ErrUnknownJob.
	avail := enqueue(pgmsg.EnqueueParams{Payload: []byte("now")})
	require.NoError(t, tb.client.RetryJob(tb.ctx, avail))
	require.Equal(t, avail, claimOne().ID)
	require.ErrorIs(t, tb.client.RetryJob(tb.ctx, 1<<50), pgmsg.ErrUnknownJob)

	// An idle worker polling once a minute is woken by the retry.
	soon := enqueue(pgmsg.EnqueueParams{Payload: []byte("soon"), Delay: time.Hour})
	handled := make(chan int64, 1)
	stop := tb.runWorker(t, "r", func(_ context.Context, j *pgmsg.Job) error {
		handled <- j.ID
		return nil
	}, &pgmsg.WorkerOpts{PollInterval: time.Minute})
	defer func() { require.ErrorIs(t, stop(), context.Canceled) }()
	time.Sleep(200 * time.Millisecond) // the worker's first claim finds nothing; it waits
	require.NoError(t, tb.client.RetryJob(tb.ctx, soon))
	select {
	case id := <-handled:
		require.Equal(t, soon, id)
	case <-time.After(30 * time.Second):
		t.Fatal("the worker was not woken by the retry")
	}
}

// With a TracerProvider, an enqueue makes a producer span whose context
// travels in each job's metadata, and the worker's process span around the
// handler continues that trace.
func TestJobTracing(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tb := setup(t, &pgmsg.Config{TracerProvider: tp, PollInterval: 20 * time.Millisecond})
	tb.queue(t, "tq", pgmsg.QueueConfig{})

	ctx, parent := tp.Tracer("test").Start(tb.ctx, "request")
	own := `{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`
	params := []pgmsg.EnqueueParams{
		{Payload: []byte("a"), Kind: "k"},
		{Payload: []byte("b"), Metadata: json.RawMessage(`{"by":"ann"}`)},
		{Payload: []byte("c"), Metadata: json.RawMessage(own)},
	}
	res, err := tb.client.EnqueueMany(ctx, "tq", params, nil)
	require.NoError(t, err)
	parent.End()
	require.Nil(t, params[0].Metadata, "the caller's params are not changed")

	var publish sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "publish tq" {
			publish = s
		}
	}
	require.NotNil(t, publish)
	require.Equal(t, trace.SpanKindProducer, publish.SpanKind())
	require.Equal(t, parent.SpanContext().SpanID(), publish.Parent().SpanID())
	for i, r := range res[:2] {
		j, err := tb.client.GetJob(tb.ctx, r.ID)
		require.NoError(t, err)
		var md map[string]string
		require.NoError(t, json.Unmarshal(j.Metadata, &md))
		require.Contains(t, md["traceparent"], publish.SpanContext().SpanID().String(), "job %d", i)
		if i == 1 {
			require.Equal(t, "ann", md["by"], "the job's own metadata is kept")
		}
	}
	j, err := tb.client.GetJob(tb.ctx, res[2].ID)
	require.NoError(t, err)
	require.JSONEq(t, own, string(j.Metadata), "a job's own trace context is kept")

	var (
		mu      sync.Mutex
		handled = map[string]trace.SpanContext{}
	)
	w, err := tb.client.NewWorker("tq", func(ctx context.Context, job *pgmsg.Job) error {
		mu.Lock()
		handled[string(job.Payload)] = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		return nil
	}, nil)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(tb.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	require.Eventually(t, func() bool {
		st, err := tb.client.QueueStats(tb.ctx, "tq")
		require.NoError(t, err)
		return st.Archived == 3
	}, 30*time.Second, 10*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, parent.SpanContext().TraceID(), handled["a"].TraceID(), "the handler runs in the enqueuing request's trace")
	require.Equal(t, parent.SpanContext().TraceID(), handled["b"].TraceID())
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", handled["c"].TraceID().String())
	names := map[string]int{}
	for _, s := range rec.Ended() {
		names[s.Name()]++
		if s.Name() == "process tq" && s.SpanContext().SpanID() == handled["a"].SpanID() {
			require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
			require.Equal(t, publish.SpanContext().SpanID(), s.Parent().SpanID(), "a child of the enqueue's span")
		}
	}
	require.Equal(t, 3, names["process tq"])
	require.GreaterOrEqual(t, names["receive tq"], 1)
	require.GreaterOrEqual(t, names["complete tq"], 1)

	// Without a TracerProvider, nothing is added.
	plain, err := pgmsg.NewClient(tb.Pool, &pgmsg.Config{Schema: tb.Schema})
	require.NoError(t, err)
	defer plain.Close()
	r, err := plain.Enqueue(ctx, "tq", pgmsg.EnqueueParams{Payload: []byte("d")}, nil)
	require.NoError(t, err)
	j, err = plain.GetJob(tb.ctx, r.ID)
	require.NoError(t, err)
	require.Nil(t, j.Metadata)
}

// A job's lease token must not be guessable by another claimer of
// the queue, nor be echoed in errors; a stale token is still refused.
func TestJobLeaseTokensUnguessable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	b.enqueueN(t, "q", 50, nil)
	jobs, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 50})
	require.NoError(t, err)
	require.Len(t, jobs, 50)
	seen := map[int64]bool{}
	for _, j := range jobs {
		// A random 53-bit token is below 2^24 with probability 2^-29 (counters start at 1).
		require.Greater(t, j.LeaseToken, int64(1)<<24, "job %d has a small lease token", j.ID)
		require.False(t, seen[j.LeaseToken], "lease token %d drawn twice", j.LeaseToken)
		seen[j.LeaseToken] = true
	}

	// Guessing small tokens, or the token of a neighbouring job, fails, and
	// the errors do not reveal the live token.
	j := jobs[0]
	live := strconv.FormatInt(j.LeaseToken, 10)
	for _, guess := range []int64{0, 1, 2, 3, jobs[1].LeaseToken, j.LeaseToken + 1, j.LeaseToken - 1} {
		g := &pgmsg.Job{ID: j.ID, Queue: "q", LeaseToken: guess}
		err := b.client.Complete(b.ctx, g)
		requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
		require.NotContains(t, err.Error(), live)
		_, err = b.client.Fail(b.ctx, g, errors.New("stolen"), nil)
		requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
		require.NotContains(t, err.Error(), live)
		_, err = b.client.Snooze(b.ctx, g, 0)
		requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
		require.NotContains(t, err.Error(), live)
		err = b.client.ExtendJob(b.ctx, g, time.Minute)
		requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
		require.NotContains(t, err.Error(), live)
	}
	got, err := b.client.GetJob(b.ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateRunning, got.State, "a guess changed the job")
	require.Equal(t, 1, got.Attempt)

	// A new claim of the same job draws a new token; the old one is fenced.
	_, err = b.client.Snooze(b.ctx, j, 0)
	require.NoError(t, err)
	again := b.claimWithin(t, "q", 5*time.Second, &pgmsg.ClaimJobsOpts{})
	require.Equal(t, j.ID, again.ID)
	require.NotEqual(t, j.LeaseToken, again.LeaseToken)
	require.Greater(t, again.LeaseToken, int64(1)<<32)
	err = b.client.Complete(b.ctx, j)
	requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
	require.NotContains(t, err.Error(), strconv.FormatInt(again.LeaseToken, 10))
	require.NoError(t, b.client.Complete(b.ctx, again))
	// Archived: still PM106, still no token in the text.
	err = b.client.Complete(b.ctx, again)
	requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
	require.NotContains(t, err.Error(), strconv.FormatInt(again.LeaseToken, 10))
}

// A unique key with a window is unique within the window whatever became
// of its job; a new window takes a new job.
func TestUniqueWindow(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "uq", pgmsg.QueueConfig{})
	enqueue := func(key string, window time.Duration) *pgmsg.EnqueueResult {
		t.Helper()
		r, err := tb.client.Enqueue(tb.ctx, "uq", pgmsg.EnqueueParams{Payload: []byte(key), UniqueKey: key, UniqueFor: window}, nil)
		require.NoError(t, err)
		return r
	}

	// Windows of 366 days (aligned to the Unix epoch, so that a window
	// ends while this test runs about once in 10^7 runs): waiting, then
	// completed, the window's job stays the window's job.
	const year = 366 * 24 * time.Hour
	a := enqueue("sync-user-42", year)
	require.False(t, a.Duplicate)
	job, err := tb.client.GetJob(tb.ctx, a.ID)
	require.NoError(t, err)
	secs := int64(year / time.Second)
	start := time.Unix(job.EnqueuedAt.Unix()/secs*secs, 0).UTC()
	require.Equal(t, "sync-user-42@"+start.Format("2006-01-02T15:04:05Z"), job.UniqueKey)
	again := enqueue("sync-user-42", year)
	require.True(t, again.Duplicate)
	require.Equal(t, a.ID, again.ID)
	require.Equal(t, pgmsg.JobStateAvailable, again.State)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "uq", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, tb.client.Complete(tb.ctx, jobs[0]))
	done := enqueue("sync-user-42", year)
	require.True(t, done.Duplicate, "a completed job still holds its window")
	require.Equal(t, a.ID, done.ID)
	require.Equal(t, pgmsg.JobStateCompleted, done.State)
	// The same key without a window is only unique among live jobs: the
	// window's completed job does not make it a duplicate.
	plain, err := tb.client.Enqueue(tb.ctx, "uq", pgmsg.EnqueueParams{UniqueKey: "sync-user-42"}, nil)
	require.NoError(t, err)
	require.False(t, plain.Duplicate)

	// A dead job holds its window too.
	d := enqueue("dies", year)
	_, err = tb.Pool.Exec(tb.ctx, `UPDATE `+pgx.Identifier{tb.Schema}.Sanitize()+`.job SET state = 'dead', finalized_at = now() WHERE id = $1`, d.ID)
	require.NoError(t, err)
	dead := enqueue("dies", year)
	require.True(t, dead.Duplicate)
	require.Equal(t, d.ID, dead.ID)
	require.Equal(t, pgmsg.JobStateDead, dead.State)

	// One batch with a key twice: the first job takes the window.
	res, err := tb.client.EnqueueMany(tb.ctx, "uq", []pgmsg.EnqueueParams{
		{Payload: []byte("1"), UniqueKey: "batch", UniqueFor: year},
		{Payload: []byte("2"), UniqueKey: "batch", UniqueFor: year},
		{Payload: []byte("3")},
	}, nil)
	require.NoError(t, err)
	require.False(t, res[0].Duplicate)
	require.True(t, res[1].Duplicate)
	require.Equal(t, res[0].ID, res[1].ID)
	require.False(t, res[2].Duplicate)

	// A window that has passed: a new job, and maintenance prunes the
	// window's row.
	first := enqueue("tick", time.Second)
	time.Sleep(1100 * time.Millisecond)
	second := enqueue("tick", time.Second)
	require.False(t, second.Duplicate)
	require.NotEqual(t, first.ID, second.ID)
	time.Sleep(1100 * time.Millisecond)
	var left int
	_, err = tb.client.MaintainOnce(tb.ctx, nil)
	require.NoError(t, err)
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM `+pgx.Identifier{tb.Schema}.Sanitize()+
		`.job_unique WHERE unique_key LIKE 'tick@%'`).Scan(&left))
	require.Zero(t, left, "passed windows are pruned")

	for _, p := range []pgmsg.EnqueueParams{
		{UniqueFor: time.Hour},
		{UniqueKey: "k", UniqueFor: 500 * time.Millisecond},
		{UniqueKey: "k", UniqueFor: 400 * 24 * time.Hour},
		{UniqueKey: "k", UniqueFor: -time.Hour},
	} {
		_, err := tb.client.Enqueue(tb.ctx, "uq", p, nil)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%+v", p)
	}
	_, err = tb.Pool.Exec(tb.ctx, `SELECT `+pgx.Identifier{tb.Schema}.Sanitize()+`.enqueue('uq', '\x', p_unique_key => 'k', p_unique_for => '1 month')`)
	require.ErrorIs(t, pgmsg.MapError(err), pgmsg.ErrInvalidArgument)
	_, err = tb.Pool.Exec(tb.ctx, `SELECT `+pgx.Identifier{tb.Schema}.Sanitize()+`.enqueue('uq', '\x', p_unique_for => '1 hour')`)
	require.ErrorIs(t, pgmsg.MapError(err), pgmsg.ErrInvalidArgument)
}

// Concurrent enqueuers of one key and window agree on one job.
func TestUniqueWindowConcurrent(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "uc", pgmsg.QueueConfig{})
	var (
		mu  sync.Mutex
		ids = map[int64]int{}
		wg  sync.WaitGroup
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := tb.client.Enqueue(tb.ctx, "uc", pgmsg.EnqueueParams{UniqueKey: "one", UniqueFor: 366 * 24 * time.Hour}, nil)
			require.NoError(t, err)
			mu.Lock()
			ids[r.ID]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Len(t, ids, 1, "one job for the window")
	st, err := tb.client.QueueStats(tb.ctx, "uc")
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Available)
}

// The volume that holds the queue's jobs fills up (smallTablespace):
// enqueues fail with ErrDiskFull (PM021) and store nothing, every
// acknowledged job is claimed with its payload, and enqueueing resumes by
// itself once space returns.
func TestDiskFullJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ts, dir := smallTablespace(t, tb)
	tb.queue(t, "dq", pgmsg.QueueConfig{})
	s := pgx.Identifier{tb.Schema}.Sanitize()
	for _, table := range []string{"job", "job_payload"} {
		_, err := tb.Pool.Exec(tb.ctx, fmt.Sprintf("ALTER TABLE %s.%s SET TABLESPACE %s", s, table, ts))
		require.NoError(t, err)
		// Back before the tablespace is dropped (clean-ups run last first).
		t.Cleanup(func() {
			_, _ = tb.Pool.Exec(context.Background(), fmt.Sprintf("ALTER TABLE %s.%s SET TABLESPACE pg_default", s, table))
		})
	}
	filler := fillVolume(t, dir)

	rnd := rand.New(rand.NewChaCha8([32]byte{2}))
	acked := map[int64]string{}
	var full error
	for i := 0; i < 200 && full == nil; i++ {
		v := incompressible(rnd)
		res, err := tb.client.Enqueue(tb.ctx, "dq", pgmsg.EnqueueParams{Payload: v}, nil)
		if err != nil {
			full = err
			break
		}
		acked[res.ID] = string(v)
	}
	require.Error(t, full, "the volume never filled")
	require.ErrorIs(t, full, pgmsg.ErrDiskFull)
	require.Equal(t, "PM021", pgmsg.ErrorCode(full))
	t.Logf("disk full after %d jobs: %v", len(acked), full)

	claimAll := func() map[int64]string {
		got := map[int64]string{}
		for {
			jobs, err := tb.client.ClaimJobs(tb.ctx, "dq", &pgmsg.ClaimJobsOpts{Max: 50})
			require.NoError(t, err)
			if len(jobs) == 0 {
				return got
			}
			for _, j := range jobs {
				got[j.ID] = string(j.Payload)
				require.NoError(t, tb.client.Complete(tb.ctx, j))
			}
		}
	}
	require.Equal(t, acked, claimAll(), "the acknowledged jobs")

	require.NoError(t, os.Remove(filler))
	res, err := tb.client.Enqueue(tb.ctx, "dq", pgmsg.EnqueueParams{Payload: []byte("after")}, nil)
	require.NoError(t, err)
	require.Equal(t, map[int64]string{res.ID: "after"}, claimAll())
}
