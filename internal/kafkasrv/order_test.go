package kafkasrv_test

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

// Produce requests pipelined on one connection are carried out in the
// order sent (as Kafka does): an idempotent producer's batches, each in
// its own request and all written before any answer is read, are all
// stored, at consecutive offsets, none refused as out of order; a Fetch
// and a ListOffsets pipelined behind them see every one.
func TestProducePipelinedInOrder(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "pipe", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	rc := dialRaw(t, tb)
	init := rc.roundTrip(t, kmsg.NewPtrInitProducerIDRequest()).(*kmsg.InitProducerIDResponse)
	require.Zero(t, init.ErrorCode)

	const n = 200
	var frames []byte
	ts := time.Now().UnixMilli()
	for i := range n {
		// Two partitions per request, each its own sequence.
		req := produceReq("pipe", 0, rawBatch(init.ProducerID, init.ProducerEpoch, int32(i), ts, rawRecord{value: []byte(strconv.Itoa(i))}))
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = 1
		rp.Records = rawBatch(init.ProducerID, init.ProducerEpoch, int32(i), ts, rawRecord{value: []byte(strconv.Itoa(i))})
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
		frames = append(frames, rc.frame(req)...)
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 4
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "pipe"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.Timestamp = 0, -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	frames = append(frames, rc.frame(lo)...)
	fr := kmsg.NewPtrFetchRequest()
	fr.Version = 11
	fr.ReplicaID, fr.MaxBytes = -1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "pipe"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = 1, n-1, 1<<20
	fp.CurrentLeaderEpoch, fp.LogStartOffset = -1, -1
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	frames = append(frames, rc.frame(fr)...)
	rc.send(t, frames)

	for i := range n {
		corr, body, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, int32(i+2), corr, "answers in request order")
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 9
		require.NoError(t, resp.ReadFrom(body[1:]))
		for _, p := range resp.Topics[0].Partitions {
			require.Zero(t, p.ErrorCode, "request %d partition %d: %s", i, p.Partition, derefOr(p.ErrorMessage))
			require.Equal(t, int64(i), p.BaseOffset, "request %d partition %d", i, p.Partition)
		}
	}
	_, body, err := rc.read(t)
	require.NoError(t, err)
	lr := kmsg.NewPtrListOffsetsResponse()
	lr.Version = 4
	require.NoError(t, lr.ReadFrom(body))
	require.Equal(t, int64(n), lr.Topics[0].Partitions[0].Offset, "ListOffsets sees the produce requests before it")
	_, body, err = rc.read(t)
	require.NoError(t, err)
	fres := kmsg.NewPtrFetchResponse()
	fres.Version = 11
	require.NoError(t, fres.ReadFrom(body))
	require.Equal(t, int64(n), fres.Topics[0].Partitions[0].HighWatermark, "Fetch sees the produce requests before it")
	require.NotEmpty(t, fres.Topics[0].Partitions[0].RecordBatches)

	for p := range int32(2) {
		got, err := tb.Client.Fetch(tb.Ctx, "pipe", p, 0, n+1)
		require.NoError(t, err)
		require.Len(t, got, n)
		for i, r := range got {
			require.Equal(t, []byte(strconv.Itoa(i)), r.Value, "partition %d offset %d", p, i)
		}
	}
}

// A franz-go idempotent producer with several requests in flight on its
// connection (linger 0) gets every record acknowledged at the offset of
// its produce order (kafka-bugs.md 3: out of order, then a producer that
// never finished).
func TestProduceIdempotentKeepsOrder(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "idem-order", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	cl := tb.kclient(t, kgo.DefaultProduceTopic("idem-order"), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(2000))
	const n = 5000
	ctx, cancel := context.WithTimeout(tb.Ctx, time.Minute)
	defer cancel()
	var mu sync.Mutex
	offsets := make([]int64, n)
	var firstErr error
	body := bytes.Repeat([]byte("v"), 100)
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: body}, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			offsets[i] = r.Offset
		})
	}
	require.NoError(t, cl.Flush(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.NoError(t, firstErr)
	for i, o := range offsets {
		require.Equal(t, int64(i), o, "record %d", i)
	}
	require.Equal(t, int64(n), endOffset(t, tb, "idem-order", 0))
}

func derefOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
