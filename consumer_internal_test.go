package pgmsg

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/store"
)

// gatherTestClient returns a schema, a client on it with ClaimGatherWait
// wait (0: the default) and topic "t" of one partition, and a context
// for the test (two minutes).
func gatherTestClient(t *testing.T, conns int32, wait time.Duration) (*pgtest.Bundle, *Client, context.Context) {
	t.Helper()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: conns})
	c, err := NewClient(b.Pool, &Config{Schema: b.Schema, ClaimGatherWait: wait})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	_, err = c.CreateTopic(ctx, "t", TopicConfig{Partitions: 1})
	require.NoError(t, err)
	return b, c, ctx
}

// The gathered claim statement (store.ClaimGather) does, for each group,
// what the direct statements do: it claims for the partition's owner,
// commits a claim still held and claims on in the same row version, and
// leaves to the caller what it cannot settle (a claim no longer held, a
// member that does not own the partition, a group that does not exist),
// writing nothing for those. The records of a range claimed by several
// groups are read once.
func TestClaimGatherStatement(t *testing.T) {
	t.Parallel()
	b, c, ctx := gatherTestClient(t, 4, 0)
	for _, g := range []string{"a", "b", "c"} {
		_, err := c.CreateGroup(ctx, "t", g, PositionEarliest)
		require.NoError(t, err)
	}
	tbl := func(name string) string { return pgx.Identifier{b.Schema, name}.Sanitize() }
	_, err := b.Pool.Exec(ctx, `UPDATE `+tbl("group_cursor")+` SET owner = 'm'`)
	require.NoError(t, err)
	publish := func(n int) {
		recs := make([]*Record, n)
		for i := range recs {
			recs[i] = &Record{Topic: "t", Value: []byte(fmt.Sprint("v", i))}
		}
		require.NoError(t, c.Publish(ctx, recs, nil))
	}
	publish(5)
	var seg string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT relname FROM `+tbl("segment")+` ORDER BY start_offset LIMIT 1`).Scan(&seg))
	type cursor struct {
		next       int64
		epoch      *int64
		start, end *int64
	}
	cursorOf := func(g string) cursor {
		var cu cursor
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT next_offset, claim_epoch, claim_start, claim_end FROM `+tbl("group_cursor")+
			` WHERE group_name = $1`, g).Scan(&cu.next, &cu.epoch, &cu.start, &cu.end))
		return cu
	}
	gather := func(reqs ...store.ClaimGatherReq) ([]store.ClaimGatherResult, []int64) {
		t.Helper()
		var offsets []int64
		res, err := c.store.ClaimGather(ctx, c.pool, "t", 0, seg, true, store.Held{}, reqs, func(r *store.RecordRow) error {
			offsets = append(offsets, r.Offset)
			return nil
		})
		require.NoError(t, err)
		require.Len(t, res, len(reqs))
		return res, offsets
	}
	req := func(g, member string) store.ClaimGatherReq {
		return store.ClaimGatherReq{Group: g, Member: member, MaxRecords: 10, Lease: time.Minute}
	}

	// Three owners claim the same five records: read once.
	res, offsets := gather(req("a", "m"), req("b", "m"), req("c", "m"), req("nope", "m"), req("a", "other"))
	require.ElementsMatch(t, []int64{0, 1, 2, 3, 4}, offsets, "one range, its records once")
	epochs := map[string]int64{}
	for i, g := range []string{"a", "b", "c"} {
		r := res[i]
		require.True(t, r.Settled, g)
		require.False(t, r.Committed, g)
		require.NotNil(t, r.Row, g)
		require.True(t, r.Fetched, g)
		require.Equal(t, int64(0), r.Row.FirstOffset, g)
		require.Equal(t, int64(4), r.Row.LastOffset, g)
		require.Equal(t, seg, r.Row.Relname, g)
		require.Positive(t, r.LSN, g)
		cu := cursorOf(g)
		require.Equal(t, r.Row.ClaimEpoch, *cu.epoch, g)
		require.Equal(t, int64(0), cu.next, g)
		epochs[g] = r.Row.ClaimEpoch
	}
	require.False(t, res[3].Settled, "a group that does not exist is left to claim_range()")
	// The fifth request names group a again with a member that does not
	// own the partition (a caller never sends one group twice): unsettled.
	require.False(t, res[4].Settled)
	require.Nil(t, res[4].Row)

	// a commits and claims on; b's claim to commit is not held (a wrong
	// epoch): nothing is done for it; c has no commit and its claim is
	// still leased: settled, nothing to claim.
	publish(3)
	bad := req("b", "m")
	bad.Commit, bad.CommitEpoch = true, epochs["b"]+1
	commitA := req("a", "m")
	commitA.Commit, commitA.CommitEpoch = true, epochs["a"]
	res, offsets = gather(commitA, bad, req("c", "m"))
	require.ElementsMatch(t, []int64{5, 6, 7}, offsets)
	require.True(t, res[0].Settled)
	require.True(t, res[0].Committed)
	require.NotNil(t, res[0].Row)
	require.Equal(t, int64(5), res[0].Row.FirstOffset)
	require.Equal(t, int64(7), res[0].Row.LastOffset)
	require.NotEqual(t, epochs["a"], res[0].Row.ClaimEpoch, "a new epoch fences the committed claim")
	require.Equal(t, int64(5), cursorOf("a").next)
	require.False(t, res[1].Settled)
	require.False(t, res[1].Committed)
	cb := cursorOf("b")
	require.Equal(t, int64(0), cb.next, "nothing written for an unsettled request")
	require.Equal(t, epochs["b"], *cb.epoch)
	require.True(t, res[2].Settled)
	require.Nil(t, res[2].Row)
	// The committed claim's epoch is no longer held: committing it again
	// through the API fails as for any lost claim.
	require.ErrorIs(t, c.Commit(ctx, &Claim{Topic: "t", Group: "a", Partition: 0, Epoch: epochs["a"]}), ErrClaimNotHeld)

	// b commits its claim (the right epoch) and claims on: 5..7; c's
	// lease has not expired. a commits and finds nothing new: its claim
	// ends.
	okB := req("b", "m")
	okB.Commit, okB.CommitEpoch = true, epochs["b"]
	commitA.CommitEpoch = res[0].Row.ClaimEpoch
	res, offsets = gather(okB, commitA)
	require.ElementsMatch(t, []int64{5, 6, 7}, offsets)
	require.True(t, res[0].Settled)
	require.Equal(t, int64(5), res[0].Row.FirstOffset)
	require.Equal(t, int64(5), cursorOf("b").next)
	require.True(t, res[1].Settled)
	require.True(t, res[1].Committed)
	require.Nil(t, res[1].Row)
	ca := cursorOf("a")
	require.Equal(t, int64(8), ca.next)
	require.Nil(t, ca.start, "nothing claimed: the claim ended")
}

// Consumers of several groups in one client, woken together, claim
// through one gathered statement: every group gets every record once and
// in order, and each its own copies (a handler that changes its records
// changes no other group's).
func TestConsumersGatherClaims(t *testing.T) {
	t.Parallel()
	// A long gather wait: a claim waits until the other groups' join it
	// (they are woken together), however slow the machine.
	_, c, ctx := gatherTestClient(t, 12, 2*time.Second)
	groups := []string{"a", "b", "c"}
	var (
		mu  sync.Mutex
		got = map[string][]int64{}
		bad []string // records a group was given changed
	)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, g := range groups {
		cn, err := c.NewConsumer("t", g, nil)
		require.NoError(t, err)
		t.Cleanup(cn.Close)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cn.Run(runCtx, func(_ context.Context, cl *Claim) error {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range cl.Records {
					if !bytes.Equal(r.Value, []byte(fmt.Sprint(r.Offset))) {
						// Recorded, not returned: a failed handler's records
						// are read again from the table, which would hide it.
						bad = append(bad, fmt.Sprintf("group %s offset %d: value %q", g, r.Offset, r.Value))
					}
					got[g] = append(got[g], r.Offset)
					// Change what we were given: no other group may see it.
					for i := range r.Value {
						r.Value[i] = 'x'
					}
				}
				return nil
			})
		}()
	}
	// Publish one record at a time, each after every group has read the
	// previous one, until some claims went out gathered (the first claims
	// of a partition learn its segment and go alone).
	var next int64
	caughtUp := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range groups {
			if int64(len(got[g])) < next {
				return false
			}
		}
		return true
	}
	for next < 200 && (next < 10 || c.reader.GatheredClaims() == 0) {
		require.NoError(t, c.Publish(ctx, []*Record{{Topic: "t", Value: []byte(fmt.Sprint(next))}}, nil))
		next++
		require.Eventually(t, caughtUp, time.Minute, time.Millisecond)
	}
	stop()
	wg.Wait()
	require.Positive(t, c.reader.GatheredClaims(), "claims went out gathered")
	require.Empty(t, bad, "each group gets records of its own")
	for _, g := range groups {
		want := make([]int64, next)
		for i := range want {
			want[i] = int64(i)
		}
		require.Equal(t, want, got[g], "group %s: every record once, in order", g)
	}
}

// A claim that no other group of the client makes of its partition goes
// out at once, whatever ClaimGatherWait says.
func TestClaimGatherAloneDoesNotWait(t *testing.T) {
	t.Parallel()
	_, c, ctx := gatherTestClient(t, 4, time.Minute)
	cn, err := c.NewConsumer("t", "g", nil)
	require.NoError(t, err)
	t.Cleanup(cn.Close)
	for i := range 20 {
		require.NoError(t, c.Publish(ctx, []*Record{{Topic: "t", Value: []byte(fmt.Sprint(i))}}, nil))
		cl, err := cn.Poll(ctx) // past the test's deadline if claims waited
		require.NoError(t, err)
		require.Len(t, cl.Records, 1)
		require.Equal(t, int64(i), cl.Records[0].Offset)
		require.NoError(t, c.Commit(ctx, cl))
	}
	require.Zero(t, c.GatheredClaims())
}

// ClaimGatherWait: negative turns gathering off, over a minute is refused.
func TestClaimGatherWaitConfig(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connected
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = NewClient(pool, &Config{ClaimGatherWait: time.Minute + time.Nanosecond})
	require.ErrorContains(t, err, "Config.ClaimGatherWait must be at most 1m")
	c, err := NewClient(pool, &Config{ClaimGatherWait: -1})
	require.NoError(t, err)
	require.Zero(t, c.reader.GatherWait())
	c, err = NewClient(pool, nil)
	require.NoError(t, err)
	require.Equal(t, ClaimGatherWaitDefault, c.reader.GatherWait())
}

// The claim statements skip what the caller holds (store.Held): a claim
// that ends in the held range is read up to before it, one that starts
// in it from past its end, one inside it not at all, one that covers it
// at both ends whole; a range held of another topic changes nothing. Both
// the gathered and the direct statement, each as Held.Skipped says.
func TestClaimStatementsSkipHeld(t *testing.T) {
	t.Parallel()
	b, c, ctx := gatherTestClient(t, 4, 0)
	tbl := func(name string) string { return pgx.Identifier{b.Schema, name}.Sanitize() }
	recs := make([]*Record, 10)
	for i := range recs {
		recs[i] = &Record{Topic: "t", Value: []byte(fmt.Sprint("v", i))}
	}
	require.NoError(t, c.Publish(ctx, recs, nil))
	// Where each group's claim starts, and how many records it may take.
	starts := map[string]int64{"ends": 0, "inside": 4, "starts": 5, "covers": 2, "other": 0, "direct": 1}
	maxes := map[string]int32{"ends": 5, "inside": 2, "starts": 5, "covers": 8, "other": 10, "direct": 4}
	for g, next := range starts {
		_, err := c.CreateGroup(ctx, "t", g, PositionEarliest)
		require.NoError(t, err)
		_, err = b.Pool.Exec(ctx, `UPDATE `+tbl("group_cursor")+` SET owner = 'm', next_offset = $1 WHERE group_name = $2`, next, g)
		require.NoError(t, err)
	}
	var seg string
	var tid int32
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT relname, topic_id FROM `+tbl("segment")+` ORDER BY start_offset LIMIT 1`).Scan(&seg, &tid))
	held := store.Held{TopicID: tid, First: 3, Last: 6}

	// read returns the offsets the gathered statement handed over, sorted.
	read := func(h store.Held, groups ...string) []int64 {
		t.Helper()
		var offsets []int64
		var reqs []store.ClaimGatherReq
		for _, g := range groups {
			reqs = append(reqs, store.ClaimGatherReq{Group: g, Member: "m", MaxRecords: maxes[g], Lease: time.Minute})
		}
		res, err := c.store.ClaimGather(ctx, c.pool, "t", 0, seg, true, h, reqs, func(r *store.RecordRow) error {
			offsets = append(offsets, r.Offset)
			return nil
		})
		require.NoError(t, err)
		for i, r := range res {
			require.True(t, r.Settled, groups[i])
			require.NotNil(t, r.Row, groups[i])
			require.True(t, r.Fetched, groups[i])
			require.Equal(t, starts[groups[i]], r.Row.FirstOffset, groups[i])
		}
		slices.Sort(offsets)
		return offsets
	}
	skipped := func(first, last int64) []int64 {
		lo, hi, ok := held.Skipped(tid, first, last)
		if !ok {
			return nil
		}
		return []int64{lo, hi}
	}

	require.Equal(t, []int64{0, 1, 2}, read(held, "ends"), "0..4 ends in 3..6")
	require.Equal(t, []int64{3, 4}, skipped(0, 4))
	require.Empty(t, read(held, "inside"), "4..5 is inside 3..6")
	require.Equal(t, []int64{4, 5}, skipped(4, 5))
	require.Equal(t, []int64{7, 8, 9}, read(held, "starts"), "5..9 starts in 3..6")
	require.Equal(t, []int64{5, 6}, skipped(5, 9))
	require.Equal(t, []int64{2, 3, 4, 5, 6, 7, 8, 9}, read(held, "covers"), "2..9 covers 3..6 at both ends")
	require.Nil(t, skipped(2, 9))
	other := store.Held{TopicID: tid + 1, First: 3, Last: 6}
	require.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, read(other, "other"), "another topic's range")
	_, _, ok := other.Skipped(tid, 0, 9)
	require.False(t, ok)

	// The direct statement: 1..4 ends in 3..6.
	part := int32(0)
	var offsets []int64
	res, err := c.store.ClaimDirect(ctx, c.pool, &store.ClaimParams{Topic: "t", Group: "direct", Partition: &part, Member: "m",
		MaxRecords: maxes["direct"], Lease: time.Minute}, seg, held, func(r *store.RecordRow) error {
		offsets = append(offsets, r.Offset)
		return nil
	})
	require.NoError(t, err)
	require.NotNil(t, res.Row)
	require.True(t, res.Fetched)
	require.Equal(t, int64(1), res.Row.FirstOffset)
	require.Equal(t, int64(4), res.Row.LastOffset)
	require.Equal(t, []int64{1, 2}, offsets)
	require.Equal(t, []int64{3, 4}, skipped(1, 4))
}

// The record cache (Config.RecordCacheBytes): once two groups of a client
// claim a partition, the records one group's claim read are not read
// again for the other's, which takes them from the cache; each gets
// copies of its own. A topic deleted and created again under the same
// name is read anew, never served from what the cache held of the old
// one.
func TestRecordCacheServesOtherGroups(t *testing.T) {
	t.Parallel()
	// No gathering: each claim goes out on its own, one after the other.
	_, c, ctx := gatherTestClient(t, 6, -1)
	publish := func(tag string, from, n int) {
		recs := make([]*Record, n)
		for i := range recs {
			recs[i] = &Record{Topic: "t", Value: []byte(fmt.Sprint(tag, from+i))}
		}
		require.NoError(t, c.Publish(ctx, recs, nil))
	}
	consumers := map[string]*Consumer{}
	for _, g := range []string{"a", "b"} {
		cn, err := c.NewConsumer("t", g, nil)
		require.NoError(t, err)
		t.Cleanup(cn.Close)
		consumers[g] = cn
	}
	// poll claims as g, checks the values are tag+offset, commits, and
	// then overwrites the values it was given.
	poll := func(g, tag string, first, last int64) {
		t.Helper()
		cl, err := consumers[g].Poll(ctx)
		require.NoError(t, err)
		require.Len(t, cl.Records, int(last-first+1), g)
		for i, r := range cl.Records {
			require.Equal(t, first+int64(i), r.Offset, g)
			require.Equal(t, fmt.Sprint(tag, r.Offset), string(r.Value), "group %s offset %d", g, r.Offset)
		}
		require.NoError(t, c.Commit(ctx, cl))
		for _, r := range cl.Records {
			for i := range r.Value {
				r.Value[i] = 'x'
			}
		}
	}

	publish("v", 0, 10)
	poll("a", "v", 0, 9) // learns the partition's segment
	poll("b", "v", 0, 9) // reads it in the claim's round trip; one group so far
	require.Zero(t, c.CachedRecordsServed())

	publish("v", 10, 10)
	poll("a", "v", 10, 19) // both groups claim the partition now: a's records are kept
	poll("b", "v", 10, 19) // taken from the cache, as published (a changed its copies)
	require.Equal(t, int64(10), c.CachedRecordsServed())

	publish("v", 20, 5)
	poll("b", "v", 20, 24)
	poll("a", "v", 20, 24)
	require.Equal(t, int64(15), c.CachedRecordsServed())

	// The same topic name, a new topic: offsets 0.. again, other values.
	for _, cn := range consumers {
		cn.Close()
	}
	require.NoError(t, c.DeleteTopic(ctx, "t"))
	_, err := c.CreateTopic(ctx, "t", TopicConfig{Partitions: 1})
	require.NoError(t, err)
	for _, g := range []string{"a", "b"} {
		cn, err := c.NewConsumer("t", g, nil)
		require.NoError(t, err)
		t.Cleanup(cn.Close)
		consumers[g] = cn
	}
	publish("new", 0, 25)
	poll("a", "new", 0, 24)
	poll("b", "new", 0, 24)
	publish("new", 25, 5)
	poll("a", "new", 25, 29)
	poll("b", "new", 25, 29)
	require.Equal(t, int64(20), c.CachedRecordsServed(), "only the new topic's 25..29 came from the cache")
}

// RecordCacheBytes' default, and negative: no cache, every claim reads
// its records.
func TestRecordCacheConfig(t *testing.T) {
	t.Parallel()
	require.Equal(t, int64(RecordCacheBytesDefault), (&Config{}).withDefaults().RecordCacheBytes)
	b, _, ctx := gatherTestClient(t, 6, -1)
	off, err := NewClient(b.Pool, &Config{Schema: b.Schema, RecordCacheBytes: -1, ClaimGatherWait: -1})
	require.NoError(t, err)
	defer off.Close()
	consumers := map[string]*Consumer{}
	for _, g := range []string{"a", "b"} {
		cn, err := off.NewConsumer("t", g, nil)
		require.NoError(t, err)
		defer cn.Close()
		consumers[g] = cn
	}
	for round := range 3 {
		require.NoError(t, off.Publish(ctx, []*Record{{Topic: "t", Value: []byte(fmt.Sprint(round))}}, nil))
		for _, g := range []string{"a", "b"} {
			cl, err := consumers[g].Poll(ctx)
			require.NoError(t, err)
			require.Len(t, cl.Records, 1, "round %d group %s", round, g)
			require.Equal(t, fmt.Sprint(round), string(cl.Records[0].Value))
			require.NoError(t, off.Commit(ctx, cl))
		}
	}
	require.Zero(t, off.CachedRecordsServed())
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
