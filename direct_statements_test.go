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

// The consumer's direct claim statements (internal/store/log_claim.go) against the
// states claim_range() distinguishes: they claim and commit as it does, and
// hand every case that needs an error explained back to it.
func TestClaimDirect(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	c, err := NewClient(b.Pool, &Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.CreateTopic(ctx, "t", TopicConfig{Partitions: 2, SegmentRecords: 64})
	require.NoError(t, err)
	// Member m joins group g and owns both partitions.
	_, err = b.Pool.Exec(ctx, `SELECT * FROM `+pgx.Identifier{b.Schema}.Sanitize()+`.group_heartbeat('t', 'g', 'm')`)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		require.NoError(t, c.Publish(ctx, []*Record{{Topic: "t", Partition: 0, Value: []byte{byte(i)}}},
			&PublishOpts{ManualPartition: true}))
	}
	params := func(partition int32, member string) *store.ClaimParams {
		return &store.ClaimParams{Topic: "t", Group: "g", MaxRecords: 2, Lease: 30 * time.Second,
			Partition: &partition, Member: member, RequireOwner: true, Async: true}
	}
	cursor := func() (next int64, claimed bool) {
		t.Helper()
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT next_offset, claim_end IS NOT NULL FROM `+
			pgx.Identifier{b.Schema, "group_cursor"}.Sanitize()+` WHERE group_name = 'g' AND partition = 0`).Scan(&next, &claimed))
		return next, claimed
	}

	p := params(0, "m")
	require.True(t, canClaimDirect(p))
	res, err := c.claimDirect(ctx, c.pool, p, "")
	require.NoError(t, err)
	require.False(t, res.fallback)
	require.NotNil(t, res.row)
	require.Equal(t, int64(0), res.row.FirstOffset)
	require.Equal(t, int64(1), res.row.LastOffset, "max records 2")
	require.NotEmpty(t, res.row.Relname, "the segment that holds the range")
	require.Greater(t, res.row.ClaimEpoch, int64(0))
	first := res.row

	// The partition is claimed: nothing to claim, and nothing to explain.
	res, err = c.claimDirect(ctx, c.pool, params(0, "m"), "")
	require.NoError(t, err)
	require.Nil(t, res.row)
	require.False(t, res.fallback)

	// Commit the first claim and claim the rest in one statement.
	p = params(0, "m")
	p.Commit, p.CommitPartition, p.CommitEpoch = true, 0, first.ClaimEpoch
	require.True(t, canClaimDirect(p))
	res, err = c.claimDirect(ctx, c.pool, p, "")
	require.NoError(t, err)
	require.True(t, res.committed)
	require.NotNil(t, res.row)
	require.Equal(t, int64(2), res.row.FirstOffset)
	require.Equal(t, int64(2), res.row.LastOffset)
	require.NotEqual(t, first.ClaimEpoch, res.row.ClaimEpoch)
	next, claimed := cursor()
	require.Equal(t, int64(2), next)
	require.True(t, claimed)
	second := res.row

	// A commit of a claim no longer held: no row, claim_range must raise
	// the error; nothing was written.
	p.CommitEpoch = first.ClaimEpoch
	res, err = c.claimDirect(ctx, c.pool, p, "")
	require.NoError(t, err)
	require.True(t, res.fallback)
	require.False(t, res.committed)
	next, _ = cursor()
	require.Equal(t, int64(2), next)

	// Committing the last claim with nothing more to read commits only.
	p.CommitEpoch = second.ClaimEpoch
	res, err = c.claimDirect(ctx, c.pool, p, "")
	require.NoError(t, err)
	require.False(t, res.fallback)
	require.True(t, res.committed)
	require.Nil(t, res.row)
	next, claimed = cursor()
	require.Equal(t, int64(3), next)
	require.False(t, claimed)

	// Another member's partition, and a group with no cursor row: both go
	// to claim_range, which says why (ErrNotMember, or creates the group).
	require.NoError(t, c.Publish(ctx, []*Record{{Topic: "t", Partition: 1, Value: []byte("x")}}, &PublishOpts{ManualPartition: true}))
	res, err = c.claimDirect(ctx, c.pool, params(1, "stranger"), "")
	require.NoError(t, err)
	require.True(t, res.fallback)
	p = params(1, "m")
	p.Group = "other"
	res, err = c.claimDirect(ctx, c.pool, p, "")
	require.NoError(t, err)
	require.True(t, res.fallback)

	// Cases outside the direct statements' reach.
	p = params(0, "m")
	p.MaxBytes = 10
	require.False(t, canClaimDirect(p), "byte caps")
	p = params(0, "m")
	p.Partition = nil
	require.False(t, canClaimDirect(p), "any partition")
	p = params(0, "m")
	p.Commit, p.CommitPartition, p.CommitEpoch = true, 1, 1
	require.False(t, canClaimDirect(p), "a commit of another partition")
}

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
	batch := &partitionBatch{topic: "t", partition: 0, records: recs}
	params, err := publishParams(batch)
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
	batch = &partitionBatch{topic: "t", partition: 0, records: big}
	params, err = publishParams(batch)
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
	batch = &partitionBatch{topic: "t", partition: 0, records: recs[:1]}
	params, err = publishParams(batch)
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

// A direct claim that reads its records in the same statement
// (claimFetchSQL) returns what readRange would, in order, with keys, empty
// values and headers intact; records read from a table that is not the
// claim's segment are dropped; a table dropped since (retention) makes
// claimRow claim again without reading; the segment learnt is the next
// claim's.
func TestClaimFetch(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	c, err := NewClient(b.Pool, &Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.CreateTopic(ctx, "t", TopicConfig{Partitions: 2, SegmentRecords: 64})
	require.NoError(t, err)
	_, err = b.Pool.Exec(ctx, `SELECT * FROM `+pgx.Identifier{b.Schema}.Sanitize()+`.group_heartbeat('t', 'g', 'm')`)
	require.NoError(t, err)
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
	require.NoError(t, c.Publish(ctx, batch, &PublishOpts{ManualPartition: true}))
	require.NoError(t, c.Publish(ctx, []*Record{{Topic: "t", Partition: 1, Value: []byte("p1")}}, &PublishOpts{ManualPartition: true}))
	params := func(max int32, commit int64) *store.ClaimParams {
		partition := int32(0)
		p := &store.ClaimParams{Topic: "t", Group: "g", MaxRecords: max, Lease: 30 * time.Second,
			Partition: &partition, Member: "m", RequireOwner: true, Async: true}
		if commit != 0 {
			p.Commit, p.CommitPartition, p.CommitEpoch = true, 0, commit
		}
		return p
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

	// The first claim learns the segment.
	res, err := c.claimDirect(ctx, c.pool, params(10, 0), "")
	require.NoError(t, err)
	require.NotNil(t, res.row)
	require.False(t, res.fetched)
	seg := res.row.Relname
	require.NotEmpty(t, seg)

	// Commit it and claim the next ten, reading them in the same statement.
	res, err = c.claimDirect(ctx, c.pool, params(10, res.row.ClaimEpoch), seg)
	require.NoError(t, err)
	require.True(t, res.committed)
	require.True(t, res.fetched)
	require.Equal(t, int64(10), res.row.FirstOffset)
	check(res.records, 10, 19)

	// Read from another table (partition 1's segment): not the claim's
	// records, dropped.
	var other string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT relname FROM `+pgx.Identifier{b.Schema, "segment"}.Sanitize()+
		` WHERE partition = 1 ORDER BY start_offset LIMIT 1`).Scan(&other))
	res, err = c.claimDirect(ctx, c.pool, params(10, res.row.ClaimEpoch), other)
	require.NoError(t, err)
	require.NotNil(t, res.row)
	require.False(t, res.fetched)
	require.Nil(t, res.records)
	require.Equal(t, int64(20), res.row.FirstOffset)

	// Through claimRow: a cached table that no longer exists is forgotten
	// and the claim made without it; the claim's own segment is learnt.
	key := topicPartition{"t", 0}
	c.claimSegments.Store(key, "record_dropped_since")
	row, recs, _, err := c.claimRow(ctx, c.pool, params(10, res.row.ClaimEpoch))
	require.NoError(t, err)
	require.Nil(t, recs)
	require.Equal(t, int64(30), row.FirstOffset)
	v, ok := c.claimSegments.Load(key)
	require.True(t, ok)
	require.Equal(t, seg, v)
	row, recs, _, err = c.claimRow(ctx, c.pool, params(10, row.ClaimEpoch))
	require.NoError(t, err)
	require.Equal(t, int64(40), row.FirstOffset)
	check(recs, 40, 49)

	// A claim that reaches into the next segment (offsets 64 on): the
	// segment learnt does not hold it, the records come from readRange.
	row, recs, _, err = c.claimRow(ctx, c.pool, params(20, row.ClaimEpoch))
	require.NoError(t, err)
	require.Equal(t, int64(50), row.FirstOffset)
	require.Equal(t, int64(69), row.LastOffset)
	require.Nil(t, recs)
	recs, err = c.readRange(ctx, c.pool, "t", row)
	require.NoError(t, err)
	check(recs, 50, 69)
	row, recs, _, err = c.claimRow(ctx, c.pool, params(100, row.ClaimEpoch))
	require.NoError(t, err)
	require.Equal(t, int64(70), row.FirstOffset)
	require.Nil(t, recs, "the segment of offsets 64 on is learnt by this claim")
	row, _, _, err = c.claimRow(ctx, c.pool, params(100, row.ClaimEpoch))
	require.NoError(t, err)
	require.Nil(t, row, "all read")

	// Through Consumer.Run (one member, so it owns the topic's only
	// partition and claims it directly): every record once, in order,
	// across the segment boundary.
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
	n := 0
	c.claimSegments.Range(func(k, _ any) bool {
		n += map[bool]int{true: 1}[k.(topicPartition).topic == "one"]
		return true
	})
	require.Equal(t, 1, n, "the consumer's claims learnt the partition's segment")
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
