package kafkacompat

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFetchEmptyRecordsNotNull: a Fetch that returns nothing for a
// partition (here at its end, the long poll's max wait elapsed) carries an
// empty record set, not a null one. librdkafka (kcat,
// confluent-kafka-python) refuses a null one ("invalid MessageSetSize
// -1", "Protocol parse failure for Fetch v11"), retries the fetch forever
// and never reports the partition's end (kcat -e hangs). kmsg decodes a
// null as a nil slice and an empty one as a non-nil empty slice.
func TestFetchEmptyRecordsNotNull(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		tg.createTopic(t, "fetch-empty", 1)
		cl, err := kgo.NewClient(kgo.SeedBrokers(tg.seeds...))
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		md := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr("fetch-empty")
		md.Topics = append(md.Topics, mt)
		mresp, err := md.RequestWith(ctx, cl)
		require.NoError(t, err)
		require.Len(t, mresp.Topics, 1)
		for _, version := range []int16{4, 11, 12} {
			req := kmsg.NewPtrFetchRequest()
			req.SetVersion(version)
			req.ReplicaID = -1
			req.MaxWaitMillis = 10
			req.MaxBytes = 1 << 20
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = "fetch-empty"
			rt.TopicID = mresp.Topics[0].TopicID
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition = 0
			rp.FetchOffset = 0
			rp.PartitionMaxBytes = 1 << 20
			rp.CurrentLeaderEpoch = -1
			rp.LogStartOffset = -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp, err := cl.Broker(int(mresp.Topics[0].Partitions[0].Leader)).Request(ctx, req)
			require.NoError(t, err)
			fr := resp.(*kmsg.FetchResponse)
			require.Zero(t, fr.ErrorCode)
			require.Len(t, fr.Topics, 1)
			require.Len(t, fr.Topics[0].Partitions, 1)
			p := fr.Topics[0].Partitions[0]
			require.Zero(t, p.ErrorCode, "Fetch v%d", version)
			require.Zero(t, p.HighWatermark)
			require.NotNil(t, p.RecordBatches, "Fetch v%d: the partition's records are null; an empty partition answers an empty record set", version)
			require.Empty(t, p.RecordBatches)
		}
	})
}
