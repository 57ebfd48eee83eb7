package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// sqlAPI renders a statement for the test's schema: {s} is the schema.
func (tb *testBundle) sqlAPI(q string) string {
	return strings.ReplaceAll(q, "{s}", pgx.Identifier{tb.Schema}.Sanitize())
}

func (tb *testBundle) queue(t *testing.T, name string, cfg pgmsg.QueueConfig) *pgmsg.Queue {
	t.Helper()
	q, err := tb.client.CreateQueue(tb.ctx, name, cfg)
	require.NoError(t, err)
	return q
}

func (tb *testBundle) enqueueN(t *testing.T, queue string, n int, mk func(i int) pgmsg.EnqueueParams) []int64 {
	t.Helper()
	var ids []int64
	for start := 0; start < n; start += 500 {
		var ps []pgmsg.EnqueueParams
		for i := start; i < min(n, start+500); i++ {
			p := pgmsg.EnqueueParams{Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
			if mk != nil {
				p = mk(i)
			}
			ps = append(ps, p)
		}
		res, err := tb.client.EnqueueMany(tb.ctx, queue, ps, nil)
		require.NoError(t, err)
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

func (tb *testBundle) stats(t *testing.T, queue string) *pgmsg.QueueStats {
	t.Helper()
	s, err := tb.client.QueueStats(tb.ctx, queue)
	require.NoError(t, err)
	return s
}

// claimWithin claims one job, retrying until one is claimable or d passes.
func (tb *testBundle) claimWithin(t *testing.T, queue string, d time.Duration, opts *pgmsg.ClaimJobsOpts) *pgmsg.Job {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		jobs, err := tb.client.ClaimJobs(tb.ctx, queue, opts)
		require.NoError(t, err)
		if len(jobs) > 0 {
			return jobs[0]
		}
		require.True(t, time.Now().Before(deadline), "no job of %s claimable within %s", queue, d)
		time.Sleep(10 * time.Millisecond)
	}
}

func requireCode(t *testing.T, err error, sentinel error, code string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, sentinel)
	require.Equal(t, code, pgmsg.ErrorCode(err))
}

func TestQueueCreateUpdateList(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	q := b.queue(t, "emails", pgmsg.QueueConfig{MaxAttempts: 5, Lease: 2 * time.Second})
	require.Equal(t, 5, q.MaxAttempts)
	require.Equal(t, 2*time.Second, q.Lease)
	require.Equal(t, pgmsg.QueueRetryBackoffDefault, q.RetryBackoff)
	require.Equal(t, pgmsg.QueueRetryBackoffMaxDefault, q.RetryBackoffMax)
	require.Equal(t, pgmsg.QueueArchiveRetentionDefault, q.ArchiveRetention)
	require.Equal(t, pgmsg.QueueMaxPayloadBytesDefault, q.MaxPayloadBytes)

	_, err := b.client.CreateQueue(b.ctx, "emails", pgmsg.QueueConfig{})
	requireCode(t, err, pgmsg.ErrQueueExists, "PM102")
	_, err = b.client.CreateQueue(b.ctx, "bad name!", pgmsg.QueueConfig{})
	require.ErrorIs(t, err, pgmsg.ErrInvalidName)
	_, err = b.client.CreateQueue(b.ctx, "neg", pgmsg.QueueConfig{MaxAttempts: -1})
	requireCode(t, err, pgmsg.ErrInvalidMaxAttempts, "PM105")

	same, err := b.client.EnsureQueue(b.ctx, "emails", pgmsg.QueueConfig{MaxAttempts: 9})
	require.NoError(t, err)
	require.Equal(t, 5, same.MaxAttempts, "EnsureQueue leaves an existing queue alone")

	up, err := b.client.UpdateQueue(b.ctx, "emails", pgmsg.QueueConfig{RetryBackoff: 250 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, up.RetryBackoff)
	require.Equal(t, 5, up.MaxAttempts)
	_, err = b.client.UpdateQueue(b.ctx, "nope", pgmsg.QueueConfig{MaxAttempts: 2})
	requireCode(t, err, pgmsg.ErrUnknownQueue, "PM101")

	b.queue(t, "alpha", pgmsg.QueueConfig{})
	qs, err := b.client.ListQueues(b.ctx)
	require.NoError(t, err)
	require.Len(t, qs, 2)
	require.Equal(t, "alpha", qs[0].Name)

	b.enqueueN(t, "alpha", 1, nil)
	requireCode(t, b.client.DeleteQueue(b.ctx, "alpha", false), pgmsg.ErrQueueNotEmpty, "PM108")
	require.NoError(t, b.client.DeleteQueue(b.ctx, "alpha", true))
	_, err = b.client.QueueStats(b.ctx, "alpha")
	requireCode(t, err, pgmsg.ErrUnknownQueue, "PM101")
}

func TestQueueEnqueueBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := b.ctx
	// Unknown queue with auto-create off: nothing is created.
	_, err := b.client.Enqueue(ctx, "ghost", pgmsg.EnqueueParams{Payload: []byte("x")}, &pgmsg.EnqueueOpts{DisableCreateQueue: true})
	requireCode(t, err, pgmsg.ErrUnknownQueue, "PM101")
	qs, err := b.client.ListQueues(ctx)
	require.NoError(t, err)
	require.Empty(t, qs)

	b.queue(t, "small", pgmsg.QueueConfig{MaxPayloadBytes: 8})
	good := pgmsg.EnqueueParams{Payload: []byte("ok")}
	for name, tc := range map[string]struct {
		p        pgmsg.EnqueueParams
		sentinel error
		code     string
	}{
		"oversize":          {pgmsg.EnqueueParams{Payload: []byte("123456789")}, pgmsg.ErrPayloadTooLarge, "PM103"},
		"negative delay":    {pgmsg.EnqueueParams{Delay: -time.Second}, pgmsg.ErrInvalidDelay, "PM104"},
		"max attempts < 1":  {pgmsg.EnqueueParams{MaxAttempts: -1}, pgmsg.ErrInvalidMaxAttempts, "PM105"},
		"priority range":    {pgmsg.EnqueueParams{Priority: 40000}, pgmsg.ErrInvalidArgument, "PM004"},
		"run_at with delay": {pgmsg.EnqueueParams{RunAt: time.Now(), Delay: time.Second}, pgmsg.ErrInvalidArgument, "PM004"},
	} {
		// The bad job is the second of a batch: the first is not written either.
		_, err := b.client.EnqueueMany(ctx, "small", []pgmsg.EnqueueParams{good, tc.p}, nil)
		require.ErrorIs(t, err, tc.sentinel, name)
		require.Equal(t, tc.code, pgmsg.ErrorCode(err), name)
	}
	_, err = b.client.EnqueueMany(ctx, "small", nil, nil)
	require.ErrorIs(t, err, pgmsg.ErrEmptyBatch)

	// The SQL API checks the same (the Go checks above never reach it).
	for sql, code := range map[string]string{
		`SELECT * FROM {s}.enqueue('small', 'ok', p_delay => '-1 second')`:                               "PM104",
		`SELECT * FROM {s}.enqueue('small', 'ok', p_max_attempts => 0)`:                                  "PM105",
		`SELECT * FROM {s}.enqueue('small', 'far too large')`:                                            "PM103",
		`SELECT * FROM {s}.enqueue('ghost', 'ok', p_create_queue => false)`:                              "PM101",
		`SELECT * FROM {s}.enqueue_many('small', ARRAY['a','b']::bytea[], p_max_attempts => ARRAY[1,0])`: "PM105",
	} {
		_, err := b.Pool.Exec(ctx, b.sqlAPI(sql))
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), sql)
		require.Equal(t, code, pgErr.Code, sql)
	}
	s := b.stats(t, "small")
	require.Zero(t, s.Available+s.Scheduled+s.Running+s.Retrying+s.Dead+s.Archived)
	qs, err = b.client.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)
}

func TestJobEnqueueTxRollsBack(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	res, err := b.client.EnqueueTx(b.ctx, tx, "q", pgmsg.EnqueueParams{Payload: []byte("a")}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))
	_, err = b.client.GetJob(b.ctx, res.ID)
	requireCode(t, err, pgmsg.ErrUnknownJob, "PM107")

	tx, err = b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	res, err = b.client.EnqueueTx(b.ctx, tx, "q", pgmsg.EnqueueParams{Payload: []byte("b")}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	j, err := b.client.GetJob(b.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateAvailable, j.State)
	require.Equal(t, []byte("b"), j.Payload)
}

func TestJobClaimPriorityThenRunAt(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	base := time.Now().Add(-time.Hour)
	// kind names the expected claim position.
	in := []pgmsg.EnqueueParams{
		{Kind: "4", Priority: 0, RunAt: base.Add(2 * time.Second)},
		{Kind: "2", Priority: 5, RunAt: base.Add(3 * time.Second)},
		{Kind: "3", Priority: 0, RunAt: base.Add(1 * time.Second)},
		{Kind: "1", Priority: 5, RunAt: base},
		{Kind: "6", Priority: -3, RunAt: base},
		{Kind: "5", Priority: 0, RunAt: base.Add(2 * time.Second)}, // same run_at as "4": id order
		{Kind: "late", Priority: 100, Delay: time.Hour},            // highest priority, but not due
	}
	_, err := b.client.EnqueueMany(b.ctx, "q", in, nil)
	require.NoError(t, err)
	for want := 1; want <= 6; want++ {
		jobs, err := b.client.ClaimJobs(b.ctx, "q", nil)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, fmt.Sprint(want), jobs[0].Kind)
		require.Equal(t, 1, jobs[0].Attempt)
	}
	jobs, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Empty(t, jobs, "a scheduled job is not claimed early")

	// A batch claim returns the same order.
	_, err = b.client.EnqueueMany(b.ctx, "q", in[:6], nil)
	require.NoError(t, err)
	jobs, err = b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 6)
	for i, j := range jobs {
		require.Equal(t, fmt.Sprint(i+1), j.Kind)
	}
	_, err = b.client.ClaimJobs(b.ctx, "nope", nil)
	requireCode(t, err, pgmsg.ErrUnknownQueue, "PM101")
}

func TestJobScheduledNotClaimedEarly(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	res, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{Delay: 400 * time.Millisecond}, nil)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateScheduled, res.State)
	require.Equal(t, int64(1), b.stats(t, "q").Scheduled)
	j := b.claimWithin(t, "q", 5*time.Second, nil)
	require.Equal(t, res.ID, j.ID)
	require.False(t, j.AttemptedAt.Before(res.RunAt), "claimed at %s before run_at %s", j.AttemptedAt, res.RunAt)
}

func TestJobRetryBackoffThenDead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const base = 60 * time.Millisecond
	b.queue(t, "q", pgmsg.QueueConfig{RetryBackoff: base, RetryBackoffMax: 150 * time.Millisecond})
	res, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{Kind: "flaky", MaxAttempts: 4}, nil)
	require.NoError(t, err)
	// Backoff doubles per attempt and is capped: 60ms, 120ms, 150ms (+-10%).
	wantDelay := []time.Duration{base, 2 * base, 150 * time.Millisecond}
	var retryAt time.Time
	for attempt := 1; attempt <= 4; attempt++ {
		j := b.claimWithin(t, "q", 5*time.Second, nil)
		require.Equal(t, res.ID, j.ID)
		require.False(t, j.AttemptedAt.Before(retryAt), "retry claimed at %s before its run_at %s", j.AttemptedAt, retryAt)
		require.Equal(t, attempt, j.Attempt)
		require.Len(t, j.Errors, attempt-1)
		fr, err := b.client.Fail(b.ctx, j, fmt.Errorf("boom %d", attempt), nil)
		require.NoError(t, err)
		got, err := b.client.GetJob(b.ctx, j.ID)
		require.NoError(t, err)
		require.Len(t, got.Errors, attempt)
		last := got.Errors[attempt-1]
		require.Equal(t, attempt, last.Attempt)
		require.Equal(t, fmt.Sprintf("boom %d", attempt), last.Error)
		if attempt < 4 {
			require.Equal(t, pgmsg.JobStateRetrying, fr.State)
			delay := fr.RunAt.Sub(last.At)
			want := wantDelay[attempt-1]
			require.GreaterOrEqual(t, delay, want*9/10-time.Millisecond, "attempt %d", attempt)
			require.LessOrEqual(t, delay, want*11/10+time.Millisecond, "attempt %d", attempt)
			retryAt = fr.RunAt
		} else {
			require.Equal(t, pgmsg.JobStateDead, fr.State)
			require.Equal(t, pgmsg.JobStateDead, got.State)
			require.NotNil(t, got.FinishedAt)
		}
	}
	s := b.stats(t, "q")
	require.Equal(t, int64(1), s.Dead)
	require.Zero(t, s.Available+s.Retrying+s.Running)
	none, err := b.client.ClaimJobs(b.ctx, "q", nil)
	require.NoError(t, err)
	require.Empty(t, none, "dead jobs are never claimed")

	// An explicit dead failure skips the remaining attempts.
	_, err = b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	j := b.claimWithin(t, "q", time.Second, nil)
	fr, err := b.client.Fail(b.ctx, j, errors.New("bad input"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateDead, fr.State)
}

func TestJobUniqueKeyDedupes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	first, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{UniqueKey: "user-1", Payload: []byte("a")}, nil)
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	again, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{UniqueKey: "user-1", Payload: []byte("b")}, nil)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, first.ID, again.ID)

	// Within one batch, and mixed with new keys and unkeyed jobs.
	res, err := b.client.EnqueueMany(b.ctx, "q", []pgmsg.EnqueueParams{
		{UniqueKey: "user-2"}, {UniqueKey: "user-1"}, {}, {UniqueKey: "user-2"},
	}, nil)
	require.NoError(t, err)
	require.False(t, res[0].Duplicate)
	require.True(t, res[1].Duplicate)
	require.Equal(t, first.ID, res[1].ID)
	require.False(t, res[2].Duplicate)
	require.True(t, res[3].Duplicate)
	require.Equal(t, res[0].ID, res[3].ID)
	require.Equal(t, int64(3), b.stats(t, "q").Available)

	// Concurrent enqueues of one key: exactly one job.
	const racers = 16
	var wg sync.WaitGroup
	ids := make([]int64, racers)
	dups := make([]bool, racers)
	errs := make([]error, racers)
	start := make(chan struct{})
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{UniqueKey: "race"}, nil)
			errs[i] = err
			if err == nil {
				ids[i], dups[i] = r.ID, r.Duplicate
			}
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range racers {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
		if !dups[i] {
			created++
		}
	}
	require.Equal(t, 1, created)

	// Once the job finishes (archived), or dies, the key is free again.
	j, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	for _, job := range j {
		if job.UniqueKey == "user-1" {
			require.NoError(t, b.client.Complete(b.ctx, job))
		}
		if job.UniqueKey == "user-2" {
			_, err := b.client.Fail(b.ctx, job, errors.New("x"), &pgmsg.FailOpts{Dead: true})
			require.NoError(t, err)
		}
	}
	for _, key := range []string{"user-1", "user-2"} {
		r, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{UniqueKey: key}, nil)
		require.NoError(t, err)
		require.False(t, r.Duplicate, key)
	}
	// The dead user-2 cannot be requeued while the new one is live.
	n, err := b.client.RequeueDeadJobs(b.ctx, "q", nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestJobLateCompletionAfterRescueIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	res, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	old, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Lease: 300 * time.Millisecond, Worker: "old"})
	require.NoError(t, err)
	require.Len(t, old, 1)

	// Once the lease expires the next claim rescues the job and takes it.
	cur := b.claimWithin(t, "q", 5*time.Second, &pgmsg.ClaimJobsOpts{Lease: time.Minute, Worker: "new"})
	require.Equal(t, res.ID, cur.ID)
	require.Equal(t, 2, cur.Attempt, "the rescued attempt counts")
	require.NotEqual(t, cur.LeaseToken, old[0].LeaseToken, "a new claim draws a new token")
	require.Len(t, cur.Errors, 1)
	require.Contains(t, cur.Errors[0].Error, "lease expired")

	// Every late call of the old holder is rejected and changes nothing.
	requireCode(t, b.client.Complete(b.ctx, old[0]), pgmsg.ErrJobNotHeld, "PM106")
	_, err = b.client.Fail(b.ctx, old[0], errors.New("late"), nil)
	requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
	_, err = b.client.Snooze(b.ctx, old[0], 0)
	requireCode(t, err, pgmsg.ErrJobNotHeld, "PM106")
	requireCode(t, b.client.ExtendJob(b.ctx, old[0], time.Minute), pgmsg.ErrJobNotHeld, "PM106")
	cm, err := b.client.CompleteMany(b.ctx, []*pgmsg.Job{old[0]})
	require.NoError(t, err)
	require.Equal(t, []int64{res.ID}, cm.NotHeld)
	require.Empty(t, cm.Completed)

	got, err := b.client.GetJob(b.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateRunning, got.State)
	require.Equal(t, cur.LeaseToken, got.LeaseToken)
	require.Equal(t, "new", got.Worker)
	require.Len(t, got.Errors, 1)

	require.NoError(t, b.client.Complete(b.ctx, cur))
	got, err = b.client.GetJob(b.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateCompleted, got.State)
	require.Equal(t, 2, got.Attempt)
	// After archiving, a second completion is still "not held".
	requireCode(t, b.client.Complete(b.ctx, cur), pgmsg.ErrJobNotHeld, "PM106")
	requireCode(t, b.client.Complete(b.ctx, &pgmsg.Job{ID: 1 << 40, LeaseToken: 1}), pgmsg.ErrUnknownJob, "PM107")
}

func TestJobRescueOutOfAttemptsGoesDead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	res, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{MaxAttempts: 1}, nil)
	require.NoError(t, err)
	_, err = b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Lease: 100 * time.Millisecond})
	require.NoError(t, err)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := b.client.RescueJobs(b.ctx, "q")
		require.NoError(t, err)
		if n == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline))
		time.Sleep(20 * time.Millisecond)
	}
	got, err := b.client.GetJob(b.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateDead, got.State)
	require.Len(t, got.Errors, 1)
}

func TestJobSnoozeExtendCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	res, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)

	j := b.claimWithin(t, "q", time.Second, nil)
	_, err = b.client.Snooze(b.ctx, j, -time.Second)
	requireCode(t, err, pgmsg.ErrInvalidDelay, "PM104")
	at, err := b.client.Snooze(b.ctx, j, time.Hour)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Hour), at, time.Minute)
	got, err := b.client.GetJob(b.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateScheduled, got.State)
	require.Zero(t, got.Attempt, "a snooze does not count an attempt")

	// Snooze 0 releases: claimable at once, same attempt number again.
	_, err = b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{Kind: "rel"}, nil)
	require.NoError(t, err)
	j = b.claimWithin(t, "q", time.Second, nil)
	_, err = b.client.Snooze(b.ctx, j, 0)
	require.NoError(t, err)
	j2 := b.claimWithin(t, "q", time.Second, &pgmsg.ClaimJobsOpts{Lease: 200 * time.Millisecond})
	require.Equal(t, j.ID, j2.ID)
	require.Equal(t, 1, j2.Attempt)

	// Extending keeps a lease past its original expiry.
	before := *j2.LeaseExpiresAt
	require.NoError(t, b.client.ExtendJob(b.ctx, j2, time.Minute))
	require.True(t, j2.LeaseExpiresAt.After(before.Add(30*time.Second)))
	time.Sleep(300 * time.Millisecond) // past the original 200ms lease
	n, err := b.client.RescueJobs(b.ctx, "q")
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, b.client.Complete(b.ctx, j2))

	// Cancel archives a job in any state; its holder's completion is rejected.
	_, err = b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{Kind: "c"}, nil)
	require.NoError(t, err)
	j3 := b.claimWithin(t, "q", time.Second, nil)
	ok, err := b.client.CancelJob(b.ctx, j3.ID)
	require.NoError(t, err)
	require.True(t, ok)
	requireCode(t, b.client.Complete(b.ctx, j3), pgmsg.ErrJobNotHeld, "PM106")
	ok, err = b.client.CancelJob(b.ctx, j3.ID)
	require.NoError(t, err)
	require.False(t, ok)
	got, err = b.client.GetJob(b.ctx, j3.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateCancelled, got.State)
	ok, err = b.client.CancelJob(b.ctx, res.ID) // the snoozed one
	require.NoError(t, err)
	require.True(t, ok)
	_, err = b.client.CancelJob(b.ctx, 1<<40)
	requireCode(t, err, pgmsg.ErrUnknownJob, "PM107")
}

func TestJobCompleteManyPartial(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	b.enqueueN(t, "q", 5, nil)
	jobs, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 5})
	require.NoError(t, err)
	require.Len(t, jobs, 5)
	_, err = b.client.CancelJob(b.ctx, jobs[1].ID)
	require.NoError(t, err)
	stale := *jobs[3]
	stale.LeaseToken--
	res, err := b.client.CompleteMany(b.ctx, []*pgmsg.Job{jobs[0], jobs[1], jobs[2], &stale, jobs[4]})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{jobs[0].ID, jobs[2].ID, jobs[4].ID}, res.Completed)
	require.ElementsMatch(t, []int64{jobs[1].ID, jobs[3].ID}, res.NotHeld)
	s := b.stats(t, "q")
	require.Equal(t, int64(1), s.Running)
	require.Equal(t, int64(4), s.Archived)
	require.Equal(t, int64(4), s.ArchivedLastMinute)
}

func TestQueueDeadLetterTools(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{MaxAttempts: 1})
	b.enqueueN(t, "q", 6, func(i int) pgmsg.EnqueueParams {
		return pgmsg.EnqueueParams{Kind: []string{"email", "sms"}[i%2], Payload: []byte{byte(i)}}
	})
	jobs, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 6})
	require.NoError(t, err)
	for _, j := range jobs {
		fr, err := b.client.Fail(b.ctx, j, fmt.Errorf("fail %s", j.Kind), nil)
		require.NoError(t, err)
		require.Equal(t, pgmsg.JobStateDead, fr.State)
	}
	dead, err := b.client.ListDeadJobs(b.ctx, "q", nil)
	require.NoError(t, err)
	require.Len(t, dead, 6)
	require.Equal(t, "fail "+dead[0].Kind, dead[0].Errors[0].Error)
	page, err := b.client.ListDeadJobs(b.ctx, "q", &pgmsg.DeadJobsOpts{Kind: "sms", Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 2)
	page2, err := b.client.ListDeadJobs(b.ctx, "q", &pgmsg.DeadJobsOpts{Kind: "sms", AfterID: page[1].ID})
	require.NoError(t, err)
	require.Len(t, page2, 1)

	// Requeue one, then all of a kind.
	n, err := b.client.RequeueDeadJobs(b.ctx, "q", &pgmsg.DeadJobsOpts{IDs: []int64{dead[0].ID}})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	got, err := b.client.GetJob(b.ctx, dead[0].ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateAvailable, got.State)
	require.Zero(t, got.Attempt)
	require.Len(t, got.Errors, 1, "the error history is kept")
	n, err = b.client.RequeueDeadJobs(b.ctx, "q", &pgmsg.DeadJobsOpts{Kind: "sms"})
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	s := b.stats(t, "q")
	require.Equal(t, int64(4), s.Available)
	require.Equal(t, int64(2), s.Dead)

	// A requeued job runs again.
	j := b.claimWithin(t, "q", time.Second, &pgmsg.ClaimJobsOpts{})
	require.Equal(t, 1, j.Attempt)

	n, err = b.client.PurgeDeadJobs(b.ctx, "q", &pgmsg.DeadJobsOpts{Kind: "email"})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	require.Zero(t, b.stats(t, "q").Dead)
	_, err = b.client.ListDeadJobs(b.ctx, "nope", nil)
	requireCode(t, err, pgmsg.ErrUnknownQueue, "PM101")
}

func TestQueueArchivePruneInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	b.queue(t, "keep", pgmsg.QueueConfig{})
	b.enqueueN(t, "q", 25, nil)
	b.enqueueN(t, "keep", 3, nil)
	for _, q := range []string{"q", "keep"} {
		jobs, err := b.client.ClaimJobs(b.ctx, q, &pgmsg.ClaimJobsOpts{Max: 100})
		require.NoError(t, err)
		_, err = b.client.CompleteMany(b.ctx, jobs)
		require.NoError(t, err)
	}
	// Within the default 7-day retention nothing goes.
	n, err := b.client.PruneArchive(b.ctx, "", nil)
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = b.client.UpdateQueue(b.ctx, "q", pgmsg.QueueConfig{ArchiveRetention: time.Millisecond})
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	n, err = b.client.PruneArchive(b.ctx, "", &pgmsg.PruneArchiveOpts{BatchSize: 4})
	require.NoError(t, err)
	require.Equal(t, int64(25), n)
	require.Zero(t, b.stats(t, "q").Archived)
	require.Equal(t, int64(3), b.stats(t, "keep").Archived)
	// One SQL call deletes at most its limit.
	_, err = b.client.UpdateQueue(b.ctx, "keep", pgmsg.QueueConfig{ArchiveRetention: time.Millisecond})
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	var deleted int
	require.NoError(t, b.Pool.QueryRow(b.ctx, b.sqlAPI(`SELECT {s}.archive_prune('keep', p_limit => 2)`)).Scan(&deleted))
	require.Equal(t, 2, deleted)
}

func TestQueueStatsByState(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{RetryBackoff: time.Hour})
	b.enqueueN(t, "q", 10, nil)
	_, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{Delay: time.Hour}, nil)
	require.NoError(t, err)
	jobs, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 4})
	require.NoError(t, err)
	require.NoError(t, b.client.Complete(b.ctx, jobs[0]))
	_, err = b.client.Fail(b.ctx, jobs[1], errors.New("x"), nil)
	require.NoError(t, err)
	_, err = b.client.Fail(b.ctx, jobs[2], errors.New("x"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	s := b.stats(t, "q")
	require.Equal(t, pgmsg.QueueStats{
		Queue: "q", Available: 6, Scheduled: 1, Running: 1, Retrying: 1, Dead: 1, Archived: 1,
		OldestAvailableAge: s.OldestAvailableAge, ArchivedLastMinute: 1, Throughput: 1.0 / 60,
	}, *s)
	require.Greater(t, s.OldestAvailableAge, time.Duration(0))
	all, err := b.client.AllQueueStats(b.ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
}

// TestJobClaimRaceExactlyOnce races raw claimers over a backlog: every job
// is claimed and archived exactly once.
func TestJobClaimRaceExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	const jobs = 2000
	ids := b.enqueueN(t, "q", jobs, nil)
	const racers = 8
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, racers)
	for r := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				claimed, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Max: 1 + r*7, Worker: fmt.Sprint(r)})
				if err != nil {
					errs <- err
					return
				}
				if len(claimed) == 0 {
					return
				}
				mu.Lock()
				for _, j := range claimed {
					seen[j.ID]++
				}
				mu.Unlock()
				res, err := b.client.CompleteMany(b.ctx, claimed)
				if err != nil {
					errs <- err
					return
				}
				if len(res.NotHeld) > 0 {
					errs <- fmt.Errorf("not held: %v", res.NotHeld)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, jobs)
	for _, id := range ids {
		require.Equal(t, 1, seen[id], "job %d", id)
	}
	s := b.stats(t, "q")
	require.Equal(t, int64(jobs), s.Archived)
	require.Zero(t, s.Available+s.Running)
}

// TestJobCompleteTxCommitsWithHandlerWrites: the completion and the
// handler's own writes commit or roll back together.
func TestJobCompleteTxCommitsWithHandlerWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	_, err := b.Pool.Exec(b.ctx, b.sqlAPI(`CREATE TABLE {s}.effects (job_id bigint PRIMARY KEY)`))
	require.NoError(t, err)
	res, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	j := b.claimWithin(t, "q", time.Second, nil)

	for _, commit := range []bool{false, true} {
		tx, err := b.Pool.Begin(b.ctx)
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, b.sqlAPI(`INSERT INTO {s}.effects VALUES ($1)`), j.ID)
		require.NoError(t, err)
		require.NoError(t, b.client.CompleteTx(b.ctx, tx, j))
		if commit {
			require.NoError(t, tx.Commit(b.ctx))
		} else {
			require.NoError(t, tx.Rollback(b.ctx))
		}
		got, err := b.client.GetJob(b.ctx, res.ID)
		require.NoError(t, err)
		var effects int
		require.NoError(t, b.Pool.QueryRow(b.ctx, b.sqlAPI(`SELECT count(*) FROM {s}.effects`)).Scan(&effects))
		if commit {
			require.Equal(t, pgmsg.JobStateCompleted, got.State)
			require.Equal(t, 1, effects)
		} else {
			require.Equal(t, pgmsg.JobStateRunning, got.State, "rolled back: still held")
			require.Zero(t, effects)
		}
	}
}

// TestJobUniqueBatchesDoNotDeadlock enqueues batches with the same keys in
// opposite orders concurrently.
func TestJobUniqueBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	const rounds, racers = 10, 6
	for r := range rounds {
		keys := []string{fmt.Sprint("a", r), fmt.Sprint("b", r), fmt.Sprint("c", r)}
		var wg sync.WaitGroup
		errs := make([]error, racers)
		results := make([][]*pgmsg.EnqueueResult, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ps := make([]pgmsg.EnqueueParams, len(keys))
				for k := range keys {
					key := keys[k]
					if i%2 == 1 {
						key = keys[len(keys)-1-k]
					}
					ps[k] = pgmsg.EnqueueParams{UniqueKey: key, Kind: key}
				}
				results[i], errs[i] = b.client.EnqueueMany(b.ctx, "q", ps, nil)
			}()
		}
		wg.Wait()
		idOf := map[string]int64{}
		for i := range racers {
			require.NoError(t, errs[i])
			for k, res := range results[i] {
				key := keys[k]
				if i%2 == 1 {
					key = keys[len(keys)-1-k]
				}
				if id, ok := idOf[key]; ok {
					require.Equal(t, id, res.ID, "key %s", key)
				}
				idOf[key] = res.ID
			}
		}
		require.Len(t, idOf, len(keys))
	}
	require.Equal(t, int64(rounds*3), b.stats(t, "q").Available)
}

// QueueLatency counts the jobs finished in the window by outcome and
// gives latency quantiles from the archive; a queue with nothing finished
// reports zeros, and a bad window is refused.
func TestQueueLatency(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "lat", pgmsg.QueueConfig{})
	tb.queue(t, "idle", pgmsg.QueueConfig{})
	ids := tb.enqueueN(t, "lat", 4, nil)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "lat", &pgmsg.ClaimJobsOpts{Max: 3})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	for _, j := range jobs {
		require.NoError(t, tb.client.Complete(tb.ctx, j))
	}
	// The fourth job was never claimed; cancel it.
	var claimed = map[int64]bool{}
	for _, j := range jobs {
		claimed[j.ID] = true
	}
	for _, id := range ids {
		if !claimed[id] {
			ok, err := tb.client.CancelJob(tb.ctx, id)
			require.NoError(t, err)
			require.True(t, ok)
		}
	}

	lat, err := tb.client.QueueLatency(tb.ctx, 0)
	require.NoError(t, err)
	require.Len(t, lat, 2)
	byName := map[string]pgmsg.QueueLatencyMetrics{}
	for _, l := range lat {
		byName[l.Queue] = l
	}
	l := byName["lat"]
	require.Equal(t, int64(3), l.Completed)
	require.Equal(t, int64(1), l.Cancelled)
	require.Equal(t, pgmsg.QueueLatencyWindowDefault, l.Window)
	require.Positive(t, l.LatencyMax)
	require.LessOrEqual(t, l.LatencyP50, l.LatencyP99)
	require.LessOrEqual(t, l.LatencyP99, l.LatencyMax)
	require.LessOrEqual(t, l.RunP50, l.RunP99)
	require.LessOrEqual(t, l.RunP99, l.LatencyMax, "a run is part of the latency")
	require.Equal(t, pgmsg.QueueLatencyMetrics{Queue: "idle", Window: time.Minute}, byName["idle"])

	_, err = tb.client.QueueLatency(tb.ctx, -time.Second)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.Pool.Exec(tb.ctx, tb.sqlAPI(`SELECT * FROM {s}.queue_latency('2 days')`))
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "PM004", pe.Code)
}

// A queue's rate limit: a token bucket of one second's worth (at least
// one job), refilled at the rate. The test moves the
// bucket's clock instead of waiting.
func TestQueueRateLimit(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	q := tb.queue(t, "rl", pgmsg.QueueConfig{RateLimit: 0.001}) // one job per 1000 s
	require.Equal(t, 0.001, q.RateLimit)
	tb.enqueueN(t, "rl", 20, nil)
	claim := func(opts *pgmsg.ClaimJobsOpts) int {
		t.Helper()
		jobs, err := tb.client.ClaimJobs(tb.ctx, "rl", opts)
		require.NoError(t, err)
		return len(jobs)
	}
	require.Equal(t, 1, claim(&pgmsg.ClaimJobsOpts{Max: 10}), "a full bucket: one job")
	require.Zero(t, claim(&pgmsg.ClaimJobsOpts{Max: 10}), "empty for the next 1000 s")
	require.Zero(t, claim(&pgmsg.ClaimJobsOpts{Max: 10, MaxBytes: 1 << 20}), "job_claim() with a byte cap too")
	var n int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM `+pgx.Identifier{tb.Schema}.Sanitize()+`.job_claim('rl', 10)`).Scan(&n))
	require.Zero(t, n, "SQL job_claim")
	back := func(d time.Duration) {
		_, err := tb.Pool.Exec(tb.ctx, `UPDATE `+pgx.Identifier{tb.Schema}.Sanitize()+`.queue SET rate_at = rate_at - $1::interval WHERE name = 'rl'`, d.String())
		require.NoError(t, err)
	}
	back(1001 * time.Second)
	require.Equal(t, 1, claim(&pgmsg.ClaimJobsOpts{Max: 10}), "1000 s later: one more")

	// 100 jobs/s: bursts of 100, then the rate.
	_, err := tb.client.UpdateQueue(tb.ctx, "rl", pgmsg.QueueConfig{RateLimit: 100})
	require.NoError(t, err)
	tb.enqueueN(t, "rl", 300, nil)
	start := time.Now()
	got := claim(&pgmsg.ClaimJobsOpts{Max: 500})
	require.GreaterOrEqual(t, got, 100, "a full bucket")
	require.LessOrEqual(t, float64(got), 100+100*time.Since(start).Seconds()+1, "no more than the bucket and its refill")
	back(time.Hour)
	require.Equal(t, 100, claim(&pgmsg.ClaimJobsOpts{Max: 500}), "a bucket holds one second's worth")

	_, err = tb.client.UpdateQueue(tb.ctx, "rl", pgmsg.QueueConfig{RateLimit: pgmsg.QueueRateLimitNone})
	require.NoError(t, err)
	st, err := tb.client.QueueStats(tb.ctx, "rl")
	require.NoError(t, err)
	require.Greater(t, st.Available, int64(100))
	require.Equal(t, int(st.Available), claim(&pgmsg.ClaimJobsOpts{Max: 500}), "no limit: every available job")

	for _, r := range []float64{-2, 2e6} {
		_, err := tb.client.UpdateQueue(tb.ctx, "rl", pgmsg.QueueConfig{RateLimit: r})
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%v", r)
	}
	_, err = tb.Pool.Exec(tb.ctx, `SELECT `+pgx.Identifier{tb.Schema}.Sanitize()+`.queue_update('rl', p_rate_limit => 'NaN')`)
	require.ErrorIs(t, pgmsg.MapError(err), pgmsg.ErrInvalidArgument)
}

// MaxRunning caps the queue's running jobs across every claimer and
// worker process.
func TestQueueMaxRunning(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "mr", pgmsg.QueueConfig{MaxRunning: 2})
	tb.enqueueN(t, "mr", 40, nil)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "mr", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	more, err := tb.client.ClaimJobs(tb.ctx, "mr", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Empty(t, more)
	require.NoError(t, tb.client.Complete(tb.ctx, jobs[0]))
	more, err = tb.client.ClaimJobs(tb.ctx, "mr", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, more, 1)
	// An expired lease does not hold a slot: the claim rescues its job.
	_, err = tb.Pool.Exec(tb.ctx, `UPDATE `+pgx.Identifier{tb.Schema}.Sanitize()+`.job SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, jobs[1].ID)
	require.NoError(t, err)
	more, err = tb.client.ClaimJobs(tb.ctx, "mr", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, more, 1)
	_, err = tb.Pool.Exec(tb.ctx, `UPDATE `+pgx.Identifier{tb.Schema}.Sanitize()+`.job SET state = 'available', lease_expires_at = NULL WHERE state = 'running'`)
	require.NoError(t, err)

	// Three worker processes (clients) of 8 handlers each: never more than
	// 2 handlers at once, and every job done.
	var running, peak, done atomic.Int32
	ctx, cancel := context.WithCancel(tb.ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range 3 {
		c, err := pgmsg.NewClient(tb.Pool, &pgmsg.Config{Schema: tb.Schema, PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		defer c.Close()
		w, err := c.NewWorker("mr", func(context.Context, *pgmsg.Job) error {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
			running.Add(-1)
			done.Add(1)
			return nil
		}, &pgmsg.WorkerOpts{Concurrency: 8})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Run(ctx)
		}()
	}
	require.Eventually(t, func() bool {
		st, err := tb.client.QueueStats(tb.ctx, "mr")
		require.NoError(t, err)
		return st.Available+st.Running == 0
	}, time.Minute, 20*time.Millisecond)
	cancel()
	wg.Wait()
	require.LessOrEqual(t, peak.Load(), int32(2), "handlers at once across the workers")
	require.Equal(t, int32(40-1), done.Load(), "every job but the one completed by hand")

	q, err := tb.client.UpdateQueue(tb.ctx, "mr", pgmsg.QueueConfig{MaxRunning: pgmsg.QueueMaxRunningNone})
	require.NoError(t, err)
	require.Zero(t, q.MaxRunning)
	_, err = tb.client.UpdateQueue(tb.ctx, "mr", pgmsg.QueueConfig{MaxRunning: -5})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
}

// A worker held back by a running cap claims again as soon as one of its
// handlers finishes, not at its poll interval (here an hour).
func TestQueueMaxRunningClaimsOnFreedSlot(t *testing.T) {
	t.Parallel()
	tb := setup(t, &pgmsg.Config{PollInterval: time.Hour})
	tb.queue(t, "mf", pgmsg.QueueConfig{MaxRunning: 2})
	tb.enqueueN(t, "mf", 30, nil)
	var done atomic.Int32
	w, err := tb.client.NewWorker("mf", func(context.Context, *pgmsg.Job) error {
		done.Add(1)
		return nil
	}, &pgmsg.WorkerOpts{Concurrency: 8})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(tb.ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	require.Eventually(t, func() bool { return done.Load() == 30 }, time.Minute, 10*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
}

// A paused queue takes jobs and hands none out, through every claim path
// (direct statement, job_claim(), a worker); resumed, its idle worker is
// woken and runs them.
func TestPauseQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t, &pgmsg.Config{PollInterval: time.Hour}) // only the resume's notification wakes the worker
	tb.queue(t, "pq", pgmsg.QueueConfig{})
	require.ErrorIs(t, tb.client.PauseQueue(tb.ctx, "nope"), pgmsg.ErrUnknownQueue)
	require.ErrorIs(t, tb.client.ResumeQueue(tb.ctx, "nope"), pgmsg.ErrUnknownQueue)

	// A first claim (job_claim()) and a second (the direct statement) on
	// the unpaused queue, so both paths are exercised below.
	_, err := tb.client.Enqueue(tb.ctx, "pq", pgmsg.EnqueueParams{Payload: []byte("0")}, nil)
	require.NoError(t, err)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "pq", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, tb.client.Complete(tb.ctx, jobs[0]))

	require.NoError(t, tb.client.PauseQueue(tb.ctx, "pq"))
	require.NoError(t, tb.client.PauseQueue(tb.ctx, "pq"), "idempotent")
	for i := range 3 {
		_, err := tb.client.Enqueue(tb.ctx, "pq", pgmsg.EnqueueParams{Payload: []byte{byte('a' + i)}}, nil)
		require.NoError(t, err, "a paused queue takes jobs")
	}
	st, err := tb.client.QueueStats(tb.ctx, "pq")
	require.NoError(t, err)
	require.True(t, st.Paused)
	require.Equal(t, int64(3), st.Available)
	jobs, err = tb.client.ClaimJobs(tb.ctx, "pq", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Empty(t, jobs, "direct claim")
	jobs, err = tb.client.ClaimJobs(tb.ctx, "pq", &pgmsg.ClaimJobsOpts{Max: 10, MaxBytes: 1 << 20})
	require.NoError(t, err)
	require.Empty(t, jobs, "job_claim()")
	var n int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM `+pgx.Identifier{tb.Schema}.Sanitize()+
		`.job_claim('pq', 10)`).Scan(&n))
	require.Zero(t, n, "SQL job_claim")

	var done atomic.Int32
	w, err := tb.client.NewWorker("pq", func(context.Context, *pgmsg.Job) error { done.Add(1); return nil }, nil)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(tb.ctx)
	defer cancel()
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()
	time.Sleep(300 * time.Millisecond)
	require.Zero(t, done.Load(), "the worker runs nothing while paused")

	require.NoError(t, tb.client.ResumeQueue(tb.ctx, "pq"))
	require.Eventually(t, func() bool { return done.Load() == 3 }, 30*time.Second, 10*time.Millisecond,
		"resumed: the notification wakes the worker (its poll interval is an hour)")
	st, err = tb.client.QueueStats(tb.ctx, "pq")
	require.NoError(t, err)
	require.False(t, st.Paused)
	cancel()
	require.ErrorIs(t, <-werr, context.Canceled)
}

// A queue's DeadRetention: maintenance (PruneDeadJobs, task
// queue.dead_prune) deletes its dead jobs older than it, payloads
// included; younger dead jobs, other states and queues without a
// retention keep theirs.
func TestDeadRetention(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	q := tb.queue(t, "pruned", pgmsg.QueueConfig{DeadRetention: time.Hour})
	require.Equal(t, time.Hour, q.DeadRetention)
	tb.queue(t, "kept", pgmsg.QueueConfig{})
	kill := func(queue string) int64 {
		res, err := tb.client.Enqueue(tb.ctx, queue, pgmsg.EnqueueParams{Payload: []byte("x")}, nil)
		require.NoError(t, err)
		jobs, err := tb.client.ClaimJobs(tb.ctx, queue, nil)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		_, err = tb.client.Fail(tb.ctx, jobs[0], errors.New("poison"), &pgmsg.FailOpts{Dead: true})
		require.NoError(t, err)
		return res.ID
	}
	old, young, otherQueue := kill("pruned"), kill("pruned"), kill("kept")
	alive, err := tb.client.Enqueue(tb.ctx, "pruned", pgmsg.EnqueueParams{Payload: []byte("y")}, nil)
	require.NoError(t, err)
	// Two of the dead jobs went dead two hours ago (the test moves their
	// clock rather than wait an hour).
	_, err = tb.Pool.Exec(tb.ctx, `UPDATE `+tb.Schema+`.job SET finalized_at = now() - interval '2 hours' WHERE id = ANY ($1)`,
		[]int64{old, otherQueue})
	require.NoError(t, err)

	n, err := tb.client.PruneDeadJobs(tb.ctx, "")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	_, err = tb.client.GetJob(tb.ctx, old)
	require.ErrorIs(t, err, pgmsg.ErrUnknownJob, "pruned")
	var payloads int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM `+tb.Schema+`.job_payload WHERE id = $1`, old).Scan(&payloads))
	require.Zero(t, payloads, "with its payload")
	for _, id := range []int64{young, otherQueue, alive.ID} {
		_, err := tb.client.GetJob(tb.ctx, id)
		require.NoError(t, err, "job %d kept", id)
	}

	// Through maintenance, after the retention is lowered.
	_, err = tb.client.UpdateQueue(tb.ctx, "pruned", pgmsg.QueueConfig{DeadRetention: time.Microsecond})
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond) // past the new retention: a lower bound, not a race
	_, err = tb.client.MaintainOnce(context.Background(), nil)
	require.NoError(t, err)
	_, err = tb.client.GetJob(tb.ctx, young)
	require.ErrorIs(t, err, pgmsg.ErrUnknownJob, "pruned by the maintenance task")

	q, err = tb.client.UpdateQueue(tb.ctx, "pruned", pgmsg.QueueConfig{DeadRetention: pgmsg.QueueDeadRetentionNone})
	require.NoError(t, err)
	require.Zero(t, q.DeadRetention)
	for _, d := range []time.Duration{-2 * time.Second, 36526 * 24 * time.Hour} {
		_, err = tb.client.UpdateQueue(tb.ctx, "pruned", pgmsg.QueueConfig{DeadRetention: d})
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%s", d)
	}
	_, err = tb.Pool.Exec(tb.ctx, `SELECT `+tb.Schema+`.queue_update('pruned', p_dead_retention => '-1 day')`)
	require.ErrorIs(t, pgmsg.MapError(err), pgmsg.ErrInvalidArgument)
	var pruned int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT `+tb.Schema+`.dead_prune('kept')`).Scan(&pruned))
	require.Zero(t, pruned, "a queue without a retention keeps its dead jobs")
}
