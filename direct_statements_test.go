package pgmsg

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/store"
)

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

// Through Consumer.Run (one member, so it owns the topic's only
// partition and claims it directly): every record once, in order, across
// the segment boundary, with keys, empty values and headers intact.
// (internal/logread's TestClaimFetch tests the direct claims that read
// their records.)
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
	// That these claims learn the partition's segment is internal/logread's
	// TestClaimLearnsSegment.
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
