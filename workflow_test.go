package pgmsg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// wfState returns job id's state as GetJob sees it.
func wfState(t *testing.T, tb *testBundle, id int64) pgmsg.JobState {
	t.Helper()
	j, err := tb.client.GetJob(tb.ctx, id)
	require.NoError(t, err)
	return j.State
}

// wfCount counts the jobs of queue, live and archived.
func wfCount(t *testing.T, tb *testBundle, queue string) int {
	t.Helper()
	var n int
	err := tb.Pool.QueryRow(tb.ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s.job j JOIN %[1]s.queue q USING (queue_id) WHERE q.name = $1)
		+ (SELECT count(*) FROM %[1]s.job_archive a JOIN %[1]s.queue q USING (queue_id) WHERE q.name = $1)
		+ (SELECT count(*) FROM %[1]s.job_dependency)`, pgx.Identifier{tb.Schema}.Sanitize()), queue).Scan(&n)
	require.NoError(t, err)
	return n
}

// claimOne claims the one job of queue that must be claimable.
func claimOne(t *testing.T, tb *testBundle, queue string) *pgmsg.Job {
	t.Helper()
	js, err := tb.client.ClaimJobs(tb.ctx, queue, nil)
	require.NoError(t, err)
	require.Len(t, js, 1)
	return js[0]
}

// A workflow with fan-out and fan-in runs on several workers (one of them
// as the schema's worker role), and no job is claimed before every one of
// its dependencies completed: on the database's clock, each job's claim
// (attempted_at) comes after every dependency's completion (finished_at).
func TestWorkflowDependentsWaitAcrossWorkers(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "wf", pgmsg.QueueConfig{})
	// Three workflows: root -> 12 fan-out -> 3 fan-in of 4 each -> sink.
	const flows, fan = 3, 12
	total := 0
	for f := 0; f < flows; f++ {
		w := pgmsg.NewWorkflow()
		// The sink first: it names jobs added after it.
		w.Add("sink", pgmsg.EnqueueParams{Payload: []byte("sink")}, "in0", "in1", "in2")
		w.Add("root", pgmsg.EnqueueParams{Payload: []byte("root")})
		for i := 0; i < fan; i++ {
			w.Add(fmt.Sprintf("out%d", i), pgmsg.EnqueueParams{Payload: []byte("out")}, "root")
		}
		for k := 0; k < 3; k++ {
			var deps []string
			for i := k * 4; i < (k+1)*4; i++ {
				deps = append(deps, fmt.Sprintf("out%d", i))
			}
			w.Add(fmt.Sprintf("in%d", k), pgmsg.EnqueueParams{Payload: []byte("in")}, deps...)
		}
		res, err := tb.client.EnqueueWorkflow(tb.ctx, "wf", w, nil)
		require.NoError(t, err)
		require.Equal(t, pgmsg.JobStateAvailable, res["root"].State)
		require.Equal(t, pgmsg.JobStatePending, res["sink"].State)
		require.Equal(t, pgmsg.JobStatePending, res["out3"].State)
		total += len(res)
	}
	var mu sync.Mutex
	ran := 0
	done := make(chan struct{})
	handler := func(ctx context.Context, j *pgmsg.Job) error {
		time.Sleep(time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if ran++; ran == total {
			close(done)
		}
		return nil
	}
	stop := processWorkers(t, tb, "wf", 3, 4, handler)
	defer stop()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("only %d of %d jobs ran", ran, total)
	}
	stop()
	// Every job completed once, claimed after each dependency's completion.
	var completed, early, edges int
	err := tb.Pool.QueryRow(tb.ctx, fmt.Sprintf(`
		SELECT (SELECT count(*) FROM %[1]s.job_archive WHERE status = 'completed' AND attempt = 1),
		       (SELECT count(*) FROM %[1]s.job_archive a CROSS JOIN LATERAL unnest(a.depends_on) d(id)
		          JOIN %[1]s.job_archive b ON b.id = d.id
		         WHERE a.attempted_at < b.finished_at),
		       (SELECT count(*) FROM %[1]s.job_archive a CROSS JOIN LATERAL unnest(a.depends_on) d(id))`,
		pgx.Identifier{tb.Schema}.Sanitize())).Scan(&completed, &early, &edges)
	require.NoError(t, err)
	require.Equal(t, total, completed)
	require.Equal(t, flows*(fan+fan+3), edges, "every edge is kept in the archive")
	require.Zero(t, early, "a job was claimed before a dependency completed")
}

// The job that waits on a dependency becomes available in the transaction
// that completes its last dependency: visible inside it before the
// commit, not outside; a job with two dependencies still waits after the
// first.
func TestWorkflowReleaseInCompletingTransaction(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "wf", pgmsg.QueueConfig{})
	a, err := tb.client.Enqueue(tb.ctx, "wf", pgmsg.EnqueueParams{Payload: []byte("a")}, nil)
	require.NoError(t, err)
	b, err := tb.client.Enqueue(tb.ctx, "wf", pgmsg.EnqueueParams{Payload: []byte("b")}, nil)
	require.NoError(t, err)
	c, err := tb.client.Enqueue(tb.ctx, "wf", pgmsg.EnqueueParams{Payload: []byte("c"), DependsOn: []int64{a.ID, b.ID}}, nil)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStatePending, c.State)
	j, err := tb.client.GetJob(tb.ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, []int64{a.ID, b.ID}, j.DependsOn)
	require.Equal(t, 2, j.DepsWaiting)
	require.Equal(t, a.ID, j.WorkflowID)
	listed := func() *pgmsg.Job {
		t.Helper()
		jobs, err := tb.client.ListJobs(tb.ctx, "wf", nil)
		require.NoError(t, err)
		require.Len(t, jobs, 3)
		require.Equal(t, a.ID, jobs[0].WorkflowID, "the root names its workflow")
		require.Empty(t, jobs[0].DependsOn)
		return jobs[2]
	}
	lc := listed()
	require.Equal(t, []int64{a.ID, b.ID}, lc.DependsOn, "ListJobs shows what GetJob shows")
	require.Equal(t, 2, lc.DepsWaiting)
	require.Equal(t, a.ID, lc.WorkflowID)

	ja, jb := claimOne(t, tb, "wf"), claimOne(t, tb, "wf")
	require.NoError(t, tb.client.Complete(tb.ctx, ja))
	j, err = tb.client.GetJob(tb.ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStatePending, j.State, "one dependency is still running")
	require.Equal(t, 1, j.DepsWaiting)

	tx, err := tb.Pool.Begin(tb.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(tb.ctx) }()
	require.NoError(t, tb.client.CompleteTx(tb.ctx, tx, jb))
	var inside string
	require.NoError(t, tx.QueryRow(tb.ctx, fmt.Sprintf("SELECT state FROM %s.job WHERE id = $1", pgx.Identifier{tb.Schema}.Sanitize()), c.ID).Scan(&inside))
	require.Equal(t, "available", inside, "released by the completing transaction")
	require.Equal(t, pgmsg.JobStatePending, wfState(t, tb, c.ID), "not before it commits")
	require.NoError(t, tx.Commit(tb.ctx))
	require.Equal(t, pgmsg.JobStateAvailable, wfState(t, tb, c.ID))
	jc := claimOne(t, tb, "wf")
	require.Equal(t, c.ID, jc.ID)
	require.NoError(t, tb.client.Complete(tb.ctx, jc))
	lc = listed() // archived now
	require.Equal(t, pgmsg.JobStateCompleted, lc.State)
	require.Equal(t, []int64{a.ID, b.ID}, lc.DependsOn)
	require.Zero(t, lc.DepsWaiting)
	require.Equal(t, a.ID, lc.WorkflowID)

	wf, err := tb.client.GetWorkflow(tb.ctx, c.ID, nil)
	require.NoError(t, err)
	require.Len(t, wf, 3)
	require.Equal(t, []int{0, 0, 1}, []int{wf[0].Level, wf[1].Level, wf[2].Level})
	for _, w := range wf {
		require.Equal(t, pgmsg.JobStateCompleted, w.State)
	}
}

// A cancelled dependency cancels its waiting dependents, recursively,
// except those that ignore cancelled dependencies; a dead one those that
// do not ignore dead ones; a failed dependency that will retry keeps its
// dependents waiting; and a job enqueued on a dependency that already
// completed, was cancelled or is dead is settled at once.
func TestWorkflowFailurePropagation(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "wf", pgmsg.QueueConfig{RetryBackoff: time.Millisecond, RetryBackoffMax: time.Millisecond})
	w := pgmsg.NewWorkflow().
		Add("a", pgmsg.EnqueueParams{Payload: []byte("a")}).
		Add("b", pgmsg.EnqueueParams{Payload: []byte("b")}, "a").
		Add("c", pgmsg.EnqueueParams{Payload: []byte("c")}, "b").
		Add("keep", pgmsg.EnqueueParams{Payload: []byte("keep"), IgnoreCancelledDeps: true}, "b").
		Add("d", pgmsg.EnqueueParams{Payload: []byte("d"), IgnoreDeadDeps: true}, "a")
	res, err := tb.client.EnqueueWorkflow(tb.ctx, "wf", w, nil)
	require.NoError(t, err)
	ok, err := tb.client.CancelJob(tb.ctx, res["a"].ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, pgmsg.JobStateCancelled, wfState(t, tb, res["b"].ID))
	require.Equal(t, pgmsg.JobStateCancelled, wfState(t, tb, res["c"].ID), "recursively")
	require.Equal(t, pgmsg.JobStateCancelled, wfState(t, tb, res["d"].ID), "d ignores dead dependencies, not cancelled ones")
	require.Equal(t, pgmsg.JobStateAvailable, wfState(t, tb, res["keep"].ID), "keep ignores its cancelled dependency")
	j, err := tb.client.GetJob(tb.ctx, res["c"].ID)
	require.NoError(t, err)
	require.Contains(t, j.Errors[len(j.Errors)-1].Error, "dependency")
	require.Equal(t, res["keep"].ID, claimOne(t, tb, "wf").ID)
	// Dead and retried dependencies.
	w = pgmsg.NewWorkflow().
		Add("flaky", pgmsg.EnqueueParams{Payload: []byte("flaky"), MaxAttempts: 2}).
		Add("e", pgmsg.EnqueueParams{Payload: []byte("e")}, "flaky").
		Add("f", pgmsg.EnqueueParams{Payload: []byte("f"), IgnoreDeadDeps: true}, "flaky").
		Add("g", pgmsg.EnqueueParams{Payload: []byte("g")}, "e")
	res, err = tb.client.EnqueueWorkflow(tb.ctx, "wf", w, nil)
	require.NoError(t, err)
	jf := claimOne(t, tb, "wf")
	require.Equal(t, res["flaky"].ID, jf.ID)
	_, err = tb.client.Fail(tb.ctx, jf, fmt.Errorf("boom"), nil)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateRetrying, wfState(t, tb, jf.ID))
	require.Equal(t, pgmsg.JobStatePending, wfState(t, tb, res["e"].ID), "a retrying dependency keeps its dependents waiting")
	require.Equal(t, pgmsg.JobStatePending, wfState(t, tb, res["f"].ID))
	require.Eventually(t, func() bool {
		js, err := tb.client.ClaimJobs(tb.ctx, "wf", nil)
		require.NoError(t, err)
		if len(js) == 0 {
			return false
		}
		require.Equal(t, jf.ID, js[0].ID, "only the retried dependency is claimable")
		jf = js[0]
		return true
	}, 10*time.Second, 5*time.Millisecond)
	_, err = tb.client.Fail(tb.ctx, jf, fmt.Errorf("boom again"), nil)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateDead, wfState(t, tb, jf.ID))
	require.Equal(t, pgmsg.JobStateCancelled, wfState(t, tb, res["e"].ID))
	require.Equal(t, pgmsg.JobStateCancelled, wfState(t, tb, res["g"].ID))
	require.Equal(t, pgmsg.JobStateAvailable, wfState(t, tb, res["f"].ID), "f ignores its dead dependency")
	// Enqueued on finished dependencies: settled by the enqueue.
	jfID := jf.ID
	jd, err := tb.client.Enqueue(tb.ctx, "wf", pgmsg.EnqueueParams{DependsOn: []int64{jfID}}, nil)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateCancelled, jd.State, "its dependency is dead")
	jd, err = tb.client.Enqueue(tb.ctx, "wf", pgmsg.EnqueueParams{DependsOn: []int64{jfID}, IgnoreDeadDeps: true}, nil)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateAvailable, jd.State)
	jd, err = tb.client.Enqueue(tb.ctx, "wf", pgmsg.EnqueueParams{DependsOn: []int64{res["e"].ID}}, nil)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateCancelled, jd.State, "its dependency was cancelled")
	done, err := tb.client.Enqueue(tb.ctx, "wf", pgmsg.EnqueueParams{Payload: []byte("done")}, nil)
	require.NoError(t, err)
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT %s.job_cancel(id) FROM %[1]s.job WHERE state = 'available' AND id <> $1",
		pgx.Identifier{tb.Schema}.Sanitize()), done.ID)
	require.NoError(t, err)
	jdone := claimOne(t, tb, "wf")
	require.NoError(t, tb.client.Complete(tb.ctx, jdone))
	jd, err = tb.client.Enqueue(tb.ctx, "wf", pgmsg.EnqueueParams{DependsOn: []int64{done.ID}}, nil)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateAvailable, jd.State, "its dependency completed")
	// A dead dependency purged: its dependents were settled when it died.
	_, err = tb.client.PurgeDeadJobs(tb.ctx, "wf", nil)
	require.NoError(t, err)
}

// Bad dependencies fail the enqueue with their own codes, and nothing of
// the batch is stored.
func TestWorkflowEnqueueErrors(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "wf", pgmsg.QueueConfig{})
	tb.queue(t, "other", pgmsg.QueueConfig{})
	other, err := tb.client.Enqueue(tb.ctx, "other", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	live, err := tb.client.Enqueue(tb.ctx, "wf", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	before := wfCount(t, tb, "wf")
	ok := pgmsg.EnqueueParams{Payload: []byte("fine"), DependsOn: []int64{live.ID}}
	cases := []struct {
		name string
		ps   []pgmsg.EnqueueParams
		want error
		code string
	}{
		{"unknown id", []pgmsg.EnqueueParams{ok, {DependsOn: []int64{live.ID + 1000000}}}, pgmsg.ErrUnknownDependency, "PM114"},
		{"unknown name", []pgmsg.EnqueueParams{ok, {Name: "a", DependsOnNames: []string{"b"}}}, pgmsg.ErrUnknownDependency, "PM114"},
		{"other queue", []pgmsg.EnqueueParams{ok, {DependsOn: []int64{other.ID}}}, pgmsg.ErrDependencyQueue, "PM115"},
		{"cycle", []pgmsg.EnqueueParams{ok, {Name: "a", DependsOnNames: []string{"c"}}, {Name: "b", DependsOnNames: []string{"a"}},
			{Name: "c", DependsOnNames: []string{"b"}}}, pgmsg.ErrDependencyCycle, "PM116"},
		{"self", []pgmsg.EnqueueParams{ok, {Name: "a", DependsOnNames: []string{"a"}}}, pgmsg.ErrDependencyCycle, "PM116"},
		{"too many", []pgmsg.EnqueueParams{ok, {DependsOn: make([]int64, pgmsg.JobDependsOnMax+1)}}, pgmsg.ErrTooManyDependencies, "PM117"},
		{"unique key", []pgmsg.EnqueueParams{ok, {DependsOn: []int64{live.ID}, UniqueKey: "u"}}, pgmsg.ErrInvalidArgument, "PM004"},
		{"twice the name", []pgmsg.EnqueueParams{{Name: "a"}, {Name: "a"}}, pgmsg.ErrInvalidArgument, "PM004"},
	}
	for _, c := range cases {
		_, err := tb.client.EnqueueMany(tb.ctx, "wf", c.ps, nil)
		require.ErrorIs(t, err, c.want, c.name)
		require.Equal(t, before, wfCount(t, tb, "wf"), "%s: nothing stored", c.name)
	}
	// The SQL API refuses them with the same codes (PM117 too, which Go
	// checks first).
	sch := pgx.Identifier{tb.Schema}.Sanitize()
	for _, c := range []struct{ deps, code string }{
		{fmt.Sprintf("[%d]", live.ID+1000000), "PM114"},
		{fmt.Sprintf("[%d]", other.ID), "PM115"},
		{fmt.Sprintf("(SELECT jsonb_agg(%d) FROM generate_series(1, 1001))", live.ID), "PM117"},
		{`["x"]`, "PM114"},
		{`[0]`, "PM004"},
		{`{"a": 1}`, "PM004"},
	} {
		deps := c.deps
		if deps[0] != '(' {
			deps = "'" + deps + "'::jsonb"
		}
		_, err := tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT * FROM %s.enqueue('wf', ''::bytea, p_depends_on => %s)", sch, deps))
		require.ErrorContains(t, err, c.code, c.deps)
	}
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf(`SELECT * FROM %s.enqueue_many('wf', ARRAY[''::bytea, ''::bytea], p_names => ARRAY['a', 'b'],
		p_depends_on => ARRAY['["b"]'::jsonb, '["a"]'::jsonb])`, sch))
	require.ErrorContains(t, err, "PM116")
	require.Equal(t, before, wfCount(t, tb, "wf"))
	// Names without dependencies are fine.
	res, err := tb.client.EnqueueMany(tb.ctx, "wf", []pgmsg.EnqueueParams{{Name: "solo"}}, nil)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateAvailable, res[0].State)
}

// A dependency completing while a job is enqueued on it: whichever commits
// first, the dependent is released (the enqueue locks the dependency's
// row, and its completion then sees the edge).
func TestWorkflowEnqueueRacesCompletion(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "wf", pgmsg.QueueConfig{})
	for i := 0; i < 30; i++ {
		a, err := tb.client.Enqueue(tb.ctx, "wf", pgmsg.EnqueueParams{}, nil)
		require.NoError(t, err)
		ja := claimOne(t, tb, "wf")
		var dep *pgmsg.EnqueueResult
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); require.NoError(t, tb.client.Complete(tb.ctx, ja)) }()
		go func() {
			defer wg.Done()
			var err error
			dep, err = tb.client.Enqueue(tb.ctx, "wf", pgmsg.EnqueueParams{DependsOn: []int64{a.ID}}, nil)
			require.NoError(t, err)
		}()
		wg.Wait()
		require.Equal(t, pgmsg.JobStateAvailable, wfState(t, tb, dep.ID), "round %d", i)
		jd := claimOne(t, tb, "wf")
		require.NoError(t, tb.client.Complete(tb.ctx, jd))
	}
}

// Deleting a queue with a waiting workflow deletes it whole, its edges
// with it.
func TestWorkflowQueueDelete(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "wf", pgmsg.QueueConfig{})
	w := pgmsg.NewWorkflow().Add("a", pgmsg.EnqueueParams{}).Add("b", pgmsg.EnqueueParams{}, "a").
		Add("c", pgmsg.EnqueueParams{}, "b")
	_, err := tb.client.EnqueueWorkflow(tb.ctx, "wf", w, nil)
	require.NoError(t, err)
	require.Equal(t, 3+2, wfCount(t, tb, "wf"), "three jobs, two edges")
	require.NoError(t, tb.client.DeleteQueue(tb.ctx, "wf", true))
	var edges int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, fmt.Sprintf("SELECT count(*) FROM %s.job_dependency",
		pgx.Identifier{tb.Schema}.Sanitize())).Scan(&edges))
	require.Zero(t, edges)
}
