package kafkasrv_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

func fetchReq(topic string, maxWait time.Duration, minBytes, maxBytes int32, parts map[int32]int64, partMax int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(maxWait / time.Millisecond)
	req.MinBytes = minBytes
	req.MaxBytes = maxBytes
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	for p := int32(0); p < int32(len(parts)); p++ {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = p
		rp.FetchOffset = parts[p]
		rp.PartitionMaxBytes = partMax
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// decodeFetched returns the offsets of a fetched partition's records.
func decodeFetched(t *testing.T, p kmsg.FetchResponseTopicPartition) []int64 {
	t.Helper()
	var out []int64
	raw := p.RecordBatches
	for len(raw) > 0 {
		var rb kmsg.RecordBatch
		require.NoError(t, rb.ReadFrom(raw))
		n := 12 + int(rb.Length)
		raw = raw[n:]
		recs := rb.Records
		for range rb.NumRecords {
			var r kmsg.Record
			require.NoError(t, r.ReadFrom(recs))
			out = append(out, rb.FirstOffset+int64(r.OffsetDelta))
			l := len(r.AppendTo(nil))
			recs = recs[l:]
		}
	}
	return out
}

// A fetch waiting for MinBytes is answered by a publish's notification,
// long before its MaxWait; one past the high watermark answers
// OFFSET_OUT_OF_RANGE; byte limits bound each partition and the response,
// but the first record always goes.
func TestFetch(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := tb.Ctx
	_, err := tb.Client.CreateTopic(ctx, "f", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	cl := tb.kclient(t)

	// Long poll: woken by a native publish.
	got := make(chan *kmsg.FetchResponse, 1)
	errc := make(chan error, 1)
	go func() {
		resp, err := cl.Broker(0).Request(ctx, fetchReq("f", time.Minute, 1, 1<<20, map[int32]int64{0: 0, 1: 0}, 1<<20))
		if err != nil {
			errc <- err
			return
		}
		got <- resp.(*kmsg.FetchResponse)
	}()
	start := time.Now()
	// The fetch may not have subscribed yet: publish until it answers.
	var fr *kmsg.FetchResponse
	for fr == nil {
		require.NoError(t, tb.Client.Publish(ctx, []*pgmsg.Record{{Topic: "f", Partition: 1, Value: []byte("wake")}},
			&pgmsg.PublishOpts{ManualPartition: true}))
		select {
		case fr = <-got:
		case err := <-errc:
			t.Fatal(err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	require.Less(t, time.Since(start), time.Minute, "answered by the notification, not the max wait")
	require.Equal(t, int16(0), fr.Topics[0].Partitions[1].ErrorCode)
	require.NotEmpty(t, decodeFetched(t, fr.Topics[0].Partitions[1]))
	requireEmptyNotNull(t, fr.Topics[0].Partitions[0])

	// MaxWait: nothing to read, answered with an empty record set (not a
	// null one, which librdkafka refuses), at every version.
	for _, v := range []int16{4, 11, 12} {
		req := fetchReq("f", 50*time.Millisecond, 1, 1<<20, map[int32]int64{0: 0}, 1<<20)
		req.Version = v
		resp, err := cl.Broker(0).Request(ctx, req)
		require.NoError(t, err)
		fr = resp.(*kmsg.FetchResponse)
		require.Equal(t, int16(0), fr.Topics[0].Partitions[0].ErrorCode)
		require.Equal(t, int64(0), fr.Topics[0].Partitions[0].HighWatermark)
		requireEmptyNotNull(t, fr.Topics[0].Partitions[0])
	}

	// Out of range.
	resp, err := cl.Broker(0).Request(ctx, fetchReq("f", 0, 0, 1<<20, map[int32]int64{0: 5}, 1<<20))
	require.NoError(t, err)
	fr = resp.(*kmsg.FetchResponse)
	require.Equal(t, kerr.OffsetOutOfRange.Code, fr.Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, int64(0), fr.Topics[0].Partitions[0].HighWatermark)
	require.Equal(t, int64(0), fr.Topics[0].Partitions[0].LogStartOffset)
	requireEmptyNotNull(t, fr.Topics[0].Partitions[0])

	// Byte limits: 50 records of 1 KiB on each partition.
	var recs []*pgmsg.Record
	for i := range 100 {
		recs = append(recs, &pgmsg.Record{Topic: "f", Partition: int32(i % 2), Value: bytes.Repeat([]byte{'x'}, 1024)})
	}
	require.NoError(t, tb.Client.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	end1 := endOffset(t, tb, "f", 1)
	resp, err = cl.Broker(0).Request(ctx, fetchReq("f", 0, 0, 1<<20, map[int32]int64{0: 0, 1: 0}, 4096))
	require.NoError(t, err)
	fr = resp.(*kmsg.FetchResponse)
	for _, p := range fr.Topics[0].Partitions {
		require.LessOrEqual(t, len(p.RecordBatches), 4096)
		offs := decodeFetched(t, p)
		require.NotEmpty(t, offs)
		require.Equal(t, int64(0), offs[0])
	}
	require.Equal(t, end1, fr.Topics[0].Partitions[1].HighWatermark)
	// The response's limit: the first partition's first record goes
	// whatever the limit; nothing more fits.
	resp, err = cl.Broker(0).Request(ctx, fetchReq("f", 0, 0, 10, map[int32]int64{0: 0, 1: 0}, 1<<20))
	require.NoError(t, err)
	fr = resp.(*kmsg.FetchResponse)
	require.Equal(t, []int64{0}, decodeFetched(t, fr.Topics[0].Partitions[0]))
	requireEmptyNotNull(t, fr.Topics[0].Partitions[1])
	// All of them, in order, when the limits allow.
	resp, err = cl.Broker(0).Request(ctx, fetchReq("f", 0, 0, 1<<20, map[int32]int64{0: 0, 1: 0}, 1<<20))
	require.NoError(t, err)
	fr = resp.(*kmsg.FetchResponse)
	offs := decodeFetched(t, fr.Topics[0].Partitions[0])
	require.Len(t, offs, 50)
	for i, o := range offs {
		require.Equal(t, int64(i), o)
	}
	require.Len(t, decodeFetched(t, fr.Topics[0].Partitions[1]), int(end1))

	// An unknown topic answers UNKNOWN_TOPIC_OR_PARTITION.
	resp, err = cl.Broker(0).Request(ctx, fetchReq("nope", 0, 0, 1<<20, map[int32]int64{0: 0}, 1<<20))
	require.NoError(t, err)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, resp.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode)
	requireEmptyNotNull(t, resp.(*kmsg.FetchResponse).Topics[0].Partitions[0])
}

// requireEmptyNotNull: a partition with nothing to return answers an
// empty record set, not a null one.
func requireEmptyNotNull(t *testing.T, p kmsg.FetchResponseTopicPartition) {
	t.Helper()
	require.NotNil(t, p.RecordBatches, "partition %d: a null record set", p.Partition)
	require.Empty(t, p.RecordBatches)
}

// ListOffsets: earliest, latest and by timestamp (the time index) through
// kadm, the same offsets the native API answers.
func TestListOffsets(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := tb.Ctx
	_, err := tb.Client.CreateTopic(ctx, "lo", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	base := time.UnixMilli(time.Now().UnixMilli()).Add(-time.Hour)
	var recs []*pgmsg.Record
	for i := range 10 {
		recs = append(recs, &pgmsg.Record{Topic: "lo", Value: []byte(fmt.Sprint(i)), Timestamp: base.Add(time.Duration(i) * time.Minute)})
	}
	require.NoError(t, tb.Client.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	adm := kadm.NewClient(tb.kclient(t))
	start, err := adm.ListStartOffsets(ctx, "lo")
	require.NoError(t, err)
	o, _ := start.Lookup("lo", 0)
	require.NoError(t, o.Err)
	require.Equal(t, int64(0), o.Offset)
	end, err := adm.ListEndOffsets(ctx, "lo")
	require.NoError(t, err)
	o, _ = end.Lookup("lo", 0)
	require.Equal(t, int64(10), o.Offset)
	at, err := adm.ListOffsetsAfterMilli(ctx, base.Add(4*time.Minute+time.Second).UnixMilli(), "lo")
	require.NoError(t, err)
	o, _ = at.Lookup("lo", 0)
	require.NoError(t, o.Err)
	require.Equal(t, int64(5), o.Offset)
	require.Equal(t, base.Add(5*time.Minute).UnixMilli(), o.Timestamp)
	native, err := tb.Client.OffsetForTime(ctx, "lo", 0, base.Add(4*time.Minute+time.Second))
	require.NoError(t, err)
	require.Equal(t, native, o.Offset)
	// After the last record: none (kadm reports the end offset then).
	at, err = adm.ListOffsetsAfterMilli(ctx, base.Add(time.Hour).UnixMilli(), "lo")
	require.NoError(t, err)
	o, _ = at.Lookup("lo", 0)
	require.NoError(t, o.Err)

	// A consumer seeking by time reads from there.
	cons := tb.kclient(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"lo": {0: kgo.NewOffset().AfterMilli(base.Add(7 * time.Minute).UnixMilli())}}))
	rs := pollN(t, ctx, cons, 3)
	require.Equal(t, int64(7), rs[0].Offset)
}

// The groups' Fetches share reads of the high watermarks, and a shared
// read can be older than the one a client's last answer came from (here:
// records published without a notification since the shared read). A
// fetch offset past the shared read's high watermark is judged on a read
// of its own: the records are answered, never OFFSET_OUT_OF_RANGE (which
// sent franz-go consumers back to their reset offset).
func TestFetchPastASharedHighWatermark(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "hw", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	publishValues(t, tb, "hw", "a", 5)
	cl := tb.kclient(t)
	fetch := func(from int64) kmsg.FetchResponseTopicPartition {
		// A long poll: its first read may share the high watermarks' read.
		resp, err := cl.Broker(0).Request(tb.Ctx, fetchReq("hw", 5*time.Second, 1, 1<<20, map[int32]int64{0: from}, 1<<20))
		require.NoError(t, err)
		return resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	p := fetch(0)
	require.Zero(t, p.ErrorCode)
	require.Equal(t, int64(5), p.HighWatermark)
	// Five more, without the notification a client sends.
	schema := pgx.Identifier{tb.Schema}.Sanitize()
	_, err = tb.Pool.Exec(tb.Ctx, `SELECT * FROM `+schema+`.publish('hw', ARRAY['b0','b1','b2','b3','b4']::bytea[], p_partition => 0, p_notify => false)`)
	require.NoError(t, err)
	p = fetch(7)
	require.Zero(t, p.ErrorCode, "offset 7 exists: not out of range")
	require.Equal(t, int64(10), p.HighWatermark)
	require.Equal(t, []int64{7, 8, 9}, decodeFetched(t, p))
}
