package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// runWorker starts a worker of tb's client (startWorker).
func (tb *testBundle) runWorker(t *testing.T, queue string, h pgmsg.JobHandler, opts *pgmsg.WorkerOpts) func() error {
	t.Helper()
	return startWorker(t, tb.ctx, tb.client, queue, h, opts)
}

// startWorker starts a worker of c on queue until ctx ends, and returns a
// stop function that cancels it and returns Run's error (also called when
// the test ends).
func startWorker(t *testing.T, ctx context.Context, c *pgmsg.Client, queue string, h pgmsg.JobHandler, opts *pgmsg.WorkerOpts) func() error {
	t.Helper()
	w, err := c.NewWorker(queue, h, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWorkerRaceCompletesEachJobOnce runs several worker pools over one
// backlog: every job is handled once, completed once and archived once.
func TestWorkerRaceCompletesEachJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	const jobs = 3000
	ids := b.enqueueN(t, "q", jobs, nil)
	var handled sync.Map
	var total atomic.Int64
	h := func(ctx context.Context, j *pgmsg.Job) error {
		n, _ := handled.LoadOrStore(j.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		total.Add(1)
		return nil
	}
	var stops []func() error
	for i := range 4 {
		stops = append(stops, b.runWorker(t, "q", h, &pgmsg.WorkerOpts{Concurrency: 4 + 4*i, Name: fmt.Sprint("w", i)}))
	}
	waitFor(t, 30*time.Second, "all jobs archived", func() bool { return b.stats(t, "q").Archived == jobs })
	for _, stop := range stops {
		require.ErrorIs(t, stop(), context.Canceled)
	}
	require.Equal(t, int64(jobs), total.Load())
	for _, id := range ids {
		n, ok := handled.Load(id)
		require.True(t, ok, "job %d never handled", id)
		require.Equal(t, int32(1), n.(*atomic.Int32).Load(), "job %d", id)
	}
	s := b.stats(t, "q")
	require.Equal(t, int64(jobs), s.Archived)
	require.Zero(t, s.Available+s.Running+s.Retrying+s.Dead+s.Scheduled)
}

// TestWorkerRescuesJobOfKilledWorker: a worker claims a job and dies without
// a word; once the lease expires another worker completes it.
func TestWorkerRescuesJobOfKilledWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{Lease: time.Second})
	res, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{Payload: []byte("x")}, nil)
	require.NoError(t, err)
	// The "killed" worker: it claimed, and will never heartbeat or finish.
	dead, err := b.client.ClaimJobs(b.ctx, "q", &pgmsg.ClaimJobsOpts{Worker: "killed"})
	require.NoError(t, err)
	require.Len(t, dead, 1)

	got := make(chan *pgmsg.Job, 1)
	stop := b.runWorker(t, "q", func(ctx context.Context, j *pgmsg.Job) error {
		got <- j
		return nil
	}, &pgmsg.WorkerOpts{Concurrency: 2, PollInterval: 50 * time.Millisecond, Name: "rescuer"})
	select {
	case j := <-got:
		require.Equal(t, res.ID, j.ID)
		require.Equal(t, 2, j.Attempt)
		require.Len(t, j.Errors, 1)
		require.Contains(t, j.Errors[0].Error, "killed")
	case <-time.After(10 * time.Second):
		t.Fatal("job not rescued")
	}
	waitFor(t, 10*time.Second, "job archived", func() bool { return b.stats(t, "q").Archived == 1 })
	require.ErrorIs(t, stop(), context.Canceled)
	requireCode(t, b.client.Complete(b.ctx, dead[0]), pgmsg.ErrJobNotHeld, "PM106")
}

// TestWorkerRetriesThenDeadLetters: a handler that always fails gets
// max attempts tries, then the job is dead with every error recorded.
func TestWorkerRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{MaxAttempts: 3, RetryBackoff: 20 * time.Millisecond})
	res, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	var calls atomic.Int32
	b.runWorker(t, "q", func(ctx context.Context, j *pgmsg.Job) error {
		calls.Add(1)
		if j.Attempt == 2 {
			panic("attempt two panics")
		}
		return fmt.Errorf("attempt %d failed", j.Attempt)
	}, &pgmsg.WorkerOpts{PollInterval: 20 * time.Millisecond})
	waitFor(t, 10*time.Second, "job dead", func() bool { return b.stats(t, "q").Dead == 1 })
	require.Equal(t, int32(3), calls.Load())
	j, err := b.client.GetJob(b.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateDead, j.State)
	require.Len(t, j.Errors, 3)
	require.Equal(t, "attempt 1 failed", j.Errors[0].Error)
	require.Contains(t, j.Errors[1].Error, "panic: attempt two panics")
	require.Equal(t, "attempt 3 failed", j.Errors[2].Error)
}

func TestWorkerSnoozeAndDiscard(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	snoozeRes, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{Kind: "snooze"}, nil)
	require.NoError(t, err)
	discardRes, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{Kind: "discard"}, nil)
	require.NoError(t, err)
	var snoozed atomic.Int32
	b.runWorker(t, "q", func(ctx context.Context, j *pgmsg.Job) error {
		switch j.Kind {
		case "snooze":
			if snoozed.Add(1) == 1 {
				return pgmsg.JobSnooze(50 * time.Millisecond)
			}
			return nil
		default:
			return pgmsg.JobDiscard(errors.New("unfixable"))
		}
	}, &pgmsg.WorkerOpts{PollInterval: 20 * time.Millisecond})
	waitFor(t, 10*time.Second, "snoozed job archived", func() bool {
		j, err := b.client.GetJob(b.ctx, snoozeRes.ID)
		require.NoError(t, err)
		return j.State == pgmsg.JobStateCompleted
	})
	j, err := b.client.GetJob(b.ctx, snoozeRes.ID)
	require.NoError(t, err)
	require.Equal(t, 1, j.Attempt, "the snoozed attempt does not count")
	waitFor(t, 10*time.Second, "discarded job dead", func() bool {
		j, err = b.client.GetJob(b.ctx, discardRes.ID)
		require.NoError(t, err)
		return j.State == pgmsg.JobStateDead
	})
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "unfixable", j.Errors[0].Error)
}

// TestWorkerExtendsLeaseOfLongJob: a handler that runs for several leases
// keeps its job; nobody else can claim it meanwhile.
func TestWorkerExtendsLeaseOfLongJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{Lease: time.Second})
	res, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	started := make(chan struct{})
	release := make(chan struct{})
	b.runWorker(t, "q", func(ctx context.Context, j *pgmsg.Job) error {
		close(started)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, &pgmsg.WorkerOpts{Concurrency: 1})
	<-started
	// For two and a half leases, a competing claimer gets nothing.
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		jobs, err := b.client.ClaimJobs(b.ctx, "q", nil)
		require.NoError(t, err)
		require.Empty(t, jobs)
		time.Sleep(100 * time.Millisecond)
	}
	close(release)
	waitFor(t, 10*time.Second, "job archived", func() bool { return b.stats(t, "q").Archived == 1 })
	j, err := b.client.GetJob(b.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, 1, j.Attempt)
	require.Empty(t, j.Errors)
}

// TestWorkerCancelsHandlerOfLostJob: when a running job is cancelled, the
// heartbeat finds it lost and cancels the handler's context.
func TestWorkerCancelsHandlerOfLostJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{Lease: 300 * time.Millisecond})
	res, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	started := make(chan struct{})
	cause := make(chan error, 1)
	b.runWorker(t, "q", func(ctx context.Context, j *pgmsg.Job) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}, &pgmsg.WorkerOpts{Concurrency: 1})
	<-started
	_, err = b.client.CancelJob(b.ctx, res.ID)
	require.NoError(t, err)
	select {
	case err := <-cause:
		require.ErrorIs(t, err, pgmsg.ErrJobNotHeld)
	case <-time.After(5 * time.Second):
		t.Fatal("handler not cancelled")
	}
	j, err := b.client.GetJob(b.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateCancelled, j.State)
}

// TestWorkerGracefulShutdownLosesNothing stops workers in the middle of a
// backlog: every job claimed was finished and completed; nothing is left
// running; a second worker then completes the rest, each job once.
func TestWorkerGracefulShutdownLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	const jobs = 300
	ids := b.enqueueN(t, "q", jobs, nil)
	var mu sync.Mutex
	handled := map[int64]int{}
	h := func(ctx context.Context, j *pgmsg.Job) error {
		time.Sleep(10 * time.Millisecond) // simulated work
		mu.Lock()
		handled[j.ID]++
		mu.Unlock()
		return nil
	}
	stop := b.runWorker(t, "q", h, &pgmsg.WorkerOpts{Concurrency: 8})
	waitFor(t, 10*time.Second, "some jobs done", func() bool { return b.stats(t, "q").Archived >= 50 })
	require.ErrorIs(t, stop(), context.Canceled)
	s := b.stats(t, "q")
	require.Less(t, s.Archived, int64(jobs), "stopped mid-backlog")
	require.Zero(t, s.Running, "graceful shutdown leaves nothing running")
	mu.Lock()
	require.Equal(t, int64(len(handled)), s.Archived, "every handled job is archived")
	mu.Unlock()
	require.Equal(t, int64(jobs), s.Archived+s.Available)

	stop2 := b.runWorker(t, "q", h, &pgmsg.WorkerOpts{Concurrency: 8})
	waitFor(t, 10*time.Second, "all jobs done", func() bool { return b.stats(t, "q").Archived == jobs })
	require.ErrorIs(t, stop2(), context.Canceled)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, handled[id], "job %d", id)
	}
}

// TestWorkerShutdownTimeoutReleasesJobs: handlers still running after the
// grace period are cancelled and their jobs released, attempt not counted.
func TestWorkerShutdownTimeoutReleasesJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	ids := b.enqueueN(t, "q", 3, nil)
	var started sync.WaitGroup
	started.Add(3)
	stop := b.runWorker(t, "q", func(ctx context.Context, j *pgmsg.Job) error {
		started.Done()
		<-ctx.Done()
		return ctx.Err()
	}, &pgmsg.WorkerOpts{Concurrency: 3, ShutdownTimeout: 100 * time.Millisecond})
	started.Wait()
	require.Equal(t, int64(3), b.stats(t, "q").Running)
	require.ErrorIs(t, stop(), context.Canceled)
	s := b.stats(t, "q")
	require.Equal(t, int64(3), s.Available)
	require.Zero(t, s.Running+s.Retrying)
	for _, id := range ids {
		j, err := b.client.GetJob(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, pgmsg.JobStateAvailable, j.State)
		require.Zero(t, j.Attempt)
	}
}

// TestWorkerWakesOnNotify: an idle worker with a long poll interval picks up
// a new job at once, woken by LISTEN/NOTIFY.
func TestWorkerWakesOnNotify(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	got := make(chan time.Time, 4)
	b.runWorker(t, "q", func(ctx context.Context, j *pgmsg.Job) error {
		got <- time.Now()
		return nil
	}, &pgmsg.WorkerOpts{PollInterval: time.Minute})
	// The listener may not be up yet: enqueue until one is handled, then
	// once more while the worker idles.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{}, nil)
		require.NoError(t, err)
		select {
		case <-got:
		case <-time.After(500 * time.Millisecond):
			require.True(t, time.Now().Before(deadline), "worker never woke")
			continue
		}
		break
	}
	waitFor(t, 10*time.Second, "idle", func() bool { return b.stats(t, "q").Available == 0 })
	sent := time.Now()
	_, err := b.client.Enqueue(b.ctx, "q", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	select {
	case at := <-got:
		require.Less(t, at.Sub(sent), 5*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("notification did not wake the worker")
	}
}

func TestWorkerBadOptions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.client.NewWorker("q", nil, nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = b.client.NewWorker("bad name", func(context.Context, *pgmsg.Job) error { return nil }, nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidName)
	_, err = b.client.NewWorker("q", func(context.Context, *pgmsg.Job) error { return nil }, &pgmsg.WorkerOpts{Concurrency: -1})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
}

// OnCompleted reports each job once, after its completion committed (the
// job is archived when the callback sees it), and never a job whose
// handler failed. Several claims are in flight (ClaimConcurrency 3), and
// the handlers never exceed Concurrency.
func TestWorkerOnCompletedAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	const jobs = 400
	ids := b.enqueueN(t, "q", jobs, func(i int) pgmsg.EnqueueParams {
		return pgmsg.EnqueueParams{Payload: []byte{byte(i % 7)}}
	})
	var mu sync.Mutex
	reported := map[int64]int{}
	var notArchived []int64
	var running, peak atomic.Int64
	stop := b.runWorker(t, "q", func(_ context.Context, j *pgmsg.Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if j.Payload[0] == 0 {
			return pgmsg.JobDiscard(errors.New("payload 0 fails"))
		}
		return nil
	}, &pgmsg.WorkerOpts{Concurrency: 8, ClaimBatch: 4, ClaimConcurrency: 3, OnCompleted: func(done []*pgmsg.Job) {
		for _, j := range done {
			got, err := b.client.GetJob(context.Background(), j.ID)
			mu.Lock()
			if err != nil || got.State != pgmsg.JobStateCompleted {
				notArchived = append(notArchived, j.ID)
			}
			reported[j.ID]++
			mu.Unlock()
		}
	}})
	failing := 0
	for i := range ids {
		if i%7 == 0 {
			failing++
		}
	}
	waitFor(t, time.Minute, "every passing job reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reported) == jobs-failing
	})
	require.ErrorIs(t, stop(), context.Canceled)
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, notArchived, "OnCompleted saw jobs not yet archived")
	for i, id := range ids {
		if i%7 == 0 {
			require.Zero(t, reported[id], "failed job %d reported completed", id)
			continue
		}
		require.Equal(t, 1, reported[id], "job %d", id)
	}
	require.LessOrEqual(t, peak.Load(), int64(8), "handlers beyond Concurrency")
}

// CompleteLinger is an upper bound: once no started job is left running,
// the completion goes out at once. With an hour of linger, a lone job is
// still archived right after its handler returns (the old completer held
// it for the whole linger).
func TestWorkerCompletesAtOnceWhenNothingElseRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	done := make(chan int64, 10)
	b.runWorker(t, "q", func(context.Context, *pgmsg.Job) error { return nil },
		&pgmsg.WorkerOpts{Concurrency: 4, CompleteLinger: time.Hour, OnCompleted: func(jobs []*pgmsg.Job) {
			for _, j := range jobs {
				done <- j.ID
			}
		}})
	for i := 0; i < 3; i++ {
		id := b.enqueueN(t, "q", 1, nil)[0]
		select {
		case got := <-done:
			require.Equal(t, id, got)
		case <-time.After(30 * time.Second):
			t.Fatalf("job %d was not completed while the worker lingered", id)
		}
		got, err := b.client.GetJob(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, pgmsg.JobStateCompleted, got.State)
	}
}

// A handler that runs past WorkerOpts.JobTimeout has its context
// cancelled with ErrJobTimeout as the cause and its attempt failed as a
// timeout; one that finishes in time completes; one that ignores the
// cancellation no longer has its lease extended.
func TestWorkerJobTimeout(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "slow", pgmsg.QueueConfig{Lease: time.Second, RetryBackoff: time.Hour})
	ids := tb.enqueueN(t, "slow", 3, func(i int) pgmsg.EnqueueParams {
		return pgmsg.EnqueueParams{Payload: []byte{byte('a' + i)}}
	})
	hung := make(chan struct{})
	causes := make(chan error, 3)
	stop := tb.runWorker(t, "slow", func(ctx context.Context, j *pgmsg.Job) error {
		switch j.Payload[0] {
		case 'a': // quick
			return nil
		case 'b': // waits for its context
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		default: // ignores its context for three leases
			select {
			case <-hung:
			case <-time.After(3 * time.Second):
			}
			return errors.New("too late")
		}
	}, &pgmsg.WorkerOpts{Concurrency: 3, JobTimeout: 200 * time.Millisecond})
	defer func() { require.ErrorIs(t, stop(), context.Canceled) }()
	defer close(hung)

	require.ErrorIs(t, <-causes, pgmsg.ErrJobTimeout)
	waitFor(t, 30*time.Second, "the quick job completed, the waiting one failed", func() bool {
		a, err := tb.client.GetJob(tb.ctx, ids[0])
		require.NoError(t, err)
		b, err := tb.client.GetJob(tb.ctx, ids[1])
		require.NoError(t, err)
		return a.State == pgmsg.JobStateCompleted && b.State == pgmsg.JobStateRetrying
	})
	b, err := tb.client.GetJob(tb.ctx, ids[1])
	require.NoError(t, err)
	require.Len(t, b.Errors, 1)
	require.Contains(t, b.Errors[0].Error, "ran longer than its timeout of 200ms")

	// The hung job's lease (1 s) is not extended past the timeout.
	waitFor(t, 30*time.Second, "the hung job's lease ran out", func() bool {
		c, err := tb.client.GetJob(tb.ctx, ids[2])
		require.NoError(t, err)
		return c.State != pgmsg.JobStateRunning || c.LeaseExpiresAt.Before(time.Now())
	})
	_, err = tb.client.NewWorker("slow", func(context.Context, *pgmsg.Job) error { return nil }, &pgmsg.WorkerOpts{JobTimeout: -1})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
}

// A queue's JobTimeout and a job's own Timeout (which wins) bound the
// handler as WorkerOpts.JobTimeout does; claims, GetJob and the SQL API
// carry them, and bad values are refused on every path.
func TestJobTimeoutPerQueueAndJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	q := tb.queue(t, "tq", pgmsg.QueueConfig{JobTimeout: 300 * time.Millisecond, RetryBackoff: time.Hour})
	require.Equal(t, 300*time.Millisecond, q.JobTimeout)
	ids := tb.enqueueN(t, "tq", 3, func(i int) pgmsg.EnqueueParams {
		p := pgmsg.EnqueueParams{Payload: []byte{byte('a' + i)}}
		switch i {
		case 1:
			p.Timeout = time.Hour // its own, longer than the queue's
		case 2:
			p.Timeout = 100 * time.Millisecond
		}
		return p
	})
	for i, want := range []time.Duration{300 * time.Millisecond, time.Hour, 100 * time.Millisecond} {
		j, err := tb.client.GetJob(tb.ctx, ids[i])
		require.NoError(t, err)
		require.Equal(t, want, j.Timeout, "job %d", i)
	}

	timeouts := make(chan time.Duration, 3)
	causes := make(chan error, 2)
	stop := tb.runWorker(t, "tq", func(ctx context.Context, j *pgmsg.Job) error {
		timeouts <- j.Timeout
		if j.Payload[0] == 'b' {
			return nil
		}
		<-ctx.Done() // the queue's timeout (a), its own (c)
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, &pgmsg.WorkerOpts{Concurrency: 3})
	defer func() { require.ErrorIs(t, stop(), context.Canceled) }()
	require.ErrorIs(t, <-causes, pgmsg.ErrJobTimeout)
	require.ErrorIs(t, <-causes, pgmsg.ErrJobTimeout)
	got := []time.Duration{<-timeouts, <-timeouts, <-timeouts}
	require.ElementsMatch(t, []time.Duration{300 * time.Millisecond, time.Hour, 100 * time.Millisecond}, got, "claims carry each job's timeout")
	waitFor(t, 30*time.Second, "a and c failed as timeouts, b completed", func() bool {
		var states []pgmsg.JobState
		for _, id := range ids {
			j, err := tb.client.GetJob(tb.ctx, id)
			require.NoError(t, err)
			states = append(states, j.State)
		}
		return states[0] == pgmsg.JobStateRetrying && states[1] == pgmsg.JobStateCompleted && states[2] == pgmsg.JobStateRetrying
	})
	c, err := tb.client.GetJob(tb.ctx, ids[2])
	require.NoError(t, err)
	require.Contains(t, c.Errors[0].Error, "ran longer than its timeout of 100ms")

	// Removed from the queue: jobs without their own have none.
	q, err = tb.client.UpdateQueue(tb.ctx, "tq", pgmsg.QueueConfig{JobTimeout: pgmsg.QueueJobTimeoutNone})
	require.NoError(t, err)
	require.Zero(t, q.JobTimeout)
	a, err := tb.client.GetJob(tb.ctx, ids[0])
	require.NoError(t, err)
	require.Zero(t, a.Timeout)

	for _, d := range []time.Duration{-2 * time.Millisecond, 367 * 24 * time.Hour} {
		_, err = tb.client.UpdateQueue(tb.ctx, "tq", pgmsg.QueueConfig{JobTimeout: d})
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%s", d)
		_, err = tb.client.Enqueue(tb.ctx, "tq", pgmsg.EnqueueParams{Timeout: d}, nil)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%s", d)
	}
	// The SQL API (a queue without a worker): enqueue's p_timeout,
	// queue_create's and queue_update's p_job_timeout.
	var timeout time.Duration
	_, err = tb.Pool.Exec(tb.ctx, `SELECT `+tb.Schema+`.queue_create('sq', p_job_timeout => '1 minute')`)
	require.NoError(t, err)
	var id int64
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT id FROM `+tb.Schema+`.enqueue('sq', 'x', p_timeout => '2 minutes')`).Scan(&id))
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT timeout FROM `+tb.Schema+`.job_get($1)`, id).Scan(&timeout))
	require.Equal(t, 2*time.Minute, timeout)
	for _, bad := range []string{
		`SELECT * FROM ` + tb.Schema + `.enqueue('sq', 'x', p_timeout => '0')`,
		`SELECT * FROM ` + tb.Schema + `.enqueue('sq', 'x', p_timeout => '400 days')`,
		`SELECT * FROM ` + tb.Schema + `.queue_update('sq', p_job_timeout => '-1 second')`,
	} {
		_, err := tb.Pool.Exec(tb.ctx, bad)
		require.ErrorIs(t, pgmsg.MapError(err), pgmsg.ErrInvalidArgument, bad)
	}
	res, err := tb.client.Enqueue(tb.ctx, "sq", pgmsg.EnqueueParams{UniqueKey: "u1", Timeout: 3 * time.Second}, nil)
	require.NoError(t, err)
	keyed, err := tb.client.GetJob(tb.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, keyed.Timeout, "a job with a unique key keeps its timeout")
	var claimed time.Duration
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT timeout FROM `+tb.Schema+`.job_claim('sq')`).Scan(&claimed))
	require.Equal(t, 2*time.Minute, claimed, "job_claim hands out the job's own timeout")
}
