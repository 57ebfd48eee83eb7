package logread

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// The engine's statements against PostgreSQL: the direct claims and the
// reads of what they claimed. Claims through the root's Client (defaults,
// Consumer.Run, read replicas, tracing) are tested in the root.

func TestMain(m *testing.M) { pgtest.Main(m) }

// leaseMax is the root's durationMax, the SQL API's longest lease.
const leaseMax = 366 * 24 * time.Hour

// testReader is a Reader on b's schema, without read replicas, and the
// helpers that set its topics up through the store.
type testReader struct {
	*Reader
	t   *testing.T
	ctx context.Context
	b   *pgtest.Bundle
}

// newTestReader makes a schema of its own for t (at most 4 connections)
// and a reader on it, with a context that ends after a minute.
func newTestReader(t *testing.T) *testReader {
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	r := New(&Config{Store: store.New(b.Schema), Primary: b.Pool, LeaseMax: leaseMax,
		Logger: slog.Default()})
	return &testReader{Reader: r, t: t, ctx: ctx, b: b}
}

// createTopic creates topic with partitions and, when not 0, segmentRecords.
func (r *testReader) createTopic(topic string, partitions int32, segmentRecords int64) {
	r.t.Helper()
	settings := map[string]any{}
	if segmentRecords != 0 {
		settings["segment_records"] = segmentRecords
	}
	raw, err := json.Marshal(settings)
	require.NoError(r.t, err)
	_, err = r.store.TopicCreate(r.ctx, r.b.Pool, topic, partitions, raw)
	require.NoError(r.t, err)
}

// join makes member a member of topic's group (group_heartbeat), which
// gives it every partition while it is the only one.
func (r *testReader) join(topic, group, member string) {
	r.t.Helper()
	_, err := r.b.Pool.Exec(r.ctx, `SELECT * FROM `+pgx.Identifier{r.b.Schema}.Sanitize()+`.group_heartbeat($1, $2, $3)`,
		topic, group, member)
	require.NoError(r.t, err)
}

// publish appends recs to partition (each record's Topic is topic), with
// publish().
func (r *testReader) publish(topic string, partition int32, recs []*pgmsgtype.Record) {
	r.t.Helper()
	b := store.NewPublishBatch(topic, partition, len(recs))
	for i, rec := range recs {
		b.Values[i] = rec.Value
		b.SetKey(i, rec.Key)
		if len(rec.Headers) > 0 {
			h, err := store.EncodeHeaders(rec.Headers)
			require.NoError(r.t, err)
			b.SetHeaders(i, h)
		}
	}
	_, err := r.store.Publish(r.ctx, r.b.Pool, &b, false)
	require.NoError(r.t, err)
}

// The consumer's direct claim statements (internal/store/log_claim.go) against the
// states claim_range() distinguishes: they claim and commit as it does, and
// hand every case that needs an error explained back to it.
func TestClaimDirect(t *testing.T) {
	t.Parallel()
	c := newTestReader(t)
	b, ctx := c.b, c.ctx
	c.createTopic("t", 2, 64)
	// Member m joins group g and owns both partitions.
	c.join("t", "g", "m")
	for i := 0; i < 3; i++ {
		c.publish("t", 0, []*pgmsgtype.Record{{Topic: "t", Partition: 0, Value: []byte{byte(i)}}})
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
	require.True(t, c.canClaimDirect(p))
	res, err := c.claimDirect(ctx, b.Pool, p, "")
	require.NoError(t, err)
	require.False(t, res.fallback)
	require.NotNil(t, res.row)
	require.Equal(t, int64(0), res.row.FirstOffset)
	require.Equal(t, int64(1), res.row.LastOffset, "max records 2")
	require.NotEmpty(t, res.row.Relname, "the segment that holds the range")
	require.Greater(t, res.row.ClaimEpoch, int64(0))
	first := res.row

	// The partition is claimed: nothing to claim, and nothing to explain.
	res, err = c.claimDirect(ctx, b.Pool, params(0, "m"), "")
	require.NoError(t, err)
	require.Nil(t, res.row)
	require.False(t, res.fallback)

	// Commit the first claim and claim the rest in one statement.
	p = params(0, "m")
	p.Commit, p.CommitPartition, p.CommitEpoch = true, 0, first.ClaimEpoch
	require.True(t, c.canClaimDirect(p))
	res, err = c.claimDirect(ctx, b.Pool, p, "")
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
	res, err = c.claimDirect(ctx, b.Pool, p, "")
	require.NoError(t, err)
	require.True(t, res.fallback)
	require.False(t, res.committed)
	next, _ = cursor()
	require.Equal(t, int64(2), next)

	// Committing the last claim with nothing more to read commits only.
	p.CommitEpoch = second.ClaimEpoch
	res, err = c.claimDirect(ctx, b.Pool, p, "")
	require.NoError(t, err)
	require.False(t, res.fallback)
	require.True(t, res.committed)
	require.Nil(t, res.row)
	next, claimed = cursor()
	require.Equal(t, int64(3), next)
	require.False(t, claimed)

	// Another member's partition, and a group with no cursor row: both go
	// to claim_range, which says why (ErrNotMember, or creates the group).
	c.publish("t", 1, []*pgmsgtype.Record{{Topic: "t", Partition: 1, Value: []byte("x")}})
	res, err = c.claimDirect(ctx, b.Pool, params(1, "stranger"), "")
	require.NoError(t, err)
	require.True(t, res.fallback)
	p = params(1, "m")
	p.Group = "other"
	res, err = c.claimDirect(ctx, b.Pool, p, "")
	require.NoError(t, err)
	require.True(t, res.fallback)

	// Cases outside the direct statements' reach.
	p = params(0, "m")
	p.MaxBytes = 10
	require.False(t, c.canClaimDirect(p), "byte caps")
	p = params(0, "m")
	p.Partition = nil
	require.False(t, c.canClaimDirect(p), "any partition")
	p = params(0, "m")
	p.Commit, p.CommitPartition, p.CommitEpoch = true, 1, 1
	require.False(t, c.canClaimDirect(p), "a commit of another partition")
}

// A commit that rides on a claim (Consumer.Run's) commits as the claim
// does: asynchronously with Async, through the direct statement and
// through claim_range() alike, and synchronously without it or when the
// call creates the group (its start must be durable).
func TestClaimRidingCommitAsync(t *testing.T) {
	t.Parallel()
	c := newTestReader(t)
	b, ctx := c.b, c.ctx
	c.createTopic("t", 1, 0)
	c.join("t", "g", "m")
	for i := 0; i < 4; i++ {
		c.publish("t", 0, []*pgmsgtype.Record{{Topic: "t", Partition: 0, Value: []byte{byte(i)}}})
	}
	partition := int32(0)
	params := func(async bool) *store.ClaimParams {
		return &store.ClaimParams{Topic: "t", Group: "g", MaxRecords: 1, Lease: 30 * time.Second, Start: "earliest",
			Partition: &partition, Member: "m", RequireOwner: true, Async: async}
	}
	first, err := c.claimDirect(ctx, b.Pool, params(true), "")
	require.NoError(t, err)
	require.NotNil(t, first.row)

	// setting runs claim in a transaction that starts with synchronous
	// commits (the test clusters may run without), rolls it back, and
	// returns the setting the claim left.
	setting := func(claim func(tx pgx.Tx)) string {
		t.Helper()
		tx, err := b.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, "SET LOCAL synchronous_commit = on")
		require.NoError(t, err)
		claim(tx)
		var v string
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.current_setting('synchronous_commit')").Scan(&v))
		return v
	}
	riding := func(async bool) *store.ClaimParams {
		p := params(async)
		p.Commit, p.CommitPartition, p.CommitEpoch = true, 0, first.row.ClaimEpoch
		return p
	}
	for _, async := range []bool{true, false} {
		want := syncSetting(async)
		got := setting(func(tx pgx.Tx) {
			res, err := c.claimDirect(ctx, tx, riding(async), "")
			require.NoError(t, err)
			require.False(t, res.fallback)
			require.True(t, res.committed)
			require.NotNil(t, res.row, "the next record claimed")
		})
		require.Equal(t, want, got, "direct statement, async %v", async)
		got = setting(func(tx pgx.Tx) {
			row, err := c.store.ClaimRange(ctx, tx, riding(async))
			require.NoError(t, err)
			require.NotNil(t, row, "the next record claimed")
			require.Equal(t, first.row.LastOffset+1, row.FirstOffset, "the commit moved the cursor")
		})
		require.Equal(t, want, got, "claim_range(), async %v", async)
	}
	// A riding commit with nothing left to claim commits alone, the same
	// way: group g2's member claims every record, then commits.
	c.join("t", "g2", "m")
	all := params(true)
	all.Group, all.MaxRecords = "g2", 100
	held, err := c.claimDirect(ctx, b.Pool, all, "")
	require.NoError(t, err)
	require.NotNil(t, held.row)
	for _, async := range []bool{true, false} {
		want := syncSetting(async)
		commitOnly := func() *store.ClaimParams {
			p := riding(async)
			p.Group, p.CommitEpoch = "g2", held.row.ClaimEpoch
			return p
		}
		got := setting(func(tx pgx.Tx) {
			res, err := c.claimDirect(ctx, tx, commitOnly(), "")
			require.NoError(t, err)
			require.False(t, res.fallback)
			require.True(t, res.committed)
			require.Nil(t, res.row, "nothing left to claim")
		})
		require.Equal(t, want, got, "direct statement, commit alone, async %v", async)
		got = setting(func(tx pgx.Tx) {
			row, err := c.store.ClaimRange(ctx, tx, commitOnly())
			require.NoError(t, err)
			require.Nil(t, row, "nothing left to claim")
			var next int64
			require.NoError(t, tx.QueryRow(ctx, `SELECT next_offset FROM `+pgx.Identifier{b.Schema, "group_cursor"}.Sanitize()+
				` WHERE group_name = 'g2' AND partition = 0`).Scan(&next))
			require.Equal(t, held.row.LastOffset+1, next, "the commit moved the cursor")
		})
		require.Equal(t, want, got, "claim_range(), commit alone, async %v", async)
	}
	// A claim that creates its group commits synchronously, async or not.
	got := setting(func(tx pgx.Tx) {
		row, err := c.store.ClaimRange(ctx, tx, &store.ClaimParams{Topic: "t", Group: "new", MaxRecords: 1,
			Lease: 30 * time.Second, Start: "earliest", Async: true})
		require.NoError(t, err)
		require.NotNil(t, row)
	})
	require.Equal(t, "on", got, "the claim that created the group")
}

// syncSetting is the synchronous_commit a claim leaves in its transaction
// when it commits asynchronously or not.
func syncSetting(async bool) string {
	if async {
		return "off"
	}
	return "on"
}

// A direct claim that reads its records in the same round trip
// (claimRecordsSQL) returns what readRange would, in order, with keys, empty
// values and headers intact; records read from a table that is not the
// claim's segment are dropped; a table dropped since (retention) makes
// claimRow claim again without reading; the segment learnt is the next
// claim's. (The root's TestClaimFetchThroughConsumer reads across segments
// with Consumer.Run.)
func TestClaimFetch(t *testing.T) {
	t.Parallel()
	c := newTestReader(t)
	b, ctx := c.b, c.ctx
	c.createTopic("t", 2, 64)
	c.join("t", "g", "m")
	var batch []*pgmsgtype.Record
	for i := 0; i < 100; i++ {
		r := &pgmsgtype.Record{Topic: "t", Partition: 0, Value: []byte(fmt.Sprint(i))}
		switch i % 3 {
		case 0:
			r.Key, r.Value = []byte{}, []byte{}
		case 1:
			r.Key, r.Headers = []byte("k"), map[string][]byte{"h": []byte(fmt.Sprint(i))}
		}
		batch = append(batch, r)
	}
	c.publish("t", 0, batch)
	c.publish("t", 1, []*pgmsgtype.Record{{Topic: "t", Partition: 1, Value: []byte("p1")}})
	params := func(max int32, commit int64) *store.ClaimParams {
		partition := int32(0)
		p := &store.ClaimParams{Topic: "t", Group: "g", MaxRecords: max, Lease: 30 * time.Second,
			Partition: &partition, Member: "m", RequireOwner: true, Async: true}
		if commit != 0 {
			p.Commit, p.CommitPartition, p.CommitEpoch = true, 0, commit
		}
		return p
	}
	check := func(recs []*pgmsgtype.Record, first, last int64) {
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
	res, err := c.claimDirect(ctx, b.Pool, params(10, 0), "")
	require.NoError(t, err)
	require.NotNil(t, res.row)
	require.False(t, res.fetched)
	seg := res.row.Relname
	require.NotEmpty(t, seg)

	// Commit it and claim the next ten, reading them in the same round trip.
	res, err = c.claimDirect(ctx, b.Pool, params(10, res.row.ClaimEpoch), seg)
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
	res, err = c.claimDirect(ctx, b.Pool, params(10, res.row.ClaimEpoch), other)
	require.NoError(t, err)
	require.NotNil(t, res.row)
	require.False(t, res.fetched)
	require.Nil(t, res.records)
	require.Equal(t, int64(20), res.row.FirstOffset)

	// Through claimRow: a cached table that no longer exists is forgotten
	// and the claim made without it; the claim's own segment is learnt.
	key := partitionKey{"t", 0}
	c.segments.Store(key, "record_dropped_since")
	row, recs, _, err := c.claimRow(ctx, b.Pool, params(10, res.row.ClaimEpoch))
	require.NoError(t, err)
	require.Nil(t, recs)
	require.Equal(t, int64(30), row.FirstOffset)
	v, ok := c.segments.Load(key)
	require.True(t, ok)
	require.Equal(t, seg, v)
	row, recs, _, err = c.claimRow(ctx, b.Pool, params(10, row.ClaimEpoch))
	require.NoError(t, err)
	require.Equal(t, int64(40), row.FirstOffset)
	check(recs, 40, 49)

	// A claim that reaches into the next segment (offsets 64 on): the
	// segment learnt does not hold it, the records come from readRange.
	row, recs, _, err = c.claimRow(ctx, b.Pool, params(20, row.ClaimEpoch))
	require.NoError(t, err)
	require.Equal(t, int64(50), row.FirstOffset)
	require.Equal(t, int64(69), row.LastOffset)
	require.Nil(t, recs)
	recs, err = c.readRange(ctx, b.Pool, "t", row)
	require.NoError(t, err)
	check(recs, 50, 69)
	row, recs, _, err = c.claimRow(ctx, b.Pool, params(100, row.ClaimEpoch))
	require.NoError(t, err)
	require.Equal(t, int64(70), row.FirstOffset)
	require.Nil(t, recs, "the segment of offsets 64 on is learnt by this claim")
	row, _, _, err = c.claimRow(ctx, b.Pool, params(100, row.ClaimEpoch))
	require.NoError(t, err)
	require.Nil(t, row, "all read")
}

// cachedSegment returns the segment table the partition's next direct
// claim reads its records from in the same round trip ("", false when none
// is known).
func (r *Reader) cachedSegment(topic string, partition int32) (string, bool) {
	v, ok := r.segments.Load(partitionKey{topic, partition})
	if !ok {
		return "", false
	}
	return v.(string), true
}

// Claims through Claim and Commit, as a consumer makes them (the one
// member owns the partition), learn the partition's segment, across the
// segment boundary. (The root's TestClaimFetchThroughConsumer reads the
// same records through Consumer.Run.)
func TestClaimLearnsSegment(t *testing.T) {
	t.Parallel()
	c := newTestReader(t)
	c.createTopic("one", 1, 64)
	c.join("one", "g", "m")
	batch := make([]*pgmsgtype.Record, 100)
	for i := range batch {
		batch[i] = &pgmsgtype.Record{Topic: "one", Value: []byte(fmt.Sprint(i))}
	}
	c.publish("one", 0, batch)
	_, ok := c.cachedSegment("one", 0)
	require.False(t, ok, "no claim yet")
	partition := int32(0)
	var got int64
	for got < 100 {
		cl, err := c.Claim(c.ctx, c.b.Pool, &store.ClaimParams{Topic: "one", Group: "g", MaxRecords: 7,
			Lease: 30 * time.Second, Partition: &partition, Member: "m", RequireOwner: true, Async: true})
		require.NoError(t, err)
		require.NotNil(t, cl)
		for _, r := range cl.Records {
			require.Equal(t, got, r.Offset)
			require.Equal(t, []byte(fmt.Sprint(got)), r.Value)
			got++
		}
		require.NoError(t, c.Commit(c.ctx, c.b.Pool, cl, nil))
	}
	_, ok = c.cachedSegment("one", 0)
	require.True(t, ok, "the claims learnt the partition's segment")
}

// A member that owns several partitions commits its handled claim with
// its next claim (store.ClaimAnyDirect). When a rebalance marked the
// committed claim's partition for hand-over after that statement took its
// snapshot, the statement claims another partition without writing the
// commit: the Reader commits it on its own, so that the hand-over
// completes at once and the next owner starts after the handled records.
// Before, the claim stayed live until its lease ran out, and the next
// owner was then given the handled records again
// (TestGroupsReadEverythingInOrder in the root failed so, 1 run in 7).
// The interleaving is forced: the join's transaction stays open until the
// claim waits for its row lock.
func TestClaimRidingCommitRebalanced(t *testing.T) {
	t.Parallel()
	c := newTestReader(t)
	b, ctx := c.b, c.ctx
	schema := pgx.Identifier{b.Schema}.Sanitize()
	c.createTopic("t", 4, 0)
	c.join("t", "g", "m") // m owns the four partitions
	c.publish("t", 3, []*pgmsgtype.Record{{Value: []byte("a")}, {Value: []byte("b")}})
	params := func() *store.ClaimParams {
		return &store.ClaimParams{Topic: "t", Group: "g", Member: "m", MaxRecords: 10, Lease: 30 * time.Second,
			RequireOwner: true, Async: true}
	}
	held, err := c.Claim(ctx, b.Pool, params())
	require.NoError(t, err)
	require.NotNil(t, held)
	require.Equal(t, int32(3), held.Partition)
	c.publish("t", 0, []*pgmsgtype.Record{{Value: []byte("c")}, {Value: []byte("d")}})

	// m2 joins in a transaction left open: its rebalance locks p3's
	// cursor row (next owner m2, once m's claim ends).
	tx, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var joiner int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_catalog.pg_backend_pid()`).Scan(&joiner))
	_, err = tx.Exec(ctx, `SELECT * FROM `+schema+`.group_heartbeat('t', 'g', 'm2')`)
	require.NoError(t, err)

	type answer struct {
		cl  *pgmsgtype.Claim
		err error
	}
	done := make(chan answer, 1)
	go func() {
		p := params()
		p.Commit, p.CommitPartition, p.CommitEpoch = true, held.Partition, held.Epoch
		cl, err := c.Claim(ctx, b.Pool, p)
		done <- answer{cl, err}
	}()
	for {
		select {
		case a := <-done:
			t.Fatalf("the claim did not wait for the join's row lock: %+v %v", a.cl, a.err)
		default:
		}
		var waiting bool
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
		                                          WHERE $1::integer = ANY (pg_catalog.pg_blocking_pids(a.pid)))`, joiner).Scan(&waiting))
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, tx.Commit(ctx))
	a := <-done
	require.NoError(t, a.err)
	require.NotNil(t, a.cl)
	require.Equal(t, int32(0), a.cl.Partition, "the next claim")

	// p3's claim was committed: the cursor is past it, and m2's next
	// heartbeat completes the hand-over.
	var next int64
	var live bool
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT next_offset, claim_end IS NOT NULL FROM `+schema+
		`.group_cursor WHERE group_name = 'g' AND partition = 3`).Scan(&next, &live))
	require.Equal(t, int64(2), next, "p3's cursor moved past the committed claim")
	require.False(t, live, "p3's claim ended")
	c.join("t", "g", "m2")
	var owner string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT owner FROM `+schema+
		`.group_cursor WHERE group_name = 'g' AND partition = 3`).Scan(&owner))
	require.Equal(t, "m2", owner, "the hand-over completed")
}
