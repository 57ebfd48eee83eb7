package pgmsg

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/logpublish"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/store"
)

// The direct publish statement stores what publish() stores, and leaves to
// it the topics and batches it does not cover: backpressure settings and a
// batch reaching past the segments created so far.
func TestPublishDirect(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	c, err := NewClient(b.Pool, &Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.CreateTopic(ctx, "t", TopicConfig{Partitions: 1, SegmentRecords: 64})
	require.NoError(t, err)
	ts := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	recs := []*Record{
		{Topic: "t", Value: []byte("a"), Key: []byte("k"), Headers: map[string][]byte{"h": []byte("v")}, Timestamp: ts},
		{Topic: "t", Value: nil},
	}
	batch := &logpublish.Batch{Topic: "t", Partition: 0, Records: recs}
	params, err := c.publisher.Params(batch)
	require.NoError(t, err)
	row, err := c.store.PublishDirect(ctx, c.pool, &params)
	require.NoError(t, err)
	require.NotNil(t, row)
	require.Equal(t, int64(0), row.BaseOffset)

	got, err := c.Fetch(ctx, "t", 0, 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []byte("k"), got[0].Key)
	require.Equal(t, []byte("a"), got[0].Value)
	require.Equal(t, map[string][]byte{"h": []byte("v")}, got[0].Headers)
	require.True(t, got[0].Timestamp.Equal(ts))
	require.Nil(t, got[1].Value)
	require.True(t, got[1].Timestamp.Equal(row.Timestamp), "the publish time")

	// A batch past the segments created so far (64 records each, a few
	// ahead): no row; publish() creates the segments.
	big := make([]*Record, 300)
	for i := range big {
		big[i] = &Record{Topic: "t", Value: []byte("x")}
	}
	batch = &logpublish.Batch{Topic: "t", Partition: 0, Records: big}
	params, err = c.publisher.Params(batch)
	require.NoError(t, err)
	row, err = c.store.PublishDirect(ctx, c.pool, &params)
	require.NoError(t, err)
	require.Nil(t, row)
	require.NoError(t, c.Publish(ctx, big, nil))
	require.Equal(t, int64(2), big[0].Offset, "gapless after the refused direct statement")

	// A topic with backpressure settings: no row, even with stale metadata.
	_, err = b.Pool.Exec(ctx, `UPDATE `+pgx.Identifier{b.Schema, "topic"}.Sanitize()+
		` SET config = config || '{"max_lag_records": 1000000}' WHERE name = 't'`)
	require.NoError(t, err)
	batch = &logpublish.Batch{Topic: "t", Partition: 0, Records: recs[:1]}
	params, err = c.publisher.Params(batch)
	require.NoError(t, err)
	row, err = c.store.PublishDirect(ctx, c.pool, &params)
	require.NoError(t, err)
	require.Nil(t, row)
}

// The direct enqueue statement stores what enqueue_many() stores and
// leaves to it the queues and batches it does not cover.
func TestEnqueueDirect(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	c, err := NewClient(b.Pool, &Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	job := func(payload []byte) store.JobParams { return store.JobParams{Payload: payload} }
	arg := func(queue string, jobs ...store.JobParams) *store.JobBatch {
		b := store.NewJobBatch(queue, len(jobs), true)
		for i := range jobs {
			b.Set(i, &jobs[i])
		}
		return &b
	}
	// enqueueDirect returns the direct statement's results, nil when
	// enqueue_many() must enqueue.
	enqueueDirect := func(b *store.JobBatch) ([]*EnqueueResult, error) {
		out := make([]*EnqueueResult, b.Len())
		ok, err := c.store.JobEnqueueDirect(ctx, c.pool, b, func(i int, r store.JobEnqueued) {
			out[i] = &EnqueueResult{ID: r.ID, Duplicate: r.Duplicate, State: JobState(r.State), RunAt: r.RunAt}
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

	_, err = c.CreateQueue(ctx, "q", QueueConfig{MaxAttempts: 3, MaxPayloadBytes: 10})
	require.NoError(t, err)
	a := arg("q", store.JobParams{Payload: []byte("a"), Kind: "k", Priority: 5},
		store.JobParams{Payload: []byte("b"), Delay: time.Hour, MaxAttempts: 7})
	before := time.Now()
	out, err = enqueueDirect(a)
	require.NoError(t, err)
	require.Len(t, out, 2)
	require.Less(t, out[0].ID, out[1].ID, "input order")
	require.Equal(t, JobStateAvailable, out[0].State)
	require.Equal(t, JobStateScheduled, out[1].State)
	require.WithinDuration(t, before.Add(time.Hour), out[1].RunAt, time.Minute)
	j0, err := c.GetJob(ctx, out[0].ID)
	require.NoError(t, err)
	require.Equal(t, "k", j0.Kind)
	require.Equal(t, 5, j0.Priority)
	require.Equal(t, 3, j0.MaxAttempts, "the queue's")
	require.Equal(t, []byte("a"), j0.Payload)
	j1, err := c.GetJob(ctx, out[1].ID)
	require.NoError(t, err)
	require.Equal(t, "", j1.Kind)
	require.Equal(t, 7, j1.MaxAttempts)

	// A payload over the queue's limit: nothing inserted, enqueue_many
	// raises PM103.
	out, err = enqueueDirect(arg("q", job([]byte("ok")), job(make([]byte, 11))))
	require.NoError(t, err)
	require.Nil(t, out)
	_, err = c.EnqueueMany(ctx, "q", []EnqueueParams{{Payload: []byte("ok")}, {Payload: make([]byte, 11)}}, nil)
	require.ErrorIs(t, err, ErrPayloadTooLarge)
	var n int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{b.Schema, "job"}.Sanitize()).Scan(&n))
	require.Equal(t, 2, n)

	// A queue with a max_depth: enqueue_many checks it.
	_, err = c.CreateQueue(ctx, "capped", QueueConfig{MaxDepth: 5})
	require.NoError(t, err)
	out, err = enqueueDirect(arg("capped", job([]byte("a"))))
	require.NoError(t, err)
	require.Nil(t, out)
}

// Claimed records keep the difference between an empty key or value and
// none (NULL): read from the segment's raw binary rows, an empty value at
// the start of a claim came back as nil (found by TestHTTPProperty).
func TestClaimKeepsEmptyApartFromNull(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	c, err := NewClient(b.Pool, &Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.CreateTopic(ctx, "t", TopicConfig{Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, c.Publish(ctx, []*Record{
		{Topic: "t", Key: []byte{}, Value: []byte{}},
		{Topic: "t", Value: nil},
		{Topic: "t", Key: []byte("k"), Value: []byte("v")},
	}, nil))
	cl, err := c.Claim(ctx, "t", "g", &ClaimOpts{MaxRecords: 10})
	require.NoError(t, err)
	require.Len(t, cl.Records, 3)
	require.NotNil(t, cl.Records[0].Key, "empty key")
	require.NotNil(t, cl.Records[0].Value, "empty value")
	require.Empty(t, cl.Records[0].Value)
	require.Nil(t, cl.Records[1].Key)
	require.Nil(t, cl.Records[1].Value, "no value")
	require.Equal(t, []byte("v"), cl.Records[2].Value)
}

// The worker's direct claim statement (internal/store/job_claim.go) claims as
// job_claim() does: claim order across priorities from the client's
// position, jobs behind the position once the positioned reads run short,
// future jobs left alone, the queue's or the given lease, a fresh token per
// job; an unknown queue and the periodic lease probe go to job_claim().
func TestJobClaimDirect(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	c, err := NewClient(b.Pool, &Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.CreateQueue(ctx, "q", QueueConfig{Lease: 40 * time.Second})
	require.NoError(t, err)
	enqueue := func(priority int, runAt time.Time) int64 {
		t.Helper()
		res, err := c.Enqueue(ctx, "q", EnqueueParams{Payload: []byte("p"), Priority: priority, RunAt: runAt}, nil)
		require.NoError(t, err)
		return res.ID
	}
	ids := func(jobs []*Job) []int64 {
		out := make([]int64, len(jobs))
		for i, j := range jobs {
			out[i] = j.ID
		}
		return out
	}
	direct := func(max int, lease time.Duration) []*Job {
		t.Helper()
		jobs, ok, err := c.claimJobsDirect(ctx, "q", &ClaimJobsOpts{Max: max, Lease: lease, Worker: "w"}, true)
		require.NoError(t, err)
		require.True(t, ok, "the direct statement answered")
		return jobs
	}

	a0, a1, a2 := enqueue(0, time.Time{}), enqueue(0, time.Time{}), enqueue(0, time.Time{})
	future := enqueue(5, time.Now().Add(time.Hour))
	// No claim through job_claim() yet: the direct statement does not claim.
	_, ok, err := c.claimJobsDirect(ctx, "q", &ClaimJobsOpts{Max: 1}, true)
	require.NoError(t, err)
	require.False(t, ok)
	jobs, err := c.ClaimJobs(ctx, "q", &ClaimJobsOpts{Max: 1})
	require.NoError(t, err)
	require.Equal(t, []int64{a0}, ids(jobs), "through job_claim()")

	jobs = direct(1, 0)
	require.Equal(t, []int64{a1}, ids(jobs), "after the position")
	j := jobs[0]
	require.Equal(t, JobStateRunning, j.State)
	require.Equal(t, "q", j.Queue)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "w", j.Worker)
	require.Equal(t, []byte("p"), j.Payload)
	require.WithinDuration(t, time.Now().Add(40*time.Second), *j.LeaseExpiresAt, 5*time.Second, "the queue's lease")
	got, err := c.GetJob(ctx, a1)
	require.NoError(t, err)
	require.Equal(t, JobStateRunning, got.State)
	require.Equal(t, j.LeaseToken, got.LeaseToken)
	require.Equal(t, "w", got.Worker)

	// A higher priority is claimed first, then the rest after the
	// position; a job behind the position (run_at in the past, enqueued
	// now) is found by the whole read once the positioned reads run short;
	// the future job stays.
	hi := enqueue(3, time.Time{})
	late := enqueue(0, time.Now().Add(-time.Hour))
	jobs = direct(10, 2*time.Minute)
	require.Equal(t, []int64{hi, a2, late}, ids(jobs))
	require.Len(t, map[int64]bool{jobs[0].LeaseToken: true, jobs[1].LeaseToken: true, jobs[2].LeaseToken: true}, 3)
	for _, j := range jobs {
		require.WithinDuration(t, time.Now().Add(2*time.Minute), *j.LeaseExpiresAt, 5*time.Second, "the given lease")
	}
	require.Empty(t, direct(10, 0))
	got, err = c.GetJob(ctx, future)
	require.NoError(t, err)
	require.Equal(t, JobStateScheduled, got.State)

	// Claimed jobs complete with their tokens (the direct completion).
	res, err := c.CompleteMany(ctx, jobs)
	require.NoError(t, err)
	require.ElementsMatch(t, ids(jobs), res.Completed)
	require.Empty(t, res.NotHeld)
	res, err = c.CompleteMany(ctx, jobs)
	require.NoError(t, err)
	require.Empty(t, res.Completed)
	require.ElementsMatch(t, ids(jobs), res.NotHeld)

	// An unknown queue is job_claim()'s to report.
	require.NoError(t, c.DeleteQueue(ctx, "q", true))
	_, ok, err = c.claimJobsDirect(ctx, "q", &ClaimJobsOpts{Max: 1}, true)
	require.NoError(t, err)
	require.False(t, ok)
	_, err = c.ClaimJobs(ctx, "q", nil)
	require.ErrorIs(t, err, ErrUnknownQueue)

	// A deleted queue's state goes; a name never claimed from gets none.
	require.Nil(t, c.jobClaimState("q", false))
	_, err = c.ClaimJobs(ctx, "never-created", nil)
	require.ErrorIs(t, err, ErrUnknownQueue)
	require.Nil(t, c.jobClaimState("never-created", false))

	// Once jobClaimFullEvery has passed, a claim reads the whole index (no
	// position) and probes for expired leases, once.
	st := c.jobClaimState("q", true)
	st.mu.Lock()
	st.valid, st.id = true, 42
	st.mu.Unlock()
	now := time.Now()
	id, probe, rescue := st.next(now)
	require.False(t, rescue)
	require.False(t, id.Valid, "no position: the whole index")
	require.True(t, probe)
	id, probe, _ = st.next(now.Add(time.Millisecond))
	require.True(t, id.Valid)
	require.Equal(t, int64(42), id.ID)
	require.False(t, probe)
}

// A lease that expired is found by the direct claim's probe, and the next
// claim rescues the job before it claims.
func TestJobClaimDirectProbesExpiredLeases(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	c, err := NewClient(b.Pool, &Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.CreateQueue(ctx, "q", QueueConfig{})
	require.NoError(t, err)
	var ids []int64
	for i := 0; i < 3; i++ {
		res, err := c.Enqueue(ctx, "q", EnqueueParams{Payload: []byte{byte(i)}}, nil)
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}
	// Through job_claim(): a lease that is over at once.
	jobs, err := c.ClaimJobs(ctx, "q", &ClaimJobsOpts{Max: 1, Lease: time.Microsecond})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, ids[0], jobs[0].ID)
	time.Sleep(5 * time.Millisecond)

	st := c.jobClaimState("q", false)
	require.NotNil(t, st)
	st.mu.Lock()
	st.probed = time.Time{} // a probe is due
	st.mu.Unlock()
	jobs, ok, err := c.claimJobsDirect(ctx, "q", &ClaimJobsOpts{Max: 1}, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, jobs, 1, "the claim's own jobs are handed out")
	require.Equal(t, ids[1], jobs[0].ID)
	st.mu.Lock()
	rescue := st.rescue
	st.mu.Unlock()
	require.True(t, rescue, "the probe found the expired lease")

	// The next claim rescues the job first (attempt counted), then claims
	// in order.
	jobs, ok, err = c.claimJobsDirect(ctx, "q", &ClaimJobsOpts{Max: 10}, true)
	require.NoError(t, err)
	require.True(t, ok)
	got := map[int64]int{}
	for _, j := range jobs {
		got[j.ID] = j.Attempt
	}
	require.Equal(t, map[int64]int{ids[0]: 2, ids[2]: 1}, got)
	st.mu.Lock()
	rescue = st.rescue
	st.mu.Unlock()
	require.False(t, rescue)
}

// The direct job claim's settings (plan pinning, asynchronous commit) apply
// to the claim and end with its own transaction: the pool's connection
// keeps the caller's.
func TestJobClaimDirectSettings(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 1})
	c, err := NewClient(b.Pool, &Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.CreateQueue(ctx, "q", QueueConfig{})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err = c.Enqueue(ctx, "q", EnqueueParams{Payload: []byte("p")}, nil)
		require.NoError(t, err)
	}
	settings := func() string {
		var s string
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT current_setting('enable_bitmapscan') || current_setting('enable_seqscan') ||
			current_setting('synchronous_commit')`).Scan(&s))
		return s
	}
	_, err = b.Pool.Exec(ctx, "SET synchronous_commit = on")
	require.NoError(t, err)
	before := settings()
	require.Equal(t, "ononon", before)
	_, err = c.ClaimJobs(ctx, "q", nil) // through job_claim()
	require.NoError(t, err)
	jobs, ok, err := c.claimJobsDirect(ctx, "q", &ClaimJobsOpts{Max: 1}, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, jobs, 1)
	require.Equal(t, before, settings())

	// And they apply to the statement queued after them in the same batch
	// (pgx sends a batch with one Sync: one implicit transaction).
	var bt pgx.Batch
	bt.Queue(store.JobClaimSettingsSQL, true)
	bt.Queue(`SELECT current_setting('enable_bitmapscan') || current_setting('enable_seqscan') || current_setting('synchronous_commit')`)
	br := b.Pool.SendBatch(ctx, &bt)
	_, err = br.Exec()
	require.NoError(t, err)
	var inBatch string
	require.NoError(t, br.QueryRow().Scan(&inBatch))
	require.NoError(t, br.Close())
	require.Equal(t, "offoffoff", inBatch)
	require.Equal(t, before, settings())
}

// Through Consumer.Run (one member, so it owns the topic's only
// partition and claims it directly): every record once, in order, across
// the segment boundary, with keys, empty values and headers intact; the
// consumer's claims learn the partition's segment. (internal/logread's
// TestClaimFetch tests the direct claims that read their records.)
func TestClaimFetchThroughConsumer(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	c, err := NewClient(b.Pool, &Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var batch []*Record
	for i := 0; i < 100; i++ {
		r := &Record{Topic: "t", Partition: 0, Value: []byte(fmt.Sprint(i))}
		switch i % 3 {
		case 0:
			r.Key, r.Value = []byte{}, []byte{}
		case 1:
			r.Key, r.Headers = []byte("k"), map[string][]byte{"h": []byte(fmt.Sprint(i))}
		}
		batch = append(batch, r)
	}
	check := func(recs []*Record, first, last int64) {
		t.Helper()
		require.Len(t, recs, int(last-first+1))
		for i, r := range recs {
			want := batch[first+int64(i)]
			require.Equal(t, first+int64(i), r.Offset)
			require.Equal(t, "t", r.Topic)
			require.Equal(t, int32(0), r.Partition)
			require.Equal(t, want.Key, r.Key, "offset %d", r.Offset)
			require.Equal(t, want.Value, r.Value, "offset %d", r.Offset)
			require.Equal(t, len(want.Headers), len(r.Headers), "offset %d", r.Offset)
			for k, v := range want.Headers {
				require.Equal(t, v, r.Headers[k])
			}
			require.False(t, r.Timestamp.IsZero())
		}
	}

	_, err = c.CreateTopic(ctx, "one", TopicConfig{Partitions: 1, SegmentRecords: 64})
	require.NoError(t, err)
	for _, r := range batch {
		r.Topic = "one"
	}
	require.NoError(t, c.Publish(ctx, batch, nil))
	cn, err := c.NewConsumer("one", "g", &ConsumerOpts{Claim: ClaimOpts{MaxRecords: 7}})
	require.NoError(t, err)
	t.Cleanup(cn.Close)
	var got []*Record
	runCtx, stop := context.WithCancel(ctx)
	err = cn.Run(runCtx, func(_ context.Context, cl *Claim) error {
		got = append(got, cl.Records...)
		if len(got) >= len(batch) {
			stop()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	for _, r := range got {
		r.Topic = "t" // as check expects
	}
	check(got, 0, 99)
	_, ok := c.reader.CachedSegment("one", 0)
	require.True(t, ok, "the consumer's claims learnt the partition's segment")
}

// The client's heartbeat commits asynchronously only when the group
// existed before it: a heartbeat that creates the group (at its start
// position) commits synchronously, as a claim that creates one does.
func TestHeartbeatAsyncUnlessCreating(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	c, err := NewClient(b.Pool, &Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.CreateTopic(ctx, "t", TopicConfig{Partitions: 2})
	require.NoError(t, err)
	hb := func(member string) *store.Heartbeat {
		t.Helper()
		row, err := c.store.GroupHeartbeat(ctx, c.pool, "t", "g", member, 10*time.Second, PositionLatest)
		require.NoError(t, err)
		return row
	}
	first := hb("m1")
	require.True(t, first.Joined)
	require.Empty(t, first.Async, "the heartbeat that created the group commits synchronously")
	second := hb("m2")
	require.True(t, second.Joined)
	require.Equal(t, "off", second.Async)
	require.Equal(t, "off", hb("m1").Async)
}
