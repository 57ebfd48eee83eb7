package store

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

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
