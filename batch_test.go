package pgmsg_test

import (
	"context"
	"encoding/json"
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

// batchCallbacks are the three callbacks of the tests, into queue cb.
func batchCallbacks() *pgmsg.BatchOpts {
	return &pgmsg.BatchOpts{
		OnComplete: &pgmsg.BatchCallback{Kind: "batch.done", Queue: "cb", Args: map[string]any{"report": 7},
			Metadata: map[string]any{"owner": "tests"}},
		OnDiscard:  &pgmsg.BatchCallback{Kind: "batch.failed", Queue: "cb"},
		OnFinished: &pgmsg.BatchCallback{Kind: "batch.finished", Queue: "cb", Priority: 5},
	}
}

// batchPayloads returns n params with payloads "0", "1" ...
func batchPayloads(n int) []pgmsg.EnqueueParams {
	ps := make([]pgmsg.EnqueueParams, n)
	for i := range ps {
		ps[i] = pgmsg.EnqueueParams{Payload: []byte(fmt.Sprint(i))}
	}
	return ps
}

// batchMeta is a callback job's metadata "batch" object.
type batchMeta struct {
	ID        int64  `json:"id"`
	Callback  string `json:"callback"`
	Total     int    `json:"total"`
	Completed int    `json:"completed"`
	Cancelled int    `json:"cancelled"`
	Dead      int    `json:"dead"`
}

// callbackMeta returns callback job id's kind and batch metadata.
func callbackMeta(t *testing.T, tb *testBundle, id int64) (string, batchMeta, map[string]json.RawMessage) {
	t.Helper()
	j, err := tb.client.GetJob(tb.ctx, id)
	require.NoError(t, err)
	var md map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(j.Metadata, &md))
	var m batchMeta
	require.NoError(t, json.Unmarshal(md["batch"], &m))
	return j.Kind, m, md
}

// A batch whose jobs all complete enqueues OnComplete and OnFinished once
// the last one completed, not before, with the batch's counts in their
// metadata; OnDiscard is not enqueued.
func TestBatchOnComplete(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "b", pgmsg.QueueConfig{})
	res, err := tb.client.EnqueueBatch(tb.ctx, "b", batchPayloads(3), batchCallbacks())
	require.NoError(t, err)
	require.NotZero(t, res.ID)
	require.Len(t, res.Jobs, 3)
	for i := 0; i < 3; i++ {
		b, err := tb.client.GetBatch(tb.ctx, res.ID)
		require.NoError(t, err)
		require.Nil(t, b.FinishedAt)
		require.EqualValues(t, 3-i, b.Available)
		require.EqualValues(t, i, b.Completed)
		require.Zero(t, b.CompleteJobID)
		require.NoError(t, tb.client.Complete(tb.ctx, claimOne(t, tb, "b")))
	}
	b, err := tb.client.GetBatch(tb.ctx, res.ID)
	require.NoError(t, err)
	require.NotNil(t, b.FinishedAt)
	require.Equal(t, "b", b.Queue)
	require.Equal(t, 3, b.Total)
	require.EqualValues(t, 3, b.Completed)
	require.Zero(t, b.Cancelled+b.Dead+b.Available+b.Running)
	require.NotZero(t, b.CompleteJobID)
	require.Zero(t, b.DiscardJobID)
	require.NotZero(t, b.FinishedJobID)
	require.JSONEq(t, `{"kind": "batch.done", "queue": "cb", "args": {"report": 7}, "metadata": {"owner": "tests"}}`, string(b.OnComplete))

	kind, m, md := callbackMeta(t, tb, b.CompleteJobID)
	require.Equal(t, "batch.done", kind)
	require.Equal(t, batchMeta{ID: res.ID, Callback: "complete", Total: 3, Completed: 3}, m)
	require.JSONEq(t, `"tests"`, string(md["owner"]))
	j, err := tb.client.GetJob(tb.ctx, b.CompleteJobID)
	require.NoError(t, err)
	require.Equal(t, "cb", j.Queue)
	require.JSONEq(t, `{"report": 7}`, string(j.Payload))
	kind, m, _ = callbackMeta(t, tb, b.FinishedJobID)
	require.Equal(t, "batch.finished", kind)
	require.Equal(t, "finished", m.Callback)
	fj, err := tb.client.GetJob(tb.ctx, b.FinishedJobID)
	require.NoError(t, err)
	require.Equal(t, 5, fj.Priority)
	require.Empty(t, fj.Payload)

	// The counts do not depend on the archive.
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf(`DELETE FROM %s.job_archive`, pgx.Identifier{tb.Schema}.Sanitize()))
	require.NoError(t, err)
	b2, err := tb.client.GetBatch(tb.ctx, res.ID)
	require.NoError(t, err)
	require.EqualValues(t, 3, b2.Completed)
}

// A dead job and a cancelled one make the batch discarded once the last
// job is final; a retrying job is not final; a dead job requeued before
// the batch finished is live again.
func TestBatchOnDiscardDeadCancelledRetried(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "b", pgmsg.QueueConfig{})
	res, err := tb.client.EnqueueBatch(tb.ctx, "b", batchPayloads(4), batchCallbacks())
	require.NoError(t, err)
	ids := []int64{res.Jobs[0].ID, res.Jobs[1].ID, res.Jobs[2].ID, res.Jobs[3].ID}

	// Job 0 fails (retrying: not final), then goes dead; requeued, it is
	// live again.
	j := claimOne(t, tb, "b")
	require.Equal(t, ids[0], j.ID)
	_, err = tb.client.Fail(tb.ctx, j, fmt.Errorf("boom"), &pgmsg.FailOpts{RetryIn: time.Hour})
	require.NoError(t, err)
	b, err := tb.client.GetBatch(tb.ctx, res.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, b.Retrying)
	require.Zero(t, b.Dead)
	_, err = tb.client.CancelJob(tb.ctx, ids[0])
	require.NoError(t, err)
	// Job 1 dead, requeued, dead again (jobs 2 and 3 are claimed with it
	// the second time).
	var j2 *pgmsg.Job
	for k := 0; k < 2; k++ {
		if k == 0 {
			j = claimOne(t, tb, "b")
		} else {
			// The requeued job runs after those waiting since before.
			js, err := tb.client.ClaimJobs(tb.ctx, "b", &pgmsg.ClaimJobsOpts{Max: 3})
			require.NoError(t, err)
			require.Len(t, js, 3)
			j, j2 = js[2], js[0]
		}
		require.Equal(t, ids[1], j.ID)
		_, err = tb.client.Fail(tb.ctx, j, fmt.Errorf("fatal"), &pgmsg.FailOpts{Dead: true})
		require.NoError(t, err)
		b, err = tb.client.GetBatch(tb.ctx, res.ID)
		require.NoError(t, err)
		require.EqualValues(t, 1, b.Dead)
		if k == 0 {
			n, err := tb.client.RequeueDeadJobs(tb.ctx, "b", &pgmsg.DeadJobsOpts{IDs: []int64{ids[1]}})
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			b, err = tb.client.GetBatch(tb.ctx, res.ID)
			require.NoError(t, err)
			require.Zero(t, b.Dead)
		}
	}
	// Job 2 completes, job 3 is cancelled last.
	require.Equal(t, ids[2], j2.ID)
	require.NoError(t, tb.client.Complete(tb.ctx, j2))
	b, err = tb.client.GetBatch(tb.ctx, res.ID)
	require.NoError(t, err)
	require.Nil(t, b.FinishedAt)
	require.EqualValues(t, 1, b.Running)
	ok, err := tb.client.CancelJob(tb.ctx, ids[3])
	require.NoError(t, err)
	require.True(t, ok)

	b, err = tb.client.GetBatch(tb.ctx, res.ID)
	require.NoError(t, err)
	require.NotNil(t, b.FinishedAt)
	require.Zero(t, b.CompleteJobID)
	require.NotZero(t, b.DiscardJobID)
	require.NotZero(t, b.FinishedJobID)
	require.Equal(t, [3]int64{1, 2, 1}, [3]int64{b.Completed, b.Cancelled, b.Dead})
	kind, m, _ := callbackMeta(t, tb, b.DiscardJobID)
	require.Equal(t, "batch.failed", kind)
	require.Equal(t, batchMeta{ID: res.ID, Callback: "discard", Total: 4, Completed: 1, Cancelled: 2, Dead: 1}, m)

	// Purging, cancelling or requeueing the dead job after the batch
	// finished changes neither its counts nor its callbacks.
	n, err := tb.client.RequeueDeadJobs(tb.ctx, "b", nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, tb.client.Complete(tb.ctx, claimOne(t, tb, "b")))
	b2, err := tb.client.GetBatch(tb.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, b.DiscardJobID, b2.DiscardJobID)
	require.Zero(t, b2.CompleteJobID)
	require.Equal(t, 2, countCallbacks(t, tb, res.ID), dumpCallbacks(t, tb))
}

// dumpCallbacks lists the callback jobs, for a failure's message.
func dumpCallbacks(t *testing.T, tb *testBundle) string {
	rows, err := tb.Pool.Query(tb.ctx, fmt.Sprintf(`SELECT id, kind, metadata::text, 'live' FROM %[1]s.job WHERE metadata ? 'batch' UNION ALL SELECT id, kind, metadata::text, status FROM %[1]s.job_archive WHERE metadata ? 'batch'`, pgx.Identifier{tb.Schema}.Sanitize()))
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var id int64
		var k, m, st string
		require.NoError(t, rows.Scan(&id, &k, &m, &st))
		out = append(out, fmt.Sprint(id, k, m, st))
	}
	return strings.Join(out, "\n")
}

// countCallbacks counts the jobs of queue cb, live or archived, whose
// metadata names batch id.
func countCallbacks(t *testing.T, tb *testBundle, id int64) int {
	t.Helper()
	var n int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, fmt.Sprintf(`SELECT
		(SELECT count(*) FROM %[1]s.job WHERE (metadata->'batch'->>'id')::bigint = $1)
		+ (SELECT count(*) FROM %[1]s.job_archive WHERE (metadata->'batch'->>'id')::bigint = $1)`,
		pgx.Identifier{tb.Schema}.Sanitize()), id).Scan(&n))
	return n
}

// A batch of one job; callbacks default to the batch's queue; the
// archive's pruning removes finished batches.
func TestBatchOfOne(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "b", pgmsg.QueueConfig{})
	res, err := tb.client.EnqueueBatch(tb.ctx, "b", batchPayloads(1), &pgmsg.BatchOpts{
		OnComplete: &pgmsg.BatchCallback{Kind: "one.done"}})
	require.NoError(t, err)
	require.NoError(t, tb.client.Complete(tb.ctx, claimOne(t, tb, "b")))
	b, err := tb.client.GetBatch(tb.ctx, res.ID)
	require.NoError(t, err)
	require.NotZero(t, b.CompleteJobID)
	cj := claimOne(t, tb, "b")
	require.Equal(t, b.CompleteJobID, cj.ID)
	require.Equal(t, "one.done", cj.Kind)

	// Pruning the archive prunes the batches finished as long ago.
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf(`SELECT %s.archive_prune('b', interval '0')`, pgx.Identifier{tb.Schema}.Sanitize()))
	require.NoError(t, err)
	_, err = tb.client.GetBatch(tb.ctx, res.ID)
	require.ErrorIs(t, err, pgmsg.ErrUnknownBatch)
}

// Refused batches store nothing: an empty one (PM010) and bad callbacks
// (PM120), from Go and from SQL; an unknown batch is PM121.
func TestBatchRefused(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "b", pgmsg.QueueConfig{})
	_, err := tb.client.EnqueueBatch(tb.ctx, "b", nil, batchCallbacks())
	require.ErrorIs(t, err, pgmsg.ErrEmptyBatch)
	for name, cb := range map[string]*pgmsg.BatchCallback{
		"no kind":       {Queue: "cb"},
		"bad queue":     {Kind: "k", Queue: "no spaces"},
		"priority":      {Kind: "k", Priority: 40000},
		"long kind":     {Kind: strings.Repeat("k", 201)},
		"array meta":    {Kind: "k", Metadata: []int{1}},
		"unencodable":   {Kind: "k", Args: func() {}},
		"long kind utf": {Kind: strings.Repeat("é", 101)},
		"nul":           {Kind: "k", Args: "a\x00b"},
	} {
		_, err := tb.client.EnqueueBatch(tb.ctx, "b", batchPayloads(2), &pgmsg.BatchOpts{OnDiscard: cb})
		require.ErrorIs(t, err, pgmsg.ErrInvalidBatchCallback, name)
		require.Equal(t, "PM120", pgmsg.ErrorCode(err), name)
	}
	s := pgx.Identifier{tb.Schema}.Sanitize()
	for _, spec := range []string{`[]`, `{"kind": "k", "other": 1}`, `{"kind": 3}`, `{"kind": "k", "priority": 1.5}`, `{"kind": "k", "queue": ""}`} {
		_, err := tb.Pool.Exec(tb.ctx, fmt.Sprintf(`SELECT * FROM %s.job_enqueue_batch('b', ARRAY['\x01'::bytea], p_on_complete => $1::jsonb)`, s), spec)
		require.ErrorContains(t, err, "PM120", spec)
	}
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf(`SELECT * FROM %s.job_enqueue_batch('b', ARRAY[]::bytea[])`, s))
	require.ErrorContains(t, err, "PM010")
	var jobs, batches int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s.job), (SELECT count(*) FROM %[1]s.job_batch)`, s)).Scan(&jobs, &batches))
	require.Zero(t, jobs)
	require.Zero(t, batches)
	_, err = tb.client.GetBatch(tb.ctx, 12345)
	require.ErrorIs(t, err, pgmsg.ErrUnknownBatch)
}

// A batch whose jobs are all duplicates (or cancelled at once) finishes
// at once; EnqueueBatchTx stores nothing if its transaction rolls back.
func TestBatchDuplicatesAndTx(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "b", pgmsg.QueueConfig{})
	_, err := tb.client.Enqueue(tb.ctx, "b", pgmsg.EnqueueParams{UniqueKey: "u"}, nil)
	require.NoError(t, err)
	res, err := tb.client.EnqueueBatch(tb.ctx, "b", []pgmsg.EnqueueParams{{UniqueKey: "u"}}, batchCallbacks())
	require.NoError(t, err)
	require.True(t, res.Jobs[0].Duplicate)
	b, err := tb.client.GetBatch(tb.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, 0, b.Total)
	require.NotZero(t, b.CompleteJobID)

	tx, err := tb.Pool.Begin(tb.ctx)
	require.NoError(t, err)
	res, err = tb.client.EnqueueBatchTx(tb.ctx, tx, "b", batchPayloads(2), batchCallbacks())
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(tb.ctx))
	_, err = tb.client.GetBatch(tb.ctx, res.ID)
	require.ErrorIs(t, err, pgmsg.ErrUnknownBatch)
}

// The last two jobs of a batch completed by two transactions at once, in
// either commit order and under READ COMMITTED or REPEATABLE READ (then
// the later one may fail with a serialization error, retried): exactly one
// OnComplete.
func TestBatchConcurrentLastCompletions(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "b", pgmsg.QueueConfig{})
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		for _, firstCommits := range []int{0, 1} {
			res, err := tb.client.EnqueueBatch(tb.ctx, "b", batchPayloads(2), batchCallbacks())
			require.NoError(t, err)
			js, err := tb.client.ClaimJobs(tb.ctx, "b", &pgmsg.ClaimJobsOpts{Max: 2})
			require.NoError(t, err)
			require.Len(t, js, 2)
			txs := make([]pgx.Tx, 2)
			for i := range txs {
				txs[i], err = tb.Pool.BeginTx(tb.ctx, pgx.TxOptions{IsoLevel: iso})
				require.NoError(t, err)
				// A snapshot taken before either completes.
				_, err = txs[i].Exec(tb.ctx, "SELECT 1")
				require.NoError(t, err)
			}
			// Both complete; the second may wait for the first's commit.
			errc := make(chan error, 2)
			var wg sync.WaitGroup
			for i := range txs {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					err := tb.client.CompleteTx(tb.ctx, txs[i], js[i])
					if err == nil {
						err = txs[i].Commit(tb.ctx)
					} else {
						_ = txs[i].Rollback(tb.ctx)
					}
					errc <- err
				}(i)
				if i == firstCommits {
					// Let it reach its lock first.
					time.Sleep(50 * time.Millisecond)
				}
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				if err != nil {
					require.Equal(t, pgx.RepeatableRead, iso, "%v", err)
					require.Contains(t, err.Error(), "40001")
				}
			}
			// A transaction that failed (40001) left its job running: finish it.
			for _, j := range js {
				if err := tb.client.Complete(tb.ctx, j); err != nil {
					require.ErrorIs(t, err, pgmsg.ErrJobNotHeld)
				}
			}
			b, err := tb.client.GetBatch(tb.ctx, res.ID)
			require.NoError(t, err)
			require.NotNil(t, b.FinishedAt, "%s %d", iso, firstCommits)
			require.EqualValues(t, 2, b.Completed)
			require.Equal(t, 2, countCallbacks(t, tb, res.ID), "%s %d", iso, firstCommits) // complete + finished
		}
	}
}

// Many small batches run by many workers (one worker process as the
// schema's worker role): each batch enqueues exactly one OnComplete and
// one OnFinished.
func TestBatchManyWorkersExactlyOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "b", pgmsg.QueueConfig{})
	const batches = 60
	ids := make([]int64, batches)
	total := 0
	for i := range ids {
		n := 1 + i%5
		res, err := tb.client.EnqueueBatch(tb.ctx, "b", batchPayloads(n), batchCallbacks())
		require.NoError(t, err)
		ids[i] = res.ID
		total += n
	}
	var mu sync.Mutex
	ran := 0
	done := make(chan struct{})
	stop := processWorkers(t, tb, "b", 3, 8, func(ctx context.Context, j *pgmsg.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if ran++; ran == total {
			close(done)
		}
		return nil
	})
	select {
	case <-done:
	case <-tb.ctx.Done():
		t.Fatal("the batches' jobs did not all run")
	}
	// The last completions commit after their handlers returned.
	for _, id := range ids {
		for {
			b, err := tb.client.GetBatch(tb.ctx, id)
			require.NoError(t, err)
			if b.FinishedAt != nil {
				break
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-tb.ctx.Done():
				t.Fatalf("batch %d did not finish: %+v", id, b)
			}
		}
	}
	stop()
	var cbs, distinct int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, fmt.Sprintf(`SELECT count(*), count(DISTINCT (metadata->'batch'->>'id', kind))
		FROM %s.job WHERE metadata ? 'batch'`, pgx.Identifier{tb.Schema}.Sanitize())).Scan(&cbs, &distinct))
	require.Equal(t, 2*batches, cbs)
	require.Equal(t, 2*batches, distinct)
	for _, id := range ids {
		b, err := tb.client.GetBatch(tb.ctx, id)
		require.NoError(t, err)
		require.NotZero(t, b.CompleteJobID)
		require.EqualValues(t, b.Total, b.Completed)
	}
}

// TestJobBatchIDReported: GetJob, ListJobs (either order) and
// ListDeadJobs return the batch a job was enqueued in (0: none), live and
// archived by each way out: CompleteMany, Complete, CancelJob, dead, and
// cancelled because a dependency went dead.
func TestJobBatchIDReported(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "bi", pgmsg.QueueConfig{MaxAttempts: 1})
	plain, err := tb.client.Enqueue(tb.ctx, "bi", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	params := batchPayloads(6)
	params[4].Name = "root"
	params[5].DependsOnNames = []string{"root"}
	res, err := tb.client.EnqueueBatch(tb.ctx, "bi", params, nil)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 6)
	ids := make([]int64, 6)
	want := map[int64]int64{plain.ID: 0}
	for i, r := range res.Jobs {
		ids[i] = r.ID
		want[r.ID] = res.ID
	}

	check := func(what string, states map[int64]pgmsg.JobState) {
		t.Helper()
		for id, batch := range want {
			j, err := tb.client.GetJob(tb.ctx, id)
			require.NoError(t, err)
			require.Equal(t, batch, j.BatchID, "%s: GetJob(%d)", what, id)
			if states != nil {
				require.Equal(t, states[id], j.State, "%s: job %d", what, id)
			}
		}
		for _, order := range []pgmsg.JobOrder{pgmsg.JobOrderAsc, pgmsg.JobOrderDesc} {
			list, err := tb.client.ListJobs(tb.ctx, "bi", &pgmsg.ListJobsOpts{Order: order})
			require.NoError(t, err)
			got := map[int64]int64{}
			for _, j := range list {
				got[j.ID] = j.BatchID
			}
			require.Equal(t, want, got, "%s: ListJobs %s", what, order)
		}
	}
	check("live", nil)

	claimed, err := tb.client.ClaimJobs(tb.ctx, "bi", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, claimed, 6, "all but the one waiting for root")
	byID := map[int64]*pgmsg.Job{}
	for _, j := range claimed {
		byID[j.ID] = j
	}
	done, err := tb.client.CompleteMany(tb.ctx, []*pgmsg.Job{byID[plain.ID], byID[ids[0]]})
	require.NoError(t, err)
	require.Len(t, done.Completed, 2)
	require.NoError(t, tb.client.Complete(tb.ctx, byID[ids[1]]))
	_, err = tb.client.Fail(tb.ctx, byID[ids[2]], errors.New("boom"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	ok, err := tb.client.CancelJob(tb.ctx, ids[3])
	require.NoError(t, err)
	require.True(t, ok)
	_, err = tb.client.Fail(tb.ctx, byID[ids[4]], errors.New("root failed"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	check("finished", map[int64]pgmsg.JobState{
		plain.ID: pgmsg.JobStateCompleted, ids[0]: pgmsg.JobStateCompleted, ids[1]: pgmsg.JobStateCompleted,
		ids[2]: pgmsg.JobStateDead, ids[3]: pgmsg.JobStateCancelled, ids[4]: pgmsg.JobStateDead,
		ids[5]: pgmsg.JobStateCancelled,
	})
	dead, err := tb.client.ListDeadJobs(tb.ctx, "bi", nil)
	require.NoError(t, err)
	require.Len(t, dead, 2)
	for _, j := range dead {
		require.Equal(t, res.ID, j.BatchID, "ListDeadJobs: job %d", j.ID)
	}
}
