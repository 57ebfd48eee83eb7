package kafkasrv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkagroup"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// loseRecords plays an asynchronous failover that lost partition 0 of
// topic's records from offset from on, as the native client's and the
// mirror's tests do: the records deleted, the partition's next offset set
// back, and its last publish's timeline made another than the server's,
// as on a promoted standby; then, in the same transaction, n records
// "new0".. published on it (none when n is 0), so that no reader sees the
// shorter log in between. A notification of the topic wakes the
// listener's Fetches, as its notification connection's reconnection to
// the new primary does.
func loseRecords(t *testing.T, tb *testBundle, topic string, from int64, n int) {
	t.Helper()
	s := pgx.Identifier{tb.Schema}.Sanitize()
	tx, err := tb.Pool.Begin(tb.Ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(tb.Ctx) }()
	for _, q := range []string{
		`DELETE FROM %[1]s.record r USING %[1]s.topic t WHERE t.topic_id = r.topic_id AND t.name = $1 AND r.partition = 0 AND r."offset" >= $2`,
		`UPDATE %[1]s.topic_partition c SET next_offset = $2, log_timeline = c.log_timeline + 1000
		   FROM %[1]s.topic t WHERE t.topic_id = c.topic_id AND t.name = $1 AND c.partition = 0`,
	} {
		_, err := tx.Exec(tb.Ctx, fmt.Sprintf(q, s), topic, from)
		require.NoError(t, err)
	}
	if n > 0 {
		values := make([][]byte, n)
		for i := range values {
			values[i] = fmt.Appendf(nil, "new%d", i)
		}
		_, err := tx.Exec(tb.Ctx, `SELECT * FROM `+s+`.publish($1, $2::bytea[], p_partition => 0)`, topic, values)
		require.NoError(t, err)
	}
	_, err = tx.Exec(tb.Ctx, `SELECT pg_notify($1, $2)`, tb.Schema+"_log", topic)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(tb.Ctx))
}

// leaderEpoch is partition 0's leader epoch as Metadata answers it.
func leaderEpoch(t *testing.T, tb *testBundle, cl *kgo.Client, topic string) int32 {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(tb.Ctx, cl)
	require.NoError(t, err)
	require.Len(t, resp.Topics, 1)
	require.Zero(t, resp.Topics[0].ErrorCode)
	return resp.Topics[0].Partitions[0].LeaderEpoch
}

// epochFetch fetches partition 0 of topic from offset from naming leader
// epoch current, and returns the partition's answer.
func epochFetch(t *testing.T, tb *testBundle, cl *kgo.Client, topic string, from int64, current int32) kmsg.FetchResponseTopicPartition {
	t.Helper()
	req := fetchReq(topic, 0, 0, 1<<20, map[int32]int64{0: from}, 1<<20)
	req.Topics[0].Partitions[0].CurrentLeaderEpoch = current
	resp, err := cl.Broker(0).Request(tb.Ctx, req)
	require.NoError(t, err)
	return resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
}

// batchEpochs returns the leader epoch of every record of a fetched
// partition (its batch's PartitionLeaderEpoch), by offset.
func batchEpochs(t *testing.T, p kmsg.FetchResponseTopicPartition) map[int64]int32 {
	t.Helper()
	out := map[int64]int32{}
	raw := p.RecordBatches
	for len(raw) > 0 {
		var rb kmsg.RecordBatch
		require.NoError(t, rb.ReadFrom(raw))
		raw = raw[12+int(rb.Length):]
		for i := int64(0); i <= int64(rb.LastOffsetDelta); i++ {
			out[rb.FirstOffset+i] = rb.PartitionLeaderEpoch
		}
	}
	return out
}

// endForEpoch asks OffsetForLeaderEpoch where epoch ends on partition 0
// of topic, naming current as the current leader epoch.
func endForEpoch(t *testing.T, tb *testBundle, cl *kgo.Client, topic string, current, epoch int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.CurrentLeaderEpoch, rp.LeaderEpoch = current, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(tb.Ctx, cl.Broker(0))
	require.NoError(t, err)
	return resp.Topics[0].Partitions[0]
}

// listOffset lists partition 0 of topic at ts (-1 latest, -2 earliest)
// naming current as the current leader epoch.
func listOffset(t *testing.T, tb *testBundle, cl *kgo.Client, topic string, ts int64, current int32) kmsg.ListOffsetsResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp, rp.CurrentLeaderEpoch = ts, current
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(tb.Ctx, cl.Broker(0))
	require.NoError(t, err)
	return resp.Topics[0].Partitions[0]
}

// The leader epoch protocol (KIP-320) over a failover that lost records:
// Metadata answers the partition's log epoch, the new one as soon as the
// server is a promoted standby; Fetch, ListOffsets and
// OffsetForLeaderEpoch fence an older current leader epoch and refuse a
// newer one; record batches carry the epoch their records were published
// in; and OffsetForLeaderEpoch answers where each epoch ends.
func TestLeaderEpochs(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "le", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	publishValues(t, tb, "le", "old", 100)
	cl := tb.kclient(t)

	// Versions: OffsetForLeaderEpoch is advertised.
	versions, err := kmsg.NewPtrApiVersionsRequest().RequestWith(tb.Ctx, cl.Broker(0))
	require.NoError(t, err)
	advertised := false
	for _, k := range versions.ApiKeys {
		advertised = advertised || k.ApiKey == 23 && k.MaxVersion >= 2
	}
	require.True(t, advertised, "OffsetForLeaderEpoch v2+ is advertised")

	require.Equal(t, int32(0), leaderEpoch(t, tb, cl, "le"))
	p := epochFetch(t, tb, cl, "le", 90, 0)
	require.Zero(t, p.ErrorCode)
	require.Equal(t, map[int64]int32{90: 0, 91: 0, 92: 0, 93: 0, 94: 0, 95: 0, 96: 0, 97: 0, 98: 0, 99: 0}, batchEpochs(t, p))
	e := endForEpoch(t, tb, cl, "le", 0, 0)
	require.Equal(t, [3]int64{0, 0, 100}, [3]int64{int64(e.ErrorCode), int64(e.LeaderEpoch), e.EndOffset})

	// Offsets 60..99 lost: the promoted standby's epoch is answered
	// before anything is published on it.
	loseRecords(t, tb, "le", 60, 0)
	epoch := leaderEpoch(t, tb, cl, "le")
	require.Greater(t, epoch, int32(0))

	require.Equal(t, kerr.FencedLeaderEpoch.Code, epochFetch(t, tb, cl, "le", 100, 0).ErrorCode)
	require.Equal(t, kerr.UnknownLeaderEpoch.Code, epochFetch(t, tb, cl, "le", 50, epoch+1).ErrorCode)
	require.Equal(t, kerr.OffsetOutOfRange.Code, epochFetch(t, tb, cl, "le", 100, -1).ErrorCode, "-1 is not checked")
	p = epochFetch(t, tb, cl, "le", 55, epoch)
	require.Zero(t, p.ErrorCode)
	require.Equal(t, int64(60), p.HighWatermark)
	require.Equal(t, map[int64]int32{55: 0, 56: 0, 57: 0, 58: 0, 59: 0}, batchEpochs(t, p))

	require.Equal(t, kerr.FencedLeaderEpoch.Code, endForEpoch(t, tb, cl, "le", 0, 0).ErrorCode)
	require.Equal(t, kerr.UnknownLeaderEpoch.Code, endForEpoch(t, tb, cl, "le", epoch+1, 0).ErrorCode)
	// What a consumer that read offsets up to 99 in epoch 0 asks: epoch
	// 0 ends at 60 here, so it lost 60..99.
	e = endForEpoch(t, tb, cl, "le", epoch, 0)
	require.Equal(t, [3]int64{0, 0, 60}, [3]int64{int64(e.ErrorCode), int64(e.LeaderEpoch), e.EndOffset})
	e = endForEpoch(t, tb, cl, "le", -1, epoch)
	require.Equal(t, [2]int64{int64(epoch), 60}, [2]int64{int64(e.LeaderEpoch), e.EndOffset})
	e = endForEpoch(t, tb, cl, "le", -1, epoch+5)
	require.Equal(t, [3]int64{0, -1, -1}, [3]int64{int64(e.ErrorCode), int64(e.LeaderEpoch), e.EndOffset}, "an epoch after the current one")

	require.Equal(t, kerr.FencedLeaderEpoch.Code, listOffset(t, tb, cl, "le", -1, 0).ErrorCode)
	require.Equal(t, kerr.UnknownLeaderEpoch.Code, listOffset(t, tb, cl, "le", -1, epoch+1).ErrorCode)
	l := listOffset(t, tb, cl, "le", -1, epoch)
	require.Equal(t, [3]int64{0, 60, int64(epoch)}, [3]int64{int64(l.ErrorCode), l.Offset, int64(l.LeaderEpoch)})

	// The first publish on the new primary starts the epoch the
	// listener answered, where it said it would.
	publishValues(t, tb, "le", "new", 20)
	require.Equal(t, epoch, leaderEpoch(t, tb, cl, "le"))
	p = epochFetch(t, tb, cl, "le", 58, epoch)
	require.Zero(t, p.ErrorCode)
	got := batchEpochs(t, p)
	require.Len(t, got, 22)
	for off := int64(58); off < 80; off++ {
		want := epoch
		if off < 60 {
			want = 0
		}
		require.Equal(t, want, got[off], "offset %d", off)
	}
	e = endForEpoch(t, tb, cl, "le", epoch, 0)
	require.Equal(t, [2]int64{0, 60}, [2]int64{int64(e.LeaderEpoch), e.EndOffset})
	e = endForEpoch(t, tb, cl, "le", epoch, epoch)
	require.Equal(t, [2]int64{int64(epoch), 80}, [2]int64{int64(e.LeaderEpoch), e.EndOffset})
	// An epoch this server never had (one of the old primary's, say)
	// ends where the next one it knows began, with the last one before
	// it that it knows.
	if epoch > 1 {
		e = endForEpoch(t, tb, cl, "le", epoch, epoch-1)
		require.Equal(t, [2]int64{0, 60}, [2]int64{int64(e.LeaderEpoch), e.EndOffset})
	}
	l = listOffset(t, tb, cl, "le", -2, epoch)
	require.Equal(t, [2]int64{0, 0}, [2]int64{l.Offset, int64(l.LeaderEpoch)})
	l = listOffset(t, tb, cl, "le", -1, -1)
	require.Equal(t, [2]int64{80, int64(epoch)}, [2]int64{l.Offset, int64(l.LeaderEpoch)})
}

// pollPastLoss polls cl until it has n records after a data loss: the
// consumer must report the loss (kgo.ErrDataLoss) before it hands over
// any record, and pollPastLoss returns the last loss reported and the
// records after it. A fetch error other than the loss fails the test,
// unless tolerate is set (while the primary changes a fetch may fail),
// when it is logged.
func pollPastLoss(t *testing.T, ctx context.Context, cl *kgo.Client, n int, tolerate bool) (*kgo.ErrDataLoss, []*kgo.Record) {
	t.Helper()
	var loss *kgo.ErrDataLoss
	var after []*kgo.Record
	for len(after) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "the consumer neither reported the loss nor read the new records")
		fs.EachError(func(topic string, partition int32, err error) {
			switch {
			case errors.As(err, &loss):
			case tolerate:
				t.Logf("fetch error while the primary changes: %v", err)
			default:
				t.Fatalf("fetch error: %v", err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			require.NotNil(t, loss, "record %d (%s) was handed over before the loss was reported", r.Offset, r.Value)
			after = append(after, r)
		})
	}
	return loss, after
}

// A franz-go consumer that had read offsets 0..99 when a failover lost
// 60..99, and the new primary gave offsets 60..119 to other records, is
// fenced at its next Fetch, finds that its epoch ends at 60, and reports
// the loss (kgo.ErrDataLoss) and goes on at 60 with the new records,
// instead of reading on at 100 as if those were the records after the
// ones it processed.
func TestKafkaConsumerDetectsTruncation(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "tr", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	publishValues(t, tb, "tr", "old", 100)
	cl := tb.kclient(t,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"tr": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(tb.Ctx, time.Minute)
	defer cancel()
	recs := pollN(t, ctx, cl, 100)
	require.Equal(t, int64(99), recs[99].Offset)
	require.Equal(t, int32(0), recs[99].LeaderEpoch)

	loseRecords(t, tb, "tr", 60, 60) // the new primary's offsets 60..119 are other records

	loss, after := pollPastLoss(t, ctx, cl, 60, false)
	require.Equal(t, int64(100), loss.ConsumedTo)
	require.Equal(t, int32(0), loss.ConsumedToEpoch)
	require.Equal(t, int64(60), loss.ResetTo)
	for i, r := range after {
		require.Equal(t, int64(60+i), r.Offset)
		require.Equal(t, fmt.Sprintf("new%d", i), string(r.Value))
		require.Greater(t, r.LeaderEpoch, int32(0))
	}
}

// A franz-go group consumer through the same failover: it reports the
// loss, goes on at the end of its epoch with the new records, and its
// commits carry the new epoch (OffsetCommit keeps the committed leader
// epoch and OffsetFetch returns it). The group's cursor on the new
// primary is behind what was processed, as commits are lost with the
// records.
func TestKafkaGroupDetectsTruncation(t *testing.T) {
	t.Parallel()
	b := newEnv(t, 16, 2*time.Minute)
	groups, err := kafkagroup.New(kafkagroup.Config{Client: b.Client})
	require.NoError(t, err)
	t.Cleanup(groups.Close)
	srv, err := kafkasrv.New(kafkasrv.Config{Client: b.Client, Groups: groups})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.NoError(t, <-done)
	})
	tb := &testBundle{env: b, srv: srv, addr: ln.Addr().String()}

	_, err = tb.Client.CreateTopic(tb.Ctx, "tg", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	publishValues(t, tb, "tg", "old", 100)
	cl := tb.kclient(t, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("tg"), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(tb.Ctx, time.Minute)
	defer cancel()
	pollN(t, ctx, cl, 100)
	require.NoError(t, cl.CommitUncommittedOffsets(ctx))

	// The commit of offset 100 is lost with the records: the new
	// primary has the group at 50.
	s := pgx.Identifier{tb.Schema}.Sanitize()
	_, err = tb.Pool.Exec(tb.Ctx, `UPDATE `+s+`.group_cursor c SET next_offset = 50
		FROM `+s+`.topic t WHERE t.topic_id = c.topic_id AND t.name = 'tg'`)
	require.NoError(t, err)
	loseRecords(t, tb, "tg", 60, 60)

	loss, after := pollPastLoss(t, ctx, cl, 60, false)
	require.Equal(t, [2]int64{100, 60}, [2]int64{loss.ConsumedTo, loss.ResetTo})
	require.Equal(t, int64(60), after[0].Offset)
	require.Equal(t, "new0", string(after[0].Value))
	require.NoError(t, cl.CommitUncommittedOffsets(ctx))

	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = "g"
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "tg", []int32{0}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	p := resp.Topics[0].Partitions[0]
	require.Zero(t, p.ErrorCode)
	require.Equal(t, int64(120), p.Offset)
	require.Equal(t, leaderEpoch(t, tb, cl, "tg"), p.LeaderEpoch)
	require.Greater(t, p.LeaderEpoch, int32(0))
}
