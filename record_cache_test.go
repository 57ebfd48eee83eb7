package pgmsg

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

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
