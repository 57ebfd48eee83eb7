package kafkasrv_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
)

// A franz-go producer's records read back by a direct-partition consumer
// and by the native API are the same records: key, value, headers,
// timestamp and offset; and a native publish reads back through Kafka.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, codec := range []struct {
		name string
		c    kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
		t.Run(codec.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, nil)
			ctx := tb.Ctx
			_, err := tb.Client.CreateTopic(ctx, "rt", pgmsg.TopicConfig{Partitions: 2})
			require.NoError(t, err)

			prod := tb.kclient(t, kgo.ProducerBatchCompression(codec.c), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			base := time.UnixMilli(time.Now().UnixMilli())
			var sent []*kgo.Record
			for i := range 20 {
				r := &kgo.Record{Topic: "rt", Partition: int32(i % 2), Key: []byte(fmt.Sprintf("k%d", i)),
					Value:     bytes.Repeat([]byte{byte('a' + i)}, 100+i),
					Headers:   []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprint(i))}, {Key: "z", Value: nil}},
					Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
				if i == 3 {
					r.Key = nil
					r.Headers = nil
				}
				sent = append(sent, r)
			}
			require.NoError(t, prod.ProduceSync(ctx, sent...).FirstErr())
			// Offsets per partition start at 0, in produce order.
			next := map[int32]int64{}
			for _, r := range sent {
				require.Equal(t, next[r.Partition], r.Offset)
				next[r.Partition]++
			}

			// The native API reads the same records.
			for _, r := range sent {
				got, err := tb.Client.Fetch(ctx, "rt", r.Partition, r.Offset, 1)
				require.NoError(t, err)
				require.Len(t, got, 1)
				requireSame(t, r, got[0])
			}

			// A direct-partition Kafka consumer reads them back.
			cons := tb.kclient(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
				"rt": {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()}}))
			read := pollN(t, ctx, cons, len(sent))
			byPos := map[[2]int64]*kgo.Record{}
			for _, r := range read {
				byPos[[2]int64{int64(r.Partition), r.Offset}] = r
			}
			for _, r := range sent {
				g := byPos[[2]int64{int64(r.Partition), r.Offset}]
				require.NotNil(t, g, "partition %d offset %d", r.Partition, r.Offset)
				require.Equal(t, r.Key, g.Key)
				require.Equal(t, r.Value, g.Value)
				require.Equal(t, r.Timestamp.UnixMilli(), g.Timestamp.UnixMilli())
				require.Equal(t, headerMap(r.Headers), headerMap(g.Headers))
			}

			// A native publish is read through Kafka.
			nat := &pgmsg.Record{Topic: "rt", Partition: 1, Key: []byte("native"), Value: []byte("v"),
				Headers: map[string][]byte{"a": []byte("1")}, Timestamp: base.Add(time.Hour)}
			require.NoError(t, tb.Client.Publish(ctx, []*pgmsg.Record{nat}, &pgmsg.PublishOpts{ManualPartition: true}))
			g := pollN(t, ctx, cons, 1)[0]
			require.Equal(t, nat.Offset, g.Offset)
			require.Equal(t, int32(1), g.Partition)
			require.Equal(t, nat.Key, g.Key)
			require.Equal(t, nat.Value, g.Value)
			require.Equal(t, nat.Timestamp.UnixMilli(), g.Timestamp.UnixMilli())
			require.Equal(t, map[string]string{"a": "1"}, headerMap(g.Headers))
		})
	}
}

func requireSame(t *testing.T, k *kgo.Record, n *pgmsg.Record) {
	t.Helper()
	require.Equal(t, k.Partition, n.Partition)
	require.Equal(t, k.Offset, n.Offset)
	require.Equal(t, k.Key, n.Key)
	require.Equal(t, k.Value, n.Value)
	require.Equal(t, k.Timestamp.UnixMilli(), n.Timestamp.UnixMilli())
	require.True(t, k.Timestamp.Equal(n.Timestamp), "timestamps %v %v", k.Timestamp, n.Timestamp)
	want := headerMap(k.Headers)
	got := map[string]string{}
	for h, v := range n.Headers {
		got[h] = string(v)
	}
	require.Equal(t, want, got)
}

func headerMap(hs []kgo.RecordHeader) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.Key] = string(h.Value)
	}
	return m
}

// pollN polls cl until it has n records.
func pollN(t *testing.T, ctx context.Context, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachError(func(topic string, p int32, err error) {
			require.NoError(t, err, "%s/%d", topic, p)
		})
		out = append(out, fs.Records()...)
	}
	require.Len(t, out, n)
	return out
}
