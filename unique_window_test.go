package pgmsg_test

import (
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

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
