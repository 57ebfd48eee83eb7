package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// seqRun is one run of a sequence job as its handler saw it.
type seqRun struct {
	key     string
	n       int
	overlap bool // another job of its sequence was running when it started
}

// Jobs of a sequence run one at a time and in enqueue order across several
// workers, each with its own client and pool as separate processes would
// be, while jobs without a sequence run beside them.
func TestSequenceOrderAcrossWorkers(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "seq", pgmsg.QueueConfig{})
	const keys, perKey = 8, 15
	// Enqueued in three batches, the keys interleaved, with plain jobs:
	// the first before the workers start, the others while they run (so
	// enqueues race the completions that move sequences on).
	enqueueBatch := func(b int) []*pgmsg.EnqueueResult {
		var ps []pgmsg.EnqueueParams
		for i := b * perKey / 3; i < (b+1)*perKey/3; i++ {
			for k := 0; k < keys; k++ {
				ps = append(ps, pgmsg.EnqueueParams{Payload: []byte(fmt.Sprintf("k%d/%d", k, i)), SequenceKey: fmt.Sprintf("k%d", k)})
			}
			ps = append(ps, pgmsg.EnqueueParams{Payload: []byte(fmt.Sprintf("plain/%d", i))})
		}
		res, err := tb.client.EnqueueMany(tb.ctx, "seq", ps, nil)
		require.NoError(t, err)
		return res
	}
	for i, r := range enqueueBatch(0) {
		switch {
		case i%(keys+1) == keys: // a plain job
			require.Equal(t, pgmsg.JobStateAvailable, r.State)
		case i < keys:
			require.Equal(t, pgmsg.JobStateAvailable, r.State, "a sequence's first job is its head")
		default:
			require.Equal(t, pgmsg.JobStatePending, r.State, "job %d", i)
		}
	}
	total := keys*perKey + perKey
	var mu sync.Mutex
	running := map[string]bool{}
	var runs []seqRun
	done := make(chan struct{})
	handler := func(ctx context.Context, j *pgmsg.Job) error {
		key, nStr, _ := strings.Cut(string(j.Payload), "/")
		var n int
		_, _ = fmt.Sscan(nStr, &n)
		mu.Lock()
		r := seqRun{key: key, n: n, overlap: key != "plain" && running[key]}
		running[key] = key != "plain"
		mu.Unlock()
		time.Sleep(time.Duration(n%3) * time.Millisecond) // let others interleave
		mu.Lock()
		running[key] = false
		runs = append(runs, r)
		if len(runs) == total {
			close(done)
		}
		mu.Unlock()
		return nil
	}
	stop := processWorkers(t, tb, "seq", 3, 4, handler)
	defer stop()
	enqueueBatch(1)
	enqueueBatch(2)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		mu.Lock()
		n := len(runs)
		mu.Unlock()
		t.Fatalf("only %d of %d jobs ran", n, total)
	}
	stop()
	next := map[string]int{}
	for _, r := range runs {
		require.False(t, r.overlap, "two jobs of sequence %s ran at once", r.key)
		if r.key == "plain" {
			continue
		}
		require.Equal(t, next[r.key], r.n, "sequence %s ran out of order", r.key)
		next[r.key]++
	}
	require.Len(t, next, keys)
	seqs, err := tb.client.ListSequences(tb.ctx, "seq", nil)
	require.NoError(t, err)
	require.Empty(t, seqs, "a finished sequence leaves no row")
}

// claimOne claims the one claimable job of queue and checks it is want.
func (tb *testBundle) claimOne(t *testing.T, queue string, want int64) *pgmsg.Job {
	t.Helper()
	jobs, err := tb.client.ClaimJobs(tb.ctx, queue, &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, want, jobs[0].ID)
	return jobs[0]
}

func (tb *testBundle) jobState(t *testing.T, id int64) pgmsg.JobState {
	t.Helper()
	j, err := tb.client.GetJob(tb.ctx, id)
	require.NoError(t, err)
	return j.State
}

// A job that goes dead or is cancelled holds its sequence until
// ResumeSequence (or a requeue of the dead job); with SequenceContinue the
// next job runs at once.
func TestSequenceFailureHoldsOrContinues(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "sf", pgmsg.QueueConfig{})
	enq := func(key string, cont bool) int64 {
		t.Helper()
		r, err := tb.client.Enqueue(tb.ctx, "sf", pgmsg.EnqueueParams{SequenceKey: key, SequenceContinue: cont}, nil)
		require.NoError(t, err)
		return r.ID
	}
	// Dead (retries exhausted): held.
	a1, a2, a3 := enq("a", false), enq("a", false), enq("a", false)
	j := tb.claimOne(t, "sf", a1)
	res, err := tb.client.Fail(tb.ctx, j, errors.New("boom"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateDead, res.State)
	require.Equal(t, pgmsg.JobStatePending, tb.jobState(t, a2))
	jobs, err := tb.client.ClaimJobs(tb.ctx, "sf", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Empty(t, jobs, "a held sequence hands out nothing")
	held, err := tb.client.ListSequences(tb.ctx, "sf", &pgmsg.ListSequencesOpts{HeldOnly: true})
	require.NoError(t, err)
	require.Len(t, held, 1)
	require.Equal(t, "a", held[0].Key)
	require.Equal(t, a1, held[0].HeldJobID)
	require.Equal(t, "dead", held[0].HeldReason)
	require.Equal(t, int64(2), held[0].Pending)
	require.Zero(t, held[0].HeadID)
	// Enqueued while held: waits too.
	a4 := enq("a", false)
	require.Equal(t, pgmsg.JobStatePending, tb.jobState(t, a4))
	ok, err := tb.client.ResumeSequence(tb.ctx, "sf", "a")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = tb.client.ResumeSequence(tb.ctx, "sf", "a")
	require.NoError(t, err)
	require.False(t, ok, "resuming a sequence that is not held does nothing")
	require.Equal(t, pgmsg.JobStateDead, tb.jobState(t, a1), "the failed job stays dead")
	require.NoError(t, tb.client.Complete(tb.ctx, tb.claimOne(t, "sf", a2)))

	// Cancelled while running: held; requeueing a dead holder instead
	// resumes with it.
	j = tb.claimOne(t, "sf", a3)
	cancelled, err := tb.client.CancelJob(tb.ctx, j.ID)
	require.NoError(t, err)
	require.True(t, cancelled)
	held, err = tb.client.ListSequences(tb.ctx, "sf", &pgmsg.ListSequencesOpts{HeldOnly: true})
	require.NoError(t, err)
	require.Len(t, held, 1)
	require.Equal(t, "cancelled", held[0].HeldReason)
	require.Equal(t, a3, held[0].HeldJobID)
	ok, err = tb.client.ResumeSequence(tb.ctx, "sf", "a")
	require.NoError(t, err)
	require.True(t, ok)
	j = tb.claimOne(t, "sf", a4)
	_, err = tb.client.Fail(tb.ctx, j, errors.New("boom"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	a5 := enq("a", false)
	require.Equal(t, pgmsg.JobStatePending, tb.jobState(t, a5))
	n, err := tb.client.RequeueDeadJobs(tb.ctx, "sf", &pgmsg.DeadJobsOpts{IDs: []int64{a4}})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, pgmsg.JobStateAvailable, tb.jobState(t, a4), "the requeued holder runs next")
	require.NoError(t, tb.client.Complete(tb.ctx, tb.claimOne(t, "sf", a4)))
	require.NoError(t, tb.client.Complete(tb.ctx, tb.claimOne(t, "sf", a5)))

	// SequenceContinue: the failure lets the next job run.
	b1, b2 := enq("b", true), enq("b", false)
	_, err = tb.client.Fail(tb.ctx, tb.claimOne(t, "sf", b1), errors.New("boom"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateAvailable, tb.jobState(t, b2))
	c1, c2 := enq("c", true), enq("c", false)
	_, err = tb.client.CancelJob(tb.ctx, c1) // cancelled before it ran
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateAvailable, tb.jobState(t, c2))

	jobs, err = tb.client.ClaimJobs(tb.ctx, "sf", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 2) // b2 and c2
	_, err = tb.client.CompleteMany(tb.ctx, jobs)
	require.NoError(t, err)

	// A retry keeps the sequence: the failed job stays its head.
	d1, d2 := enq("d", false), enq("d", false)
	res, err = tb.client.Fail(tb.ctx, tb.claimOne(t, "sf", d1), errors.New("again"), &pgmsg.FailOpts{RetryIn: time.Hour})
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateRetrying, res.State)
	require.Equal(t, pgmsg.JobStatePending, tb.jobState(t, d2), "a retrying job still heads its sequence")
	seqs, err := tb.client.ListSequences(tb.ctx, "sf", nil)
	require.NoError(t, err)
	require.Len(t, seqs, 1)
	require.Equal(t, "d", seqs[0].Key)
	require.Equal(t, d1, seqs[0].HeadID)
	require.Equal(t, pgmsg.JobStateRetrying, seqs[0].HeadState)
	require.Equal(t, int64(1), seqs[0].Pending)
	require.Zero(t, seqs[0].HeldJobID)
}

// Bad sequence input is refused with ErrInvalidArgument in Go and PM004
// in SQL, and writes nothing.
func TestSequenceBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "sb", pgmsg.QueueConfig{})
	long := strings.Repeat("k", pgmsg.SequenceKeyMaxBytes+1)
	for _, p := range []pgmsg.EnqueueParams{
		{SequenceKey: long},
		{SequenceContinue: true},
	} {
		_, err := tb.client.EnqueueMany(tb.ctx, "sb", []pgmsg.EnqueueParams{{SequenceKey: "ok"}, p}, nil)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	}
	_, err := tb.client.ResumeSequence(tb.ctx, "sb", "")
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.ResumeSequence(tb.ctx, "sb", long)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.ResumeSequence(tb.ctx, "nope", "a")
	require.ErrorIs(t, err, pgmsg.ErrUnknownQueue)
	_, err = tb.client.ListSequences(tb.ctx, "sb", &pgmsg.ListSequencesOpts{Limit: 10001})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)

	s := pgx.Identifier{tb.Schema}.Sanitize()
	for _, q := range []string{
		`SELECT * FROM ` + s + `.enqueue('sb', 'x', p_sequence_key => '')`,
		`SELECT * FROM ` + s + `.enqueue('sb', 'x', p_sequence_key => repeat('k', 201))`,
		`SELECT * FROM ` + s + `.enqueue('sb', 'x', p_sequence_continue => true)`,
		`SELECT * FROM ` + s + `.enqueue_many('sb', ARRAY['x','y']::bytea[], p_sequence_keys => ARRAY['a', ''])`,
		`SELECT * FROM ` + s + `.sequence_resume('sb', '')`,
		`SELECT * FROM ` + s + `.sequence_list('sb', p_limit => 0)`,
	} {
		_, err := tb.Pool.Exec(tb.ctx, q)
		require.Equal(t, "PM004", sqlState(err), q)
	}
	st, err := tb.client.QueueStats(tb.ctx, "sb")
	require.NoError(t, err)
	require.Zero(t, st.Available)
	var rows int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM `+s+`.job_sequence`).Scan(&rows))
	require.Zero(t, rows, "a refused batch leaves no sequence behind")
}

// A worker that completes a sequence's job claims the next one without
// waiting for its poll interval (moving a sequence on sends no NOTIFY):
// with an hour's poll, a five-job sequence still runs through.
func TestSequenceWorkerClaimsNextAfterCompletion(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "sw", pgmsg.QueueConfig{})
	var ps []pgmsg.EnqueueParams
	for i := 0; i < 5; i++ {
		ps = append(ps, pgmsg.EnqueueParams{Payload: []byte{byte('0' + i)}, SequenceKey: "one"})
	}
	_, err := tb.client.EnqueueMany(tb.ctx, "sw", ps, nil)
	require.NoError(t, err)
	done := make(chan string, 5)
	wk, err := tb.client.NewWorker("sw", func(_ context.Context, j *pgmsg.Job) error {
		done <- string(j.Payload)
		return nil
	}, &pgmsg.WorkerOpts{Concurrency: 2, PollInterval: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(tb.ctx)
	defer cancel()
	go func() { _ = wk.Run(ctx) }()
	var got string
	for len(got) < 5 {
		select {
		case p := <-done:
			got += p
		case <-time.After(30 * time.Second):
			t.Fatalf("ran %q, then waited: the next job of the sequence was not claimed", got)
		}
	}
	require.Equal(t, "01234", got)
}

// TestGetSequence: a sequence's head, pending jobs in order, last
// archived job and hold.
func TestGetSequence(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "gs", pgmsg.QueueConfig{MaxAttempts: 1})
	ids := tb.enqueueN(t, "gs", 4, func(int) pgmsg.EnqueueParams { return pgmsg.EnqueueParams{SequenceKey: "a"} })
	require.NoError(t, tb.client.Complete(tb.ctx, tb.claimOne(t, "gs", ids[0])))
	running := tb.claimOne(t, "gs", ids[1])

	s, err := tb.client.GetSequence(tb.ctx, "gs", "a", &pgmsg.GetSequenceOpts{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, ids[1], s.Head.ID)
	require.Equal(t, pgmsg.JobStateRunning, s.Head.State)
	require.NotNil(t, s.Head.AttemptedAt)
	require.Len(t, s.Pending, 1, "the limit")
	require.Equal(t, ids[2], s.Pending[0].ID)
	require.Equal(t, int64(2), s.PendingTotal)
	require.Equal(t, ids[0], s.Last.ID)
	require.Equal(t, pgmsg.JobStateCompleted, s.Last.State)
	require.Nil(t, s.Held)

	_, err = tb.client.Fail(tb.ctx, running, errors.New("boom"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	s, err = tb.client.GetSequence(tb.ctx, "gs", "a", nil)
	require.NoError(t, err)
	require.Nil(t, s.Head, "held")
	require.Equal(t, ids[1], s.Held.ID)
	require.Equal(t, "dead", s.HeldReason)
	require.Equal(t, []int64{ids[2], ids[3]}, []int64{s.Pending[0].ID, s.Pending[1].ID})

	s, err = tb.client.GetSequence(tb.ctx, "gs", "none", nil)
	require.NoError(t, err)
	require.Nil(t, s.Head)
	require.Empty(t, s.Pending)
	require.Nil(t, s.Last)

	_, err = tb.client.GetSequence(tb.ctx, "nope", "a", nil)
	require.ErrorIs(t, err, pgmsg.ErrUnknownQueue)
	_, err = tb.client.GetSequence(tb.ctx, "gs", "", nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.GetSequence(tb.ctx, "gs", "a", &pgmsg.GetSequenceOpts{Limit: 1001})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
}

// job_claim() stamps a job's start after the statements that chose it,
// not at the call's start: a call that waited (here in its rescue of an
// expired lease, on a sequence lock another session holds) while a
// sequence's head completed hands out the next job stamped after that
// completion. Stamped at the call's start, the next job started "before"
// its head finished (the chaos checker's sequence-overlap, seen at load 22).
func TestSequenceClaimStampedAfterWait(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "stamp", pgmsg.QueueConfig{})
	// C: one attempt, claimed with a lease that expires, so that the
	// claim below rescues it (it goes dead) under sequence r's lock.
	c, err := tb.client.Enqueue(tb.ctx, "stamp", pgmsg.EnqueueParams{SequenceKey: "r", MaxAttempts: 1}, nil)
	require.NoError(t, err)
	cj, err := tb.client.ClaimJobs(tb.ctx, "stamp", &pgmsg.ClaimJobsOpts{Lease: time.Millisecond})
	require.NoError(t, err)
	require.Len(t, cj, 1)
	require.Equal(t, c.ID, cj[0].ID)
	// A heads sequence s, B waits for it.
	a, err := tb.client.Enqueue(tb.ctx, "stamp", pgmsg.EnqueueParams{SequenceKey: "s"}, nil)
	require.NoError(t, err)
	b, err := tb.client.Enqueue(tb.ctx, "stamp", pgmsg.EnqueueParams{SequenceKey: "s"}, nil)
	require.NoError(t, err)
	aj := tb.claimOne(t, "stamp", a.ID)
	require.Equal(t, pgmsg.JobStatePending, tb.jobState(t, b.ID))
	time.Sleep(20 * time.Millisecond) // C's lease has expired

	locker, err := tb.Pool.Begin(tb.ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(tb.ctx) }()
	_, err = locker.Exec(tb.ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1 || '.sequence.' || q.queue_id || '.r', 0))
		FROM `+pgx.Identifier{tb.Schema, "queue"}.Sanitize()+` q WHERE q.name = 'stamp'`, tb.Schema)
	require.NoError(t, err)

	claimer, err := tb.Pool.Acquire(tb.ctx)
	require.NoError(t, err)
	defer claimer.Release()
	var pid int
	require.NoError(t, claimer.QueryRow(tb.ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	type claimed struct {
		id int64
		at time.Time
	}
	got := make(chan []claimed, 1)
	errc := make(chan error, 1)
	go func() {
		rows, err := claimer.Query(tb.ctx, `SELECT id, attempted_at FROM `+pgx.Identifier{tb.Schema, "job_claim"}.Sanitize()+`('stamp', 10)`)
		if err != nil {
			errc <- err
			return
		}
		var cs []claimed
		for rows.Next() {
			var c claimed
			if err := rows.Scan(&c.id, &c.at); err != nil {
				errc <- err
				return
			}
			cs = append(cs, c)
		}
		if err := rows.Err(); err != nil {
			errc <- err
			return
		}
		got <- cs
	}()
	// The claim waits for sequence r's lock in its rescue of C.
	require.Eventually(t, func() bool {
		var waiting bool
		err := tb.Pool.QueryRow(tb.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)`, pid).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 5*time.Millisecond, "the claim did not wait for the sequence lock")
	require.NoError(t, tb.client.Complete(tb.ctx, aj))
	var completedBy time.Time
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT clock_timestamp()`).Scan(&completedBy))
	require.NoError(t, locker.Commit(tb.ctx))

	select {
	case err := <-errc:
		t.Fatal(err)
	case cs := <-got:
		require.Len(t, cs, 1, "B, made claimable while the claim waited; C went dead")
		require.Equal(t, b.ID, cs[0].id)
		require.False(t, cs[0].at.Before(completedBy),
			"B stamped as started at %s, before its head's completion had returned (%s)", cs[0].at, completedBy)
	case <-time.After(30 * time.Second):
		t.Fatal("the claim did not return after the lock was released")
	}
	require.Equal(t, pgmsg.JobStateDead, tb.jobState(t, c.ID))
}
