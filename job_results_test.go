package pgmsg_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
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
