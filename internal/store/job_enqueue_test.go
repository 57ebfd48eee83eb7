package store

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// The enqueue has two forms: enqueueDirectSQL (JobEnqueueDirect) and
// enqueue_many() (the sqlc query JobEnqueueMany). The same batch, on two
// schemas with the same queue, must store the same jobs (queue, payload,
// kind, priority, state, run_at, max_attempts, timeout, attempt, no
// unique key, tags or metadata), answer the same, and wake the same
// listeners; and the direct statement must leave to enqueue_many() the
// queues it does not cover.
func TestJobEnqueueParity(t *testing.T) {
	ctx := context.Background()
	future := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	past := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	batches := [][]JobParams{
		{{Payload: []byte("one")}},
		{
			{Payload: []byte("a"), Kind: "mail", Priority: 3},
			{Payload: nil, Priority: -7, MaxAttempts: 9},
			{Payload: []byte("c"), RunAt: future, Timeout: 90 * time.Second},
			{Payload: []byte("d"), RunAt: past, Kind: "k", MaxAttempts: 1},
			{Payload: []byte("e"), Delay: 10 * time.Minute, Priority: 32767},
			{Payload: []byte("f"), Priority: -32768, Timeout: time.Millisecond},
		},
		{{Payload: []byte("later"), Delay: time.Hour}, {Payload: []byte("later2"), RunAt: future}}, // wakes no one
	}
	type setup struct {
		b *pgtest.Bundle
		s *Store
		l *pgx.Conn
	}
	open := func() setup {
		b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 1})
		fq := pgx.Identifier{b.Schema}.Sanitize()
		for _, q := range []string{
			`SELECT ` + fq + `.queue_create('q', p_max_attempts => 6, p_job_timeout => interval '5 minutes')`,
			`SELECT ` + fq + `.queue_create('deep', p_max_depth => 1000)`,
			`SELECT ` + fq + `.queue_create('small', p_max_payload_bytes => 4)`,
		} {
			if _, err := b.Pool.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		l, err := pgx.Connect(ctx, b.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		if _, err := l.Exec(ctx, `LISTEN `+pgx.Identifier{b.Schema + "_log"}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		return setup{b, New(b.Schema), l}
	}
	// wakes drains the notifications the listener got.
	wakes := func(c *pgx.Conn) []string {
		var out []string
		for {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			n, err := c.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return out
			}
			out = append(out, n.Payload)
		}
	}
	type answer struct {
		Dup   bool
		State string
		RunAt string // "now" for an enqueue-time run_at, the time otherwise
	}
	// The jobs as stored: run_at as given, or relative to the enqueue's
	// clock reading (each form reads its own).
	table := func(b *pgtest.Bundle) []string {
		fq := pgx.Identifier{b.Schema}.Sanitize()
		rows, err := b.Pool.Query(ctx, `SELECT q.name, pg_catalog.encode(pl.payload, 'escape'), coalesce(j.kind, '<null>'), j.priority, j.state, j.attempt, j.max_attempts,
		        coalesce(j.timeout::text, '<null>'), CASE WHEN j.run_at = ANY ($1::timestamptz[]) THEN j.run_at::text
		             WHEN j.run_at = j.enqueued_at THEN 'now' ELSE (j.run_at - j.enqueued_at)::text END,
		        j.unique_key IS NULL, j.tags IS NULL, j.metadata IS NULL, j.lease_token IS NULL, j.worker IS NULL
		   FROM `+fq+`.job j JOIN `+fq+`.queue q USING (queue_id) JOIN `+fq+`.job_payload pl ON pl.id = j.id
		  ORDER BY j.id`, []time.Time{past, future})
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%v", vals))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	direct, fn := open(), open()
	for i, jobs := range batches {
		batch := NewJobBatch("q", len(jobs), false)
		for k := range jobs {
			batch.Set(k, &jobs[k])
		}
		var gotD []answer
		ok, err := direct.s.JobEnqueueDirect(ctx, direct.b.Pool, &batch, func(_ int, r JobEnqueued) {
			gotD = append(gotD, answer{r.Duplicate, r.State, r.RunAt.Format(time.RFC3339Nano)})
		})
		if err != nil || !ok {
			t.Fatalf("batch %d: the direct statement enqueued %v, %v", i, ok, err)
		}
		rows, err := fn.s.q.JobEnqueueMany(ctx, fn.s.DB(fn.b.Pool), batch.arg)
		if err != nil {
			t.Fatal(err)
		}
		var gotF []answer
		for _, r := range rows {
			gotF = append(gotF, answer{r.Duplicate, r.State, r.RunAt.Time.Format(time.RFC3339Nano)})
		}
		// run_at differs where it is the enqueue's clock: compare it only
		// where the batch gave one.
		for k := range jobs {
			if jobs[k].RunAt.IsZero() && k < len(gotD) && k < len(gotF) {
				gotD[k].RunAt, gotF[k].RunAt = "clock", "clock"
			}
		}
		if !reflect.DeepEqual(gotD, gotF) {
			t.Fatalf("batch %d answers:\ndirect statement %+v\nenqueue_many()   %+v", i, gotD, gotF)
		}
		if wd, wf := wakes(direct.l), wakes(fn.l); !reflect.DeepEqual(wd, wf) {
			t.Fatalf("batch %d wakes:\ndirect statement %q\nenqueue_many()   %q", i, wd, wf)
		}
	}
	if got, want := table(direct.b), table(fn.b); !reflect.DeepEqual(got, want) {
		t.Fatalf("jobs:\ndirect statement %q\nenqueue_many()   %q", got, want)
	}
	// What the statement leaves to enqueue_many(): a queue with a depth
	// cap, a payload over the queue's limit, an unknown queue.
	for _, q := range []string{"deep", "small", "nosuch"} {
		batch := NewJobBatch(q, 1, true)
		batch.Set(0, &JobParams{Payload: []byte("12345")})
		ok, err := direct.s.JobEnqueueDirect(ctx, direct.b.Pool, &batch, func(int, JobEnqueued) { t.Fatal("a job") })
		if err != nil || ok {
			t.Fatalf("queue %s: the direct statement enqueued %v, %v", q, ok, err)
		}
	}
}

// The direct enqueue statement stores what enqueue_many() stores and
// leaves to it the queues and batches it does not cover.
func TestEnqueueDirect(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	st := New(b.Schema)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	job := func(payload []byte) JobParams { return JobParams{Payload: payload} }
	arg := func(queue string, jobs ...JobParams) *JobBatch {
		b := NewJobBatch(queue, len(jobs), true)
		for i := range jobs {
			b.Set(i, &jobs[i])
		}
		return &b
	}
	// enqueueDirect returns the direct statement's results, nil when
	// enqueue_many() must enqueue.
	enqueueDirect := func(jb *JobBatch) ([]*JobEnqueued, error) {
		out := make([]*JobEnqueued, jb.Len())
		ok, err := st.JobEnqueueDirect(ctx, b.Pool, jb, func(i int, r JobEnqueued) {
			out[i] = &r
		})
		if !ok {
			out = nil
		}
		return out, err
	}

	// An unknown queue: enqueue_many creates it (or raises PM101).
	out, err := enqueueDirect(arg("q", job([]byte("a"))))
	require.NoError(t, err)
	require.Nil(t, out)

	_, err = st.QueueCreate(ctx, b.Pool, "q", QueueConfig{MaxAttempts: 3, MaxPayloadBytes: 10}, false)
	require.NoError(t, err)
	a := arg("q", JobParams{Payload: []byte("a"), Kind: "k", Priority: 5},
		JobParams{Payload: []byte("b"), Delay: time.Hour, MaxAttempts: 7})
	before := time.Now()
	out, err = enqueueDirect(a)
	require.NoError(t, err)
	require.Len(t, out, 2)
	require.Less(t, out[0].ID, out[1].ID, "input order")
	require.Equal(t, string(pgmsgtype.JobStateAvailable), out[0].State)
	require.Equal(t, string(pgmsgtype.JobStateScheduled), out[1].State)
	require.WithinDuration(t, before.Add(time.Hour), out[1].RunAt, time.Minute)
	j0, err := st.JobGet(ctx, b.Pool, out[0].ID)
	require.NoError(t, err)
	require.Equal(t, "k", j0.Kind)
	require.Equal(t, 5, j0.Priority)
	require.Equal(t, 3, j0.MaxAttempts, "the queue's")
	require.Equal(t, []byte("a"), j0.Payload)
	j1, err := st.JobGet(ctx, b.Pool, out[1].ID)
	require.NoError(t, err)
	require.Equal(t, "", j1.Kind)
	require.Equal(t, 7, j1.MaxAttempts)

	// A payload over the queue's limit: nothing inserted, enqueue_many
	// raises PM103.
	out, err = enqueueDirect(arg("q", job([]byte("ok")), job(make([]byte, 11))))
	require.NoError(t, err)
	require.Nil(t, out)
	err = st.JobEnqueueMany(ctx, b.Pool, arg("q", job([]byte("ok")), job(make([]byte, 11))), func(int, JobEnqueued) {})
	require.ErrorIs(t, err, errs.PayloadTooLarge)
	var n int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{b.Schema, "job"}.Sanitize()).Scan(&n))
	require.Equal(t, 2, n)

	// A queue with a max_depth: enqueue_many checks it.
	_, err = st.QueueCreate(ctx, b.Pool, "capped", QueueConfig{MaxDepth: 5}, false)
	require.NoError(t, err)
	out, err = enqueueDirect(arg("capped", job([]byte("a"))))
	require.NoError(t, err)
	require.Nil(t, out)
}

// A batch with sequence keys is enqueue_many()'s (the direct statement
// stores no sequence): each sequence's first job is its head, the others
// wait as pending, and jobs without a key are as without sequences.
func TestJobEnqueueSequenceTakesEnqueueMany(t *testing.T) {
	ctx := context.Background()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 1})
	s := New(b.Schema)
	batch := NewJobBatch("q", 4, true)
	for i, key := range []string{"x", "x", "", "y"} {
		batch.Set(i, &JobParams{Payload: []byte{byte('0' + i)}, SequenceKey: key})
	}
	require.True(t, batch.more)
	var states []string
	require.NoError(t, s.JobEnqueueMany(ctx, b.Pool, &batch, func(_ int, r JobEnqueued) { states = append(states, r.State) }))
	require.Equal(t, []string{"available", "pending", "available", "available"}, states)
}
