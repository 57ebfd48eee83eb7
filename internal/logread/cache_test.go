package logread

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

func cacheRecs(offsets ...int64) []*pgmsgtype.Record {
	out := make([]*pgmsgtype.Record, len(offsets))
	for i, o := range offsets {
		out[i] = &pgmsgtype.Record{Offset: o, Value: []byte(fmt.Sprintf("v%03d", o))}
	}
	return out
}

func offsetsOf(recs []*pgmsgtype.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}

// The window follows on from the claims offered to it, starts anew past a
// gap or for another topic id, and a claim takes from it exactly the part
// Held.Skipped says the statement did not read, gaps left by compaction
// included; one group alone keeps nothing.
func TestRecordCacheWindow(t *testing.T) {
	pk := partitionKey{"t", 0}
	c := &recordCache{max: 1 << 20}
	c.note(pk, "a")
	c.offer(pk, 7, 0, 4, cacheRecs(0, 1, 2, 3, 4))
	h, _ := c.held(pk)
	require.Equal(t, store.Held{}, h, "one group: nothing kept")

	c.note(pk, "b")
	c.offer(pk, 7, 2, 4, cacheRecs(2, 3, 4))
	c.offer(pk, 7, 3, 9, cacheRecs(3, 4, 6, 9)) // 5, 7 and 8 compacted away
	h, snap := c.held(pk)
	require.Equal(t, store.Held{TopicID: 7, First: 2, Last: 9}, h)
	require.Equal(t, []int64{2, 3, 4, 6, 9}, offsetsOf(snap))

	// A claim 5..12 starts in the window: 10..12 were read.
	got := c.assemble(h, snap, 7, 5, 12, cacheRecs(10, 11, 12))
	require.Equal(t, []int64{6, 9, 10, 11, 12}, offsetsOf(got))
	// Copies: changing them changes nothing the window holds.
	got[0].Value[0] = 'x'
	_, snap2 := c.held(pk)
	require.Equal(t, "v006", string(snap2[3].Value))
	// A gathered statement may have read part of it for another claim's
	// range: each offset once, the record read taken.
	read := cacheRecs(6, 10)
	read[0].Value = []byte("read")
	got = c.assemble(h, snap, 7, 5, 10, read)
	require.Equal(t, []int64{6, 9, 10}, offsetsOf(got))
	require.Equal(t, "read", string(got[0].Value))
	// A claim that covers the window at both ends was read whole.
	got = c.assemble(h, snap, 7, 0, 12, cacheRecs(0, 1, 2, 3, 4, 6, 9, 10))
	require.Equal(t, []int64{0, 1, 2, 3, 4, 6, 9, 10}, offsetsOf(got))
	// Another topic id (the topic was created again) takes nothing.
	got = c.assemble(h, snap, 8, 0, 3, cacheRecs(0, 1, 2, 3))
	require.Equal(t, "v000", string(got[0].Value))
	require.Equal(t, int64(4), c.served, "the records of the skipped parts")

	// A claim past a gap starts the window anew; so does another topic id.
	c.offer(pk, 7, 20, 21, cacheRecs(20, 21))
	h, _ = c.held(pk)
	require.Equal(t, store.Held{TopicID: 7, First: 20, Last: 21}, h)
	c.offer(pk, 8, 0, 1, cacheRecs(0, 1))
	h, _ = c.held(pk)
	require.Equal(t, store.Held{TopicID: 8, First: 0, Last: 1}, h)
}

// The budget: a window keeps its share of it (the budget over the
// partitions two groups read), its oldest records going first, and other
// windows are emptied while the whole is over it.
func TestRecordCacheBudget(t *testing.T) {
	per := recordBytes(cacheRecs(0)[0]) // every record costs as much
	c := &recordCache{max: 8 * per}
	p0, p1, p2 := partitionKey{"t", 0}, partitionKey{"t", 1}, partitionKey{"t", 2}
	c.note(p0, "a")
	c.note(p0, "b")
	c.offer(p0, 1, 0, 9, cacheRecs(0, 1, 2, 3, 4, 5, 6, 7, 8, 9))
	h, snap := c.held(p0)
	require.Equal(t, store.Held{TopicID: 1, First: 2, Last: 9}, h, "one partition: the whole budget")
	require.Equal(t, []int64{2, 3, 4, 5, 6, 7, 8, 9}, offsetsOf(snap))

	c.note(p1, "a")
	c.note(p1, "b")
	c.offer(p1, 1, 0, 5, cacheRecs(0, 1, 2, 3, 4, 5))
	h, _ = c.held(p1)
	require.Equal(t, store.Held{TopicID: 1, First: 2, Last: 5}, h, "two partitions: half each")
	h, _ = c.held(p0)
	require.Equal(t, store.Held{}, h, "the whole was over: the other window emptied")
	require.Equal(t, 4*per, c.bytes)
	c.offer(p0, 1, 10, 13, cacheRecs(10, 11, 12, 13))
	require.Equal(t, 8*per, c.bytes)

	// A third partition: a third each; p2's record puts the whole over.
	c.note(p2, "a")
	c.note(p2, "b")
	c.offer(p2, 1, 0, 0, cacheRecs(0))
	h, _ = c.held(p2)
	require.Equal(t, store.Held{TopicID: 1, First: 0, Last: 0}, h)
	h0, _ := c.held(p0)
	h1, _ := c.held(p1)
	require.True(t, (h0 == store.Held{}) != (h1 == store.Held{}), "one of p0 and p1 emptied: %v %v", h0, h1)
	require.Equal(t, 5*per, c.bytes)
}

// A window whose groups stopped claiming is freed by the next note of any
// partition (at most once per peerWindow).
func TestRecordCacheFreesStaleWindows(t *testing.T) {
	c := &recordCache{max: 1 << 20}
	p0, p1 := partitionKey{"t", 0}, partitionKey{"t", 1}
	for _, pk := range []partitionKey{p0, p1} {
		c.note(pk, "a")
		c.note(pk, "b")
		c.offer(pk, 1, 0, 2, cacheRecs(0, 1, 2))
	}
	require.Equal(t, 6*recordBytes(cacheRecs(0)[0]), c.bytes)
	// p0's groups last claimed it long ago.
	for g := range c.win[p0].groups {
		c.win[p0].groups[g] = time.Now().Add(-2 * peerWindow)
	}
	c.swept = time.Time{}
	c.note(p1, "a")
	require.NotContains(t, c.win, p0)
	require.Contains(t, c.win, p1)
	require.Equal(t, 3*recordBytes(cacheRecs(0)[0]), c.bytes)
}
