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
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// limitCounter counts the jobs running at once, per key and in all, as
// handlers see them, and keeps the most seen.
type limitCounter struct {
	mu      sync.Mutex
	running map[string]int
	max     map[string]int
	all     int
	allMax  int
	done    int
	total   int
	allDone chan struct{}
}

func newLimitCounter(total int) *limitCounter {
	return &limitCounter{running: map[string]int{}, max: map[string]int{}, total: total, allDone: make(chan struct{})}
}

func (c *limitCounter) enter(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[key]++
	c.max[key] = max(c.max[key], c.running[key])
	c.all++
	c.allMax = max(c.allMax, c.all)
}

func (c *limitCounter) leave(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[key]--
	c.all--
	c.done++
	if c.done == c.total {
		close(c.allDone)
	}
}

func (c *limitCounter) wait(t *testing.T) {
	t.Helper()
	select {
	case <-c.allDone:
	case <-time.After(90 * time.Second):
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("only %d of %d jobs ran", c.done, c.total)
	}
}

// processWorkers runs n workers of queue, each of concurrency with a
// client and pool of its own as separate processes would have; the first
// connects as the schema's worker role (the triggers that admit a limit
// key's next job and move a sequence on run as the role that finishes a
// job). stop stops them and waits until they have.
func processWorkers(t *testing.T, tb *testBundle, queue string, n, concurrency int, handler pgmsg.JobHandler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(tb.ctx)
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		cfg := tb.Pool.Config().Copy()
		cfg.MaxConns = 4
		if w == 0 {
			role := pgx.Identifier{tb.Schema + "_worker"}.Sanitize()
			cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
				_, err := conn.Exec(ctx, "SET ROLE "+role)
				return err
			}
		}
		pool, err := pgxpool.NewWithConfig(tb.ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		c, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: tb.Schema, PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		wk, err := c.NewWorker(queue, handler, &pgmsg.WorkerOpts{Concurrency: concurrency, PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		wg.Add(1)
		go func() { defer wg.Done(); _ = wk.Run(ctx) }()
	}
	return func() { cancel(); wg.Wait() }
}

// customerPayload is a job's JSON payload with its customer_id.
func customerPayload(t *testing.T, customer string, n int) []byte {
	b, err := json.Marshal(map[string]any{"customer_id": customer, "n": n})
	require.NoError(t, err)
	return b
}

func customerOf(j *pgmsg.Job) string {
	var p struct {
		CustomerID string `json:"customer_id"`
	}
	_ = json.Unmarshal(j.Payload, &p)
	return p.CustomerID
}

// At most KeyLimit jobs of a key run at once across several worker
// processes, with the key taken from the payload's field or given at
// enqueue, while enqueues race the completions that admit the next.
func TestKeyLimitNeverExceededAcrossWorkers(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "kl", pgmsg.QueueConfig{KeyLimit: 2, KeyField: "customer_id"})
	const keys, perKey = 6, 12
	enqueueBatch := func(b int) []*pgmsg.EnqueueResult {
		var ps []pgmsg.EnqueueParams
		for i := b * perKey / 3; i < (b+1)*perKey/3; i++ {
			for k := 0; k < keys; k++ {
				p := pgmsg.EnqueueParams{Payload: customerPayload(t, fmt.Sprintf("c%d", k), i)}
				if k == 0 {
					// A key given overrides the field.
					p.Payload, p.LimitKey = []byte(`{"customer_id": "ignored"}`), "c0"
				}
				ps = append(ps, p)
			}
		}
		res, err := tb.client.EnqueueMany(tb.ctx, "kl", ps, nil)
		require.NoError(t, err)
		return res
	}
	for i, r := range enqueueBatch(0) {
		if i < 2*keys {
			require.Equal(t, pgmsg.JobStateAvailable, r.State, "job %d: a key's first two are admitted", i)
		} else {
			require.Equal(t, pgmsg.JobStatePending, r.State, "job %d", i)
		}
	}
	c := newLimitCounter(keys * perKey)
	stop := processWorkers(t, tb, "kl", 3, 4, func(_ context.Context, j *pgmsg.Job) error {
		key := customerOf(j)
		if key == "ignored" {
			key = "c0"
		}
		c.enter(key)
		time.Sleep(time.Duration(j.ID%3) * time.Millisecond) // let others interleave
		c.leave(key)
		return nil
	})
	defer stop()
	enqueueBatch(1)
	enqueueBatch(2)
	c.wait(t)
	stop()
	require.Len(t, c.max, keys)
	for k, m := range c.max {
		require.LessOrEqual(t, m, 2, "key %s ran %d jobs at once", k, m)
	}
	st, err := tb.client.QueueStats(tb.ctx, "kl")
	require.NoError(t, err)
	require.Zero(t, st.Pending)
	ks, err := tb.client.ListLimitKeys(tb.ctx, "kl", nil)
	require.NoError(t, err)
	require.Empty(t, ks)
}

// A key at its limit blocks only its own jobs: with one job of a hot key
// stuck in its handler, the other keys' jobs all run, and so do jobs
// without a key; the hot key's next job runs once the stuck one finishes.
// A queue-wide MaxRunning applies beside the per-key limit.
func TestKeyLimitOtherKeysNotBlocked(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "kb", pgmsg.QueueConfig{KeyLimit: 1, MaxRunning: 3})
	var ps []pgmsg.EnqueueParams
	for i := 0; i < 3; i++ {
		ps = append(ps, pgmsg.EnqueueParams{Payload: []byte("hot"), LimitKey: "hot"})
	}
	for k := 0; k < 5; k++ {
		for i := 0; i < 4; i++ {
			ps = append(ps, pgmsg.EnqueueParams{Payload: []byte(fmt.Sprintf("k%d", k)), LimitKey: fmt.Sprintf("k%d", k)})
		}
	}
	for i := 0; i < 4; i++ {
		ps = append(ps, pgmsg.EnqueueParams{Payload: []byte("plain")})
	}
	_, err := tb.client.EnqueueMany(tb.ctx, "kb", ps, nil)
	require.NoError(t, err)
	release := make(chan struct{})
	var once sync.Once
	c := newLimitCounter(len(ps) - 3) // all but the stuck hot job and the two behind it
	var stuck []int64
	var mu sync.Mutex
	start := time.Now()
	stop := processWorkers(t, tb, "kb", 3, 4, func(ctx context.Context, j *pgmsg.Job) error {
		key := string(j.Payload)
		c.enter(key)
		defer c.leave(key)
		if key == "hot" {
			mu.Lock()
			stuck = append(stuck, j.ID)
			first := len(stuck) == 1
			mu.Unlock()
			if first {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
		}
		return nil
	})
	defer stop()
	c.wait(t) // every other key's jobs and the plain ones ran past the stuck hot job
	mu.Lock()
	require.Len(t, stuck, 1, "the hot key's other jobs wait")
	mu.Unlock()
	t.Logf("others done after %s", time.Since(start))
	// The other keys' last completions may still be committing.
	require.Eventually(t, func() bool {
		ks, err := tb.client.ListLimitKeys(tb.ctx, "kb", nil)
		require.NoError(t, err)
		return len(ks) == 1 && *ks[0] == pgmsg.LimitKey{Key: "hot", Running: 1, Pending: 2}
	}, 30*time.Second, 10*time.Millisecond)
	c.mu.Lock()
	c.total += 3
	c.allDone = make(chan struct{})
	c.mu.Unlock()
	once.Do(func() { close(release) })
	c.wait(t)
	stop()
	for k, m := range c.max {
		if k != "plain" {
			require.Equal(t, 1, m, "key %s", k)
		}
	}
	require.LessOrEqual(t, c.allMax, 3, "the queue's MaxRunning holds beside the key limit")
}

// A job leaves its key's place when it completes, is cancelled, goes dead
// (failed for good, or rescued out of attempts), and the next pending job
// of the key is admitted; a retry keeps the place; a requeued dead job
// waits when its key is full; raising or removing the limit admits the
// pending jobs it now allows.
func TestKeyLimitReleases(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "kr", pgmsg.QueueConfig{KeyLimit: 1, MaxAttempts: 2})
	enq := func(key string) int64 {
		t.Helper()
		r, err := tb.client.Enqueue(tb.ctx, "kr", pgmsg.EnqueueParams{LimitKey: key}, nil)
		require.NoError(t, err)
		return r.ID
	}
	ids := make([]int64, 8)
	for i := range ids {
		ids[i] = enq("k")
	}
	for _, id := range ids[1:] {
		require.Equal(t, pgmsg.JobStatePending, tb.jobState(t, id))
	}
	// Completed.
	require.NoError(t, tb.client.Complete(tb.ctx, tb.claimOne(t, "kr", ids[0])))
	require.Equal(t, pgmsg.JobStateAvailable, tb.jobState(t, ids[1]))
	// A retry keeps the place; dead releases it.
	res, err := tb.client.Fail(tb.ctx, tb.claimOne(t, "kr", ids[1]), errors.New("again"), &pgmsg.FailOpts{RetryIn: time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateRetrying, res.State)
	require.Equal(t, pgmsg.JobStatePending, tb.jobState(t, ids[2]))
	j := tb.claimOneEventually(t, "kr", ids[1])
	_, err = tb.client.Fail(tb.ctx, j, errors.New("boom"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateAvailable, tb.jobState(t, ids[2]), "a dead job leaves its place")
	// Cancelled while running.
	j = tb.claimOne(t, "kr", ids[2])
	ok, err := tb.client.CancelJob(tb.ctx, j.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, pgmsg.JobStateAvailable, tb.jobState(t, ids[3]), "a cancelled job leaves its place")
	// Rescued: the lease expired; the job runs again in its place, then
	// out of attempts goes dead and lets the next in.
	_, err = tb.client.ClaimJobs(tb.ctx, "kr", &pgmsg.ClaimJobsOpts{Max: 10, Lease: time.Millisecond})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // past the lease; nothing depends on how far
	n, err := tb.client.RescueJobs(tb.ctx, "kr")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, pgmsg.JobStatePending, tb.jobState(t, ids[4]), "a rescued job keeps its place to run again")
	_, err = tb.client.ClaimJobs(tb.ctx, "kr", &pgmsg.ClaimJobsOpts{Max: 10, Lease: time.Millisecond})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	n, err = tb.client.RescueJobs(tb.ctx, "kr")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, pgmsg.JobStateDead, tb.jobState(t, ids[3]))
	require.Equal(t, pgmsg.JobStateAvailable, tb.jobState(t, ids[4]), "rescued out of attempts, it leaves its place")
	// A dead job requeued while its key is full waits.
	rq, err := tb.client.RequeueDeadJobs(tb.ctx, "kr", &pgmsg.DeadJobsOpts{IDs: []int64{ids[1]}})
	require.NoError(t, err)
	require.Equal(t, int64(1), rq)
	require.Equal(t, pgmsg.JobStatePending, tb.jobState(t, ids[1]))
	// Raising the limit admits at once; removing it admits the rest.
	_, err = tb.client.UpdateQueue(tb.ctx, "kr", pgmsg.QueueConfig{KeyLimit: 3})
	require.NoError(t, err)
	ks, err := tb.client.ListLimitKeys(tb.ctx, "kr", nil)
	require.NoError(t, err)
	require.Equal(t, []*pgmsg.LimitKey{{Key: "k", Waiting: 3, Pending: 2}}, ks)
	require.Equal(t, pgmsg.JobStateAvailable, tb.jobState(t, ids[1]), "admitted in id order")
	q, err := tb.client.UpdateQueue(tb.ctx, "kr", pgmsg.QueueConfig{KeyLimit: pgmsg.QueueKeyLimitNone})
	require.NoError(t, err)
	require.Zero(t, q.KeyLimit)
	st, err := tb.client.QueueStats(tb.ctx, "kr")
	require.NoError(t, err)
	require.Zero(t, st.Pending)
	require.Equal(t, int64(5), st.Available)
}

// claimOneEventually claims want once it is due (a retry's short backoff).
func (tb *testBundle) claimOneEventually(t *testing.T, queue string, want int64) *pgmsg.Job {
	t.Helper()
	for i := 0; i < 500; i++ {
		jobs, err := tb.client.ClaimJobs(tb.ctx, queue, &pgmsg.ClaimJobsOpts{Max: 10})
		require.NoError(t, err)
		if len(jobs) > 0 {
			require.Len(t, jobs, 1)
			require.Equal(t, want, jobs[0].ID)
			return jobs[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("job %d never became claimable", want)
	return nil
}

// Bad per-key limit input is refused with a stable code in Go and SQL and
// writes nothing: a job without its key (ErrLimitKeyMissing, PM113), a
// key for a queue without a limit, a limit below 1, a key field without a
// limit, a job with a sequence key and a limit key (ErrInvalidArgument,
// PM004).
func TestKeyLimitBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "kf", pgmsg.QueueConfig{KeyLimit: 1, KeyField: "customer_id"})
	tb.queue(t, "kn", pgmsg.QueueConfig{})
	for _, p := range []pgmsg.EnqueueParams{
		{Payload: []byte(`{"other": 1}`)},
		{Payload: []byte(`{"customer_id": null}`)},
		{Payload: []byte(`{"customer_id": ""}`)},
		{Payload: []byte(`not json`)},
		{Payload: []byte(`[1, 2]`)},
	} {
		_, err := tb.client.EnqueueMany(tb.ctx, "kf", []pgmsg.EnqueueParams{{Payload: []byte(`{"customer_id": 7}`)}, p}, nil)
		require.ErrorIs(t, err, pgmsg.ErrLimitKeyMissing, "%s", p.Payload)
		require.Contains(t, err.Error(), "customer_id")
	}
	long := strings.Repeat("k", pgmsg.LimitKeyMaxBytes+1)
	for _, c := range []struct {
		queue string
		p     pgmsg.EnqueueParams
	}{
		{"kn", pgmsg.EnqueueParams{LimitKey: "a"}},
		{"kf", pgmsg.EnqueueParams{LimitKey: long}},
		{"kf", pgmsg.EnqueueParams{LimitKey: "a", SequenceKey: "s"}},
		{"kf", pgmsg.EnqueueParams{Payload: []byte(`{"customer_id": 1}`), SequenceKey: "s"}},
		{"kf", pgmsg.EnqueueParams{Payload: []byte(`{"customer_id": "` + long + `"}`)}},
	} {
		_, err := tb.client.Enqueue(tb.ctx, c.queue, c.p, nil)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%+v", c)
	}
	for _, cfg := range []pgmsg.QueueConfig{{KeyLimit: -5}, {KeyField: "customer_id"}, {KeyField: long}} {
		_, err := tb.client.CreateQueue(tb.ctx, "bad", cfg)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "%+v", cfg)
	}
	_, err := tb.client.ListLimitKeys(tb.ctx, "kf", &pgmsg.ListLimitKeysOpts{Limit: 10001})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.ListLimitKeys(tb.ctx, "nope", nil)
	require.ErrorIs(t, err, pgmsg.ErrUnknownQueue)

	s := pgx.Identifier{tb.Schema}.Sanitize()
	for q, code := range map[string]string{
		`SELECT * FROM ` + s + `.enqueue('kf', '{"x": 1}')`:                                               "PM113",
		`SELECT * FROM ` + s + `.enqueue('kf', '\xff')`:                                                   "PM113",
		`SELECT * FROM ` + s + `.enqueue('kn', 'x', p_limit_key => 'a')`:                                  "PM004",
		`SELECT * FROM ` + s + `.enqueue('kf', 'x', p_limit_key => '')`:                                   "PM004",
		`SELECT * FROM ` + s + `.enqueue('kf', 'x', p_limit_key => 'a', p_sequence_key => 'b')`:           "PM004",
		`SELECT * FROM ` + s + `.enqueue_many('kf', ARRAY['x','y']::bytea[], p_limit_keys => ARRAY['a'])`: "PM113",
		`SELECT * FROM ` + s + `.queue_create('bad', p_key_limit => -1)`:                                  "PM004",
		`SELECT * FROM ` + s + `.queue_create('bad', p_key_field => 'f')`:                                 "PM004",
		`SELECT * FROM ` + s + `.queue_update('kn', p_key_field => 'f')`:                                  "PM004",
		`SELECT * FROM ` + s + `.key_limit_list('kf', p_limit => 0)`:                                      "PM004",
	} {
		_, err := tb.Pool.Exec(tb.ctx, q)
		require.Equal(t, code, sqlState(err), q)
	}
	for _, q := range []string{"kf", "kn"} {
		st, err := tb.client.QueueStats(tb.ctx, q)
		require.NoError(t, err)
		require.Zero(t, st.Available+st.Pending, "a refused batch writes nothing")
	}
}

// TestJobKeysReported: GetJob, ListJobs (either order) and ListDeadJobs
// return a job's sequence and limit keys, the limit key taken from the
// payload's field too; the archive keeps the sequence key only.
func TestJobKeysReported(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "jk", pgmsg.QueueConfig{KeyLimit: 1, KeyField: "tenant", MaxAttempts: 1})
	tb.queue(t, "js", pgmsg.QueueConfig{MaxAttempts: 1})
	given, err := tb.client.Enqueue(tb.ctx, "jk", pgmsg.EnqueueParams{LimitKey: "acme"}, nil)
	require.NoError(t, err)
	field, err := tb.client.Enqueue(tb.ctx, "jk", pgmsg.EnqueueParams{Payload: []byte(`{"tenant":"globex"}`)}, nil)
	require.NoError(t, err)
	seq := tb.enqueueN(t, "js", 2, func(int) pgmsg.EnqueueParams { return pgmsg.EnqueueParams{SequenceKey: "s1"} })
	plain, err := tb.client.Enqueue(tb.ctx, "js", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)

	keys := func(j *pgmsg.Job) [2]string { return [2]string{j.SequenceKey, j.LimitKey} }
	get := func(id int64) *pgmsg.Job {
		t.Helper()
		j, err := tb.client.GetJob(tb.ctx, id)
		require.NoError(t, err)
		return j
	}
	require.Equal(t, [2]string{"", "acme"}, keys(get(given.ID)))
	require.Equal(t, [2]string{"", "globex"}, keys(get(field.ID)))
	require.Equal(t, [2]string{"s1", ""}, keys(get(seq[0])))
	require.Equal(t, pgmsg.JobStatePending, get(seq[1]).State)
	require.Equal(t, [2]string{"s1", ""}, keys(get(seq[1])))
	require.Equal(t, [2]string{"", ""}, keys(get(plain.ID)))

	for _, order := range []pgmsg.JobOrder{pgmsg.JobOrderAsc, pgmsg.JobOrderDesc} {
		list, err := tb.client.ListJobs(tb.ctx, "js", &pgmsg.ListJobsOpts{Order: order})
		require.NoError(t, err)
		var ids []int64
		got := map[int64][2]string{}
		for _, j := range list {
			ids = append(ids, j.ID)
			got[j.ID] = keys(j)
		}
		want := []int64{seq[0], seq[1], plain.ID}
		if order == pgmsg.JobOrderDesc {
			want = []int64{plain.ID, seq[1], seq[0]}
		}
		require.Equal(t, want, ids, "the listing keeps its order")
		require.Equal(t, map[int64][2]string{seq[0]: {"s1", ""}, seq[1]: {"s1", ""}, plain.ID: {"", ""}}, got)
	}
	list, err := tb.client.ListJobs(tb.ctx, "jk", nil)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, [2]string{"", "acme"}, keys(list[0]))
	require.Equal(t, [2]string{"", "globex"}, keys(list[1]))

	// Archived: the sequence key stays, the limit key does not.
	claimed, err := tb.client.ClaimJobs(tb.ctx, "js", &pgmsg.ClaimJobsOpts{Max: 3})
	require.NoError(t, err)
	require.Len(t, claimed, 2, "the sequence's head and the plain job")
	for _, j := range claimed {
		require.NoError(t, tb.client.Complete(tb.ctx, j))
	}
	require.Equal(t, pgmsg.JobStateCompleted, get(seq[0]).State)
	require.Equal(t, [2]string{"s1", ""}, keys(get(seq[0])))
	claimed, err = tb.client.ClaimJobs(tb.ctx, "jk", &pgmsg.ClaimJobsOpts{Max: 2})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	byID := map[int64]*pgmsg.Job{claimed[0].ID: claimed[0], claimed[1].ID: claimed[1]}
	require.Equal(t, [2]string{"", "acme"}, keys(get(given.ID)), "running")
	require.NoError(t, tb.client.Complete(tb.ctx, byID[given.ID]))
	require.Equal(t, [2]string{"", ""}, keys(get(given.ID)))

	// Dead: still live, both kept.
	_, err = tb.client.Fail(tb.ctx, byID[field.ID], errors.New("boom"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)
	dead, err := tb.client.ListDeadJobs(tb.ctx, "jk", nil)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, [2]string{"", "globex"}, keys(dead[0]))
}
