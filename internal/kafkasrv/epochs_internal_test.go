package kafkasrv

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pgmsg/pgmsg/internal/store"
)

// Kafka's end offset of an epoch (LeaderEpochFileCache.endOffsetFor) and
// the epoch of an offset, over a history with epochs this server never
// had (1, 2, 4, 6), an epoch with no record (8, whose start is 9's) and
// epochs read past the partition's (10, published since it was read).
func TestEpochHistory(t *testing.T) {
	p := store.KafkaPartition{TopicID: 1, LogEpoch: 9, NextOffset: 120}
	h := newEpochHistory(p, []store.KafkaEpoch{{Epoch: 3, Start: 60}, {Epoch: 5, Start: 80}, {Epoch: 8, Start: 100},
		{Epoch: 9, Start: 100}, {Epoch: 10, Start: 120}})
	for _, c := range []struct {
		requested, epoch int32
		end              int64
	}{
		{-1, -1, -1}, {0, 0, 60}, {1, 0, 60}, {2, 0, 60}, {3, 3, 80}, {4, 3, 80}, {5, 5, 100}, {6, 5, 100},
		{7, 5, 100}, {8, 8, 100}, {9, 9, 120}, {10, -1, -1}, {math.MaxInt32, -1, -1},
	} {
		epoch, end := h.endOf(c.requested, p.NextOffset)
		require.Equal(t, [2]int64{int64(c.epoch), c.end}, [2]int64{int64(epoch), end}, "epoch %d", c.requested)
	}
	for _, c := range []struct {
		offset, next int64
		epoch        int32
	}{
		{0, 60, 0}, {59, 60, 0}, {60, 80, 3}, {79, 80, 3}, {80, 100, 5}, {100, math.MaxInt64, 9}, {119, math.MaxInt64, 9},
	} {
		epoch, next := h.epochOf(c.offset)
		require.Equal(t, [2]int64{int64(c.epoch), c.next}, [2]int64{int64(epoch), next}, "offset %d", c.offset)
	}
}

func TestCheckLeaderEpoch(t *testing.T) {
	require.Zero(t, checkLeaderEpoch(-1, 5))
	require.Zero(t, checkLeaderEpoch(5, 5))
	require.Equal(t, kerr.FencedLeaderEpoch.Code, checkLeaderEpoch(4, 5))
	require.Equal(t, kerr.FencedLeaderEpoch.Code, checkLeaderEpoch(-2, 5))
	require.Equal(t, kerr.UnknownLeaderEpoch.Code, checkLeaderEpoch(6, 5))
}

// The epoch cache keeps at most its bound of histories: a new partition's
// takes an arbitrary entry's place, a partition's new history replaces
// its own without evicting another, and the zero cache is bounded by
// epochCacheMax.
func TestEpochCacheBounded(t *testing.T) {
	c := &epochCache{max: 3}
	for i := range 10 {
		c.put(tp{"t", int32(i)}, &epochHistory{topicID: 1, current: 1})
		require.LessOrEqual(t, len(c.m), 3)
		require.Contains(t, c.m, tp{"t", int32(i)}, "the entry just put")
	}
	kept := map[tp]bool{}
	for k := range c.m {
		kept[k] = true
	}
	for k := range kept {
		c.put(k, &epochHistory{topicID: 2, current: 2})
	}
	require.Len(t, c.m, 3)
	for k := range kept {
		require.Equal(t, int32(2), c.m[k].topicID, "%v replaced in place", k)
	}

	var d epochCache
	for i := range epochCacheMax + 5 {
		d.put(tp{"t", int32(i)}, &epochHistory{})
	}
	require.Len(t, d.m, epochCacheMax)
}
