package pgmsgkafka

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
)

// TestPartitionerMatchesPartitionForKey: the Kafka backend's partitioner
// puts a key where pgmsg.PartitionForKey (and so the PostgreSQL backend
// and the SQL function partition_for_key) puts it, for keys of every
// length class murmur2 treats apart and partition counts up to
// pgmsg.PartitionsMax; a manual record goes to its own partition.
func TestPartitionerMatchesPartitionForKey(t *testing.T) {
	tp := newPartitioner().ForTopic("t")
	rng := rand.New(rand.NewPCG(1, 2))
	keys := [][]byte{{}, []byte("a"), []byte("ab"), []byte("abc"), []byte("abcd"), []byte("customer-42")}
	for i := 0; i < 2000; i++ {
		k := make([]byte, rng.IntN(40))
		for j := range k {
			k[j] = byte(rng.UintN(256))
		}
		keys = append(keys, k)
	}
	for _, n := range []int{1, 2, 3, 7, 8, 64, 100, pgmsg.PartitionsMax} {
		for _, k := range keys {
			r := &kgo.Record{Key: k}
			require.True(t, tp.RequiresConsistency(r), "a keyed record keeps its partition")
			require.Equal(t, int(pgmsg.PartitionForKey(k, n)), tp.Partition(r, n), "key %x, %d partitions", k, n)
		}
	}
	for p := range int32(5) {
		mark := &manualMark{}
		r := &kgo.Record{Partition: p, Key: []byte(strconv.Itoa(int(p)))}
		r.Context = contextWithMark(mark)
		require.Equal(t, int(p), tp.Partition(r, 5))
		require.False(t, mark.outOfRange)
	}
	mark := &manualMark{}
	r := &kgo.Record{Partition: 5, Context: contextWithMark(mark)}
	require.Equal(t, -1, tp.Partition(r, 5))
	require.True(t, mark.outOfRange)
}

func contextWithMark(mark *manualMark) context.Context {
	return context.WithValue(context.Background(), manualKey{}, mark)
}
