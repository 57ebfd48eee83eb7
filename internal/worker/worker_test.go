package worker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/goleak"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// These tests cover the engine's own decisions through Queue: how the
// completer batches and falls back, which statement each handler outcome
// makes, and what the heartbeat cancels. What the statements do is the
// root's tests' business, against PostgreSQL (worker_test.go ...).

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// call is one call the engine made of a testQueue.
type call struct {
	op    string // "complete", "fail", "snooze"
	ids   []int64
	err   error         // fail: the job's error
	dead  bool          // fail
	delay time.Duration // snooze
}

// testQueue records the engine's calls; complete decides CompleteMany's
// answer, and extend ExtendLeases'.
type testQueue struct {
	mu       sync.Mutex
	calls    []call
	complete func(ids []int64) (notHeld []int64, err error)
	extend   func(ids []int64) []int64
	// claim, when set, answers Claim.
	claim  func(n int) []*pgmsgtype.Job
	called chan struct{}
}

func newTestQueue() *testQueue { return &testQueue{called: make(chan struct{}, 100)} }

func jobIDs(jobs []*pgmsgtype.Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

func (q *testQueue) record(c call) {
	q.mu.Lock()
	q.calls = append(q.calls, c)
	q.mu.Unlock()
	q.called <- struct{}{}
}

func (q *testQueue) Calls() []call {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.calls)
}

func (q *testQueue) Claim(_ context.Context, n int) ([]*pgmsgtype.Job, map[int64]propagation.MapCarrier, error) {
	if q.claim != nil {
		return q.claim(n), nil, nil
	}
	return nil, nil, nil
}

func (q *testQueue) CompleteMany(_ context.Context, jobs []*pgmsgtype.Job, _ []string) ([]int64, error) {
	ids := jobIDs(jobs)
	var notHeld []int64
	var err error
	if q.complete != nil {
		notHeld, err = q.complete(ids)
	}
	q.record(call{op: "complete", ids: ids, err: err})
	return notHeld, err
}

func (q *testQueue) Fail(_ context.Context, job *pgmsgtype.Job, jobErr error, dead bool, _ string) error {
	q.record(call{op: "fail", ids: []int64{job.ID}, err: jobErr, dead: dead})
	return nil
}

func (q *testQueue) Snooze(_ context.Context, job *pgmsgtype.Job, delay time.Duration, _ string) error {
	q.record(call{op: "snooze", ids: []int64{job.ID}, delay: delay})
	return nil
}

func (q *testQueue) ExtendLeases(_ context.Context, ids, _ []int64) ([]int64, error) {
	return q.extend(ids), nil
}

func (q *testQueue) Steps(context.Context, *pgmsgtype.Job) ([]pgmsgtype.JobStep, error) {
	return nil, nil
}

func (q *testQueue) SaveStep(context.Context, *pgmsgtype.Job, string, []byte) error { return nil }

func (q *testQueue) Limited() bool { return false }

func (q *testQueue) StartProcessSpan(ctx context.Context, _ *pgmsgtype.Job, _ propagation.MapCarrier) (context.Context, func(error)) {
	return ctx, func(error) {}
}

// newTestWorker returns a Worker on q whose OnCompleted calls it records.
func newTestWorker(q *testQueue, cfg Config) (*Worker, func() [][]int64) {
	var mu sync.Mutex
	var completed [][]int64
	cfg.OnCompleted = func(jobs []*pgmsgtype.Job) {
		mu.Lock()
		completed = append(completed, jobIDs(jobs))
		mu.Unlock()
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Queue = "q"
	w := New(q, func(context.Context, *pgmsgtype.Job) error { return nil }, cfg)
	return w, func() [][]int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(completed)
	}
}

// runCompleter starts w's completer on a new channel; close the channel
// and wait on the returned one to stop it.
func runCompleter(w *Worker) (chan finished, <-chan struct{}) {
	completions := make(chan finished, 500)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.completer(context.Background(), completions)
	}()
	return completions, done
}

func TestCompleterFlushesWhenAllSettled(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	// A linger of an hour: only the last job settling can end the batch.
	w, completed := newTestWorker(q, Config{CompleteLinger: time.Hour, CompleteBatch: 500})
	w.unfinished = 3
	completions, done := runCompleter(w)
	for _, id := range []int64{3, 1, 2} {
		completions <- finished{job: &pgmsgtype.Job{ID: id}}
		w.settle()
	}
	<-q.called
	close(completions)
	<-done
	require.Equal(t, []call{{op: "complete", ids: []int64{1, 2, 3}}}, q.Calls(), "one statement, ids in order")
	require.Equal(t, [][]int64{{1, 2, 3}}, completed())
}

func TestCompleterCapsBatch(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	w, _ := newTestWorker(q, Config{CompleteLinger: time.Hour, CompleteBatch: 2})
	w.unfinished = 1 // a job still runs: nothing settles the batches
	completions, done := runCompleter(w)
	for id := int64(1); id <= 5; id++ {
		completions <- finished{job: &pgmsgtype.Job{ID: id}}
	}
	<-q.called
	<-q.called
	close(completions) // the last job goes when the channel closes
	<-done
	require.Equal(t, []call{
		{op: "complete", ids: []int64{1, 2}},
		{op: "complete", ids: []int64{3, 4}},
		{op: "complete", ids: []int64{5}},
	}, q.Calls())
}

func TestCompleterLingers(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	w, _ := newTestWorker(q, Config{CompleteLinger: 20 * time.Millisecond, CompleteBatch: 500})
	w.unfinished = 1 // a job still runs: only the linger ends the batch
	completions, done := runCompleter(w)
	start := time.Now()
	completions <- finished{job: &pgmsgtype.Job{ID: 1}}
	<-q.called
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	close(completions)
	<-done
	require.Equal(t, []call{{op: "complete", ids: []int64{1}}}, q.Calls())
}

func TestFlushRefusedResult(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	refused := errs.New(errs.InvalidArgument, "result too large")
	q.complete = func(ids []int64) ([]int64, error) {
		if slices.Contains(ids, 2) {
			return nil, refused
		}
		return nil, nil
	}
	w, completed := newTestWorker(q, Config{CompleteBatch: 500})
	w.flush(context.Background(), []finished{{job: &pgmsgtype.Job{ID: 3}}, {job: &pgmsgtype.Job{ID: 2}}, {job: &pgmsgtype.Job{ID: 1}}})
	calls := q.Calls()
	require.Len(t, calls, 5)
	require.Equal(t, []call{
		{op: "complete", ids: []int64{1, 2, 3}, err: refused},
		{op: "complete", ids: []int64{1}},
		{op: "complete", ids: []int64{2}, err: refused},
	}, calls[:3], "the batch, then job by job")
	require.Equal(t, "fail", calls[3].op)
	require.Equal(t, []int64{2}, calls[3].ids)
	require.True(t, calls[3].dead, "a result that cannot be stored sends the job to the dead-letter state")
	require.ErrorIs(t, calls[3].err, errs.InvalidArgument)
	require.ErrorContains(t, calls[3].err, "result not stored")
	require.Equal(t, call{op: "complete", ids: []int64{3}}, calls[4])
	require.Equal(t, [][]int64{{1}, {3}}, completed())
}

func TestFlushNotHeld(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	q.complete = func([]int64) ([]int64, error) { return []int64{2}, nil }
	w, completed := newTestWorker(q, Config{CompleteBatch: 500})
	w.flush(context.Background(), []finished{{job: &pgmsgtype.Job{ID: 1}}, {job: &pgmsgtype.Job{ID: 2}}, {job: &pgmsgtype.Job{ID: 3}}})
	require.Equal(t, [][]int64{{1, 3}}, completed(), "a job that lost its lease is not reported completed")
	select {
	case <-w.freed:
	default:
		t.Fatal("a committed completion signals freed slots")
	}
}

func TestFlushRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		failures  int // failed attempts before success
		err       error
		calls     int
		completed bool
	}{
		{"retryable then ok", 2, errs.New(errs.Backpressure, "busy"), 3, true},
		{"retryable five times", 99, errs.New(errs.Backpressure, "busy"), 5, false},
		{"not retryable", 99, errs.New(errs.UnknownJob, "gone"), 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := newTestQueue()
			n := 0
			q.complete = func([]int64) ([]int64, error) {
				if n++; n <= tc.failures {
					return nil, tc.err
				}
				return nil, nil
			}
			w, completed := newTestWorker(q, Config{CompleteBatch: 500})
			w.flush(context.Background(), []finished{{job: &pgmsgtype.Job{ID: 1}}})
			require.Len(t, q.Calls(), tc.calls)
			if tc.completed {
				require.Equal(t, [][]int64{{1}}, completed())
			} else {
				require.Empty(t, completed())
			}
		})
	}
}

func TestFinishOutcomes(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		err   error // the handler's
		cause error // its context's
		want  *call // nil: no statement
		done  bool  // handed to the completer
	}{
		{name: "nil completes", done: true},
		{name: "error fails", err: boom, want: &call{op: "fail", err: boom}},
		{name: "panic fails", err: errors.New("panic: x"), want: &call{op: "fail", err: errors.New("panic: x")}},
		{name: "snooze", err: Snooze(5 * time.Second), want: &call{op: "snooze", delay: 5 * time.Second}},
		{name: "wrapped snooze", err: errors.Join(boom, Snooze(time.Second)), want: &call{op: "snooze", delay: time.Second}},
		{name: "negative snooze releases", err: Snooze(-time.Second), want: &call{op: "snooze"}},
		{name: "discard", err: Discard(boom), want: &call{op: "fail", err: boom, dead: true}},
		{name: "discard nil", err: Discard(nil), want: &call{op: "fail", err: errors.New("discarded"), dead: true}},
		{name: "lost lease writes nothing", err: boom, cause: errs.New(errs.JobNotHeld, "lost")},
		{name: "shutdown releases", err: context.Canceled, cause: errShutdown, want: &call{op: "snooze"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := newTestQueue()
			w, _ := newTestWorker(q, Config{})
			completions := make(chan finished, 1)
			w.finish(context.Background(), &pgmsgtype.Job{ID: 7}, "", tc.err, tc.cause, completions)
			require.Equal(t, tc.done, len(completions) == 1)
			if tc.want == nil {
				require.Empty(t, q.Calls())
				return
			}
			want := *tc.want
			want.ids = []int64{7}
			require.Equal(t, []call{want}, q.Calls())
		})
	}
}

func TestFinishTimeout(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	w, _ := newTestWorker(q, Config{})
	cause := errs.New(errs.JobTimeout, "job 7 ran longer than its timeout of 1s")
	w.finish(context.Background(), &pgmsgtype.Job{ID: 7}, "", context.Canceled, cause, nil)
	calls := q.Calls()
	require.Len(t, calls, 1)
	require.Equal(t, "fail", calls[0].op)
	require.False(t, calls[0].dead, "a timeout is retried like any failure")
	require.ErrorIs(t, calls[0].err, errs.JobTimeout)
	require.ErrorContains(t, calls[0].err, "the handler returned: context canceled")
}

func TestHeartbeatCancelsLostJobs(t *testing.T) {
	t.Parallel()
	q := newTestQueue()
	extended := make(chan []int64, 10)
	q.extend = func(ids []int64) []int64 {
		slices.Sort(ids)
		select {
		case extended <- slices.Clone(ids):
		default: // the test reads the first beats only
		}
		return []int64{1} // job 2 lost its lease
	}
	w, _ := newTestWorker(q, Config{})
	ctxs := map[int64]context.Context{}
	for id := int64(1); id <= 3; id++ {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		ctxs[id] = ctx
		f := &inflightJob{job: &pgmsgtype.Job{ID: id, LeaseToken: 10 + id}, cancel: cancel}
		if id == 3 {
			f.deadline = time.Now().Add(-time.Second) // timed out: no longer extended
		}
		w.inflight[id] = f
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.heartbeat(context.Background(), 3*time.Millisecond, stop)
	}()
	require.Equal(t, []int64{1, 2}, <-extended)
	<-ctxs[2].Done()
	close(stop)
	<-done
	require.ErrorIs(t, context.Cause(ctxs[2]), errs.JobNotHeld)
	require.NoError(t, ctxs[1].Err())
	require.NoError(t, ctxs[3].Err())
}

// A completion that commits while a claim is in flight may have made jobs
// claimable that the claim read too early (a workflow's dependents, a
// sequence's next job: nothing notifies for them): the claim's short
// answer must not leave the worker idle until the poll interval.
func TestCompletionDuringClaimClaimsAgain(t *testing.T) {
	q := newTestQueue()
	claims := make(chan chan []*pgmsgtype.Job, 10)
	q.claim = func(int) []*pgmsgtype.Job {
		answer := make(chan []*pgmsgtype.Job)
		claims <- answer
		return <-answer
	}
	w, _ := newTestWorker(q, Config{Concurrency: 4, ClaimBatch: 4, ClaimConcurrency: 1, PollInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.fetch(ctx, context.Background(), nil, make(chan finished, 4)) }()

	first := <-claims
	w.completed <- struct{}{} // committed while the first claim is in flight
	first <- nil              // which found nothing
	select {
	case second := <-claims:
		second <- nil
	case <-time.After(time.Minute):
		t.Fatal("no claim after a completion committed during a short claim: the worker waits for the poll interval (an hour)")
	}
	cancel()
	// A third claim may be in flight as ctx ends; answer it.
	go func() {
		for a := range claims {
			a <- nil
		}
	}()
	require.NoError(t, <-done)
	close(claims)
}
