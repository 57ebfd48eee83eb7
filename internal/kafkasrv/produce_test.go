package kafkasrv_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

// produceOne sends req to the listener's broker and returns the answer
// of its one partition.
func produceOne(t *testing.T, tb *testBundle, cl *kgo.Client, req *kmsg.ProduceRequest) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	resp, err := cl.Broker(0).Request(tb.Ctx, req)
	require.NoError(t, err)
	pr := resp.(*kmsg.ProduceResponse)
	require.Len(t, pr.Topics, 1)
	require.Len(t, pr.Topics[0].Partitions, 1)
	return pr.Topics[0].Partitions[0]
}

func endOffset(t *testing.T, tb *testBundle, topic string, partition int32) int64 {
	t.Helper()
	d, err := tb.Client.DescribeTopic(tb.Ctx, topic)
	require.NoError(t, err)
	return d.PartitionInfo[partition].NextOffset
}

// A batch with a record over the topic's max size is refused with
// MESSAGE_TOO_LARGE and none of its records is stored; a CRC mismatch or
// a truncated batch is CORRUPT_MESSAGE, nothing stored, and the
// connection serves the next request.
func TestProduceRefusals(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "small", pgmsg.TopicConfig{Partitions: 1, MaxRecordBytes: 1000})
	require.NoError(t, err)
	cl := tb.kclient(t)

	big := rawBatch(-1, -1, -1, time.Now().UnixMilli(), rawRecord{value: []byte("ok")}, rawRecord{value: bytes.Repeat([]byte("x"), 2000)})
	p := produceOne(t, tb, cl, produceReq("small", 0, big))
	require.Equal(t, kerr.MessageTooLarge.Code, p.ErrorCode)
	require.Equal(t, int64(0), endOffset(t, tb, "small", 0))

	bad := rawBatch(-1, -1, -1, time.Now().UnixMilli(), rawRecord{value: []byte("a")}, rawRecord{value: []byte("b")})
	bad[len(bad)-1] ^= 0xff
	p = produceOne(t, tb, cl, produceReq("small", 0, bad))
	require.Equal(t, kerr.CorruptMessage.Code, p.ErrorCode)

	good := rawBatch(-1, -1, -1, time.Now().UnixMilli(), rawRecord{value: []byte("a")}, rawRecord{value: []byte("b")})
	p = produceOne(t, tb, cl, produceReq("small", 0, good[:len(good)-3]))
	require.Equal(t, kerr.CorruptMessage.Code, p.ErrorCode)
	require.Equal(t, int64(0), endOffset(t, tb, "small", 0))

	p = produceOne(t, tb, cl, produceReq("missing", 0, good))
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, p.ErrorCode)
	p = produceOne(t, tb, cl, produceReq("small", 7, good))
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, p.ErrorCode)

	p = produceOne(t, tb, cl, produceReq("small", 0, good))
	require.Equal(t, int16(0), p.ErrorCode)
	require.Equal(t, int64(0), p.BaseOffset)
	require.Equal(t, int64(2), endOffset(t, tb, "small", 0))

	// A transactional produce is refused with Kafka's code, not a
	// dropped connection.
	req := produceReq("small", 0, good)
	txn := "t"
	req.TransactionID = &txn
	p = produceOne(t, tb, cl, req)
	require.Equal(t, kerr.TransactionalIDAuthorizationFailed.Code, p.ErrorCode)
	require.Equal(t, int64(2), endOffset(t, tb, "small", 0))
}

// acks 0, 1 and all all store the records: acks=0 gets no answer, and
// the next request on the connection is answered in order.
func TestProduceAcks(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "acks", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	for _, acks := range []kgo.Acks{kgo.NoAck(), kgo.LeaderAck(), kgo.AllISRAcks()} {
		cl := tb.kclient(t, kgo.RequiredAcks(acks), kgo.DisableIdempotentWrite())
		require.NoError(t, cl.ProduceSync(tb.Ctx, &kgo.Record{Topic: "acks", Value: []byte("v")}).FirstErr())
		cl.Close()
	}
	// acks=0 is answered by nothing: wait for the record to be stored by
	// reading through Kafka, which also proves the connection lived on.
	cons := tb.kclient(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"acks": {0: kgo.NewOffset().AtStart()}}))
	recs := pollN(t, tb.Ctx, cons, 3)
	for i, r := range recs {
		require.Equal(t, int64(i), r.Offset)
	}
}

// An idempotent producer's batch retried is stored once (same base
// offset, the second answer a duplicate), also from a new connection (the
// sequences are in PostgreSQL); an earlier batch resent answers
// DUPLICATE_SEQUENCE_NUMBER and one overlapping the last stored one
// OUT_OF_ORDER_SEQUENCE_NUMBER, neither stored. The same rule holds on
// both paths: the one statement of _kafka_publish(), and the transaction
// of a topic with backpressure settings, which _publish_direct() leaves
// to publish().
func TestProduceIdempotent(t *testing.T) {
	t.Parallel()
	for _, backpressure := range []bool{false, true} {
		t.Run(fmt.Sprintf("backpressure=%v", backpressure), func(t *testing.T) {
			t.Parallel()
			testProduceIdempotent(t, backpressure)
		})
	}
}

func testProduceIdempotent(t *testing.T, backpressure bool) {
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "idem", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	if backpressure {
		_, err = tb.Client.SetTopicSettings(tb.Ctx, "idem", map[string]any{"max_lag_records": 1000000})
		require.NoError(t, err)
	}
	cl := tb.kclient(t)
	ipr, err := cl.Broker(0).Request(tb.Ctx, kmsg.NewPtrInitProducerIDRequest())
	require.NoError(t, err)
	init := ipr.(*kmsg.InitProducerIDResponse)
	require.Equal(t, int16(0), init.ErrorCode)
	require.GreaterOrEqual(t, init.ProducerID, int64(0))
	pid, epoch := init.ProducerID, init.ProducerEpoch

	ts := time.Now().UnixMilli()
	b0 := rawBatch(pid, epoch, 0, ts, rawRecord{value: []byte("a")}, rawRecord{value: []byte("b")})
	p := produceOne(t, tb, cl, produceReq("idem", 0, b0))
	require.Equal(t, int16(0), p.ErrorCode)
	require.Equal(t, int64(0), p.BaseOffset)
	p = produceOne(t, tb, cl, produceReq("idem", 0, b0))
	require.Equal(t, int16(0), p.ErrorCode)
	require.Equal(t, int64(0), p.BaseOffset, "a retry answers the stored offset")
	require.Equal(t, int64(2), endOffset(t, tb, "idem", 0))

	gap := rawBatch(pid, epoch, 3, ts, rawRecord{value: []byte("gap")})
	p = produceOne(t, tb, cl, produceReq("idem", 0, gap))
	require.Equal(t, kerr.OutOfOrderSequenceNumber.Code, p.ErrorCode, "no gap in a producer's sequences")
	b1 := rawBatch(pid, epoch, 2, ts, rawRecord{value: []byte("c")})
	p = produceOne(t, tb, cl, produceReq("idem", 0, b1))
	require.Equal(t, int16(0), p.ErrorCode)
	require.Equal(t, int64(2), p.BaseOffset)

	// From another connection: still the same producer's state.
	cl2 := tb.kclient(t)
	p = produceOne(t, tb, cl2, produceReq("idem", 0, b1))
	require.Equal(t, int16(0), p.ErrorCode)
	require.Equal(t, int64(2), p.BaseOffset)
	require.Equal(t, int64(3), endOffset(t, tb, "idem", 0))

	// b0, stored before b1, resent: a duplicate, not stored again.
	p = produceOne(t, tb, cl2, produceReq("idem", 0, b0))
	require.Equal(t, kerr.DuplicateSequenceNumber.Code, p.ErrorCode)
	require.Equal(t, int64(3), endOffset(t, tb, "idem", 0))
	// A batch overlapping the last stored one is out of order.
	over := rawBatch(pid, epoch, 1, ts, rawRecord{value: []byte("x")}, rawRecord{value: []byte("y")}, rawRecord{value: []byte("z")})
	p = produceOne(t, tb, cl2, produceReq("idem", 0, over))
	require.Equal(t, kerr.OutOfOrderSequenceNumber.Code, p.ErrorCode)
	require.Equal(t, int64(3), endOffset(t, tb, "idem", 0))

	// A new producer id starts its own sequences.
	ipr, err = cl2.Broker(0).Request(tb.Ctx, kmsg.NewPtrInitProducerIDRequest())
	require.NoError(t, err)
	require.NotEqual(t, pid, ipr.(*kmsg.InitProducerIDResponse).ProducerID)

	// Transactional producers are refused with Kafka's code.
	req := kmsg.NewPtrInitProducerIDRequest()
	txn := "txn"
	req.TransactionalID = &txn
	ipr, err = cl2.Broker(0).Request(tb.Ctx, req)
	require.NoError(t, err)
	require.Equal(t, kerr.TransactionalIDAuthorizationFailed.Code, ipr.(*kmsg.InitProducerIDResponse).ErrorCode)
}

// A null value (a compaction tombstone) and a null key stay null both
// ways; an empty value stays empty.
func TestNullValues(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "nulls", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	cl := tb.kclient(t)
	require.NoError(t, cl.ProduceSync(tb.Ctx, &kgo.Record{Topic: "nulls", Key: []byte("k"), Value: nil},
		&kgo.Record{Topic: "nulls", Key: nil, Value: []byte{}}).FirstErr())
	got, err := tb.Client.Fetch(tb.Ctx, "nulls", 0, 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Nil(t, got[0].Value)
	require.Nil(t, got[1].Key)
	require.NotNil(t, got[1].Value)
	cons := tb.kclient(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"nulls": {0: kgo.NewOffset().AtStart()}}))
	rs := pollN(t, tb.Ctx, cons, 2)
	require.Nil(t, rs[0].Value)
	require.Equal(t, []byte("k"), rs[0].Key)
	require.Nil(t, rs[1].Key)
	require.NotNil(t, rs[1].Value)
	require.Empty(t, rs[1].Value)
}

// Idempotent producers' batches that queue behind a partition's running
// round are stored in the next round with one commit: one transaction
// (one xmin) holds all of them, in contiguous offsets, each answered
// with the base offset of its own first record.
func TestProduceRoundOneCommit(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "round", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	const producers, per = 4, 3
	batches := make([][]*pgmsg.Record, producers)
	for p := range batches {
		for i := range per {
			batches[p] = append(batches[p], &pgmsg.Record{Topic: "round", Partition: 0, Value: []byte(fmt.Sprintf("p%d-%d", p, i))})
		}
	}
	bases, errs := tb.srv.StoreRound("round", 0, batches)
	for p := range batches {
		require.NoError(t, errs[p])
		var v []byte
		require.NoError(t, tb.Pool.QueryRow(tb.Ctx, fmt.Sprintf(`SELECT r.value FROM %q.record r WHERE r."offset" = $1`, tb.Schema), bases[p]).Scan(&v))
		require.Equal(t, fmt.Sprintf("p%d-0", p), string(v), "batch %d's base offset %d", p, bases[p])
	}
	var n, xacts int
	var lo, hi int64
	require.NoError(t, tb.Pool.QueryRow(tb.Ctx, fmt.Sprintf(`SELECT count(*), count(DISTINCT xmin::text), min("offset"), max("offset") FROM %q.record`, tb.Schema)).Scan(&n, &xacts, &lo, &hi))
	require.Equal(t, producers*per, n)
	require.Equal(t, 1, xacts, "transactions that stored the round")
	require.Equal(t, int64(0), lo)
	require.Equal(t, int64(producers*per-1), hi)
}

// A batch large enough for COPY in a round goes alone (COPY stores its
// rows for less than the shared transaction does); the small ones around
// it share commits.
func TestProduceRoundLargeBatchAlone(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "mixed", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	sizes := []int{2, 2, 16, 2}
	batches := make([][]*pgmsg.Record, len(sizes))
	for p, n := range sizes {
		for i := range n {
			batches[p] = append(batches[p], &pgmsg.Record{Topic: "mixed", Partition: 0, Value: []byte(fmt.Sprintf("p%d-%d", p, i))})
		}
	}
	bases, errs := tb.srv.StoreRound("mixed", 0, batches)
	xmin := make([]string, len(sizes))
	for p := range batches {
		require.NoError(t, errs[p])
		require.NoError(t, tb.Pool.QueryRow(tb.Ctx, fmt.Sprintf(`SELECT xmin::text FROM %q.record r WHERE r."offset" = $1`, tb.Schema), bases[p]).Scan(&xmin[p]))
	}
	var n, xacts int
	require.NoError(t, tb.Pool.QueryRow(tb.Ctx, fmt.Sprintf(`SELECT count(*), count(DISTINCT xmin::text) FROM %q.record`, tb.Schema)).Scan(&n, &xacts))
	require.Equal(t, 22, n)
	for p, x := range xmin {
		if p != 2 {
			require.NotEqual(t, xmin[2], x, "the 16-record batch shared producer %d's transaction", p)
		}
	}
	require.LessOrEqual(t, xacts, 3, "the small batches either side of the large one share commits")
}
