package kafkasrv_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

// fetchValues fetches partition 0 of topic from offset from and returns
// each record's value by offset.
func fetchValues(t *testing.T, tb *testBundle, topic string, from int64) map[int64]string {
	t.Helper()
	cl := tb.kclient(t)
	resp, err := cl.Broker(0).Request(tb.Ctx, fetchReq(topic, 0, 0, 1<<20, map[int32]int64{0: from}, 1<<20))
	require.NoError(t, err)
	p := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	require.Zero(t, p.ErrorCode)
	out := map[int64]string{}
	raw := p.RecordBatches
	for len(raw) > 0 {
		var rb kmsg.RecordBatch
		require.NoError(t, rb.ReadFrom(raw))
		raw = raw[12+int(rb.Length):]
		recs := rb.Records
		for range rb.NumRecords {
			var r kmsg.Record
			require.NoError(t, r.ReadFrom(recs))
			out[rb.FirstOffset+int64(r.OffsetDelta)] = string(r.Value)
			recs = recs[len(r.AppendTo(nil)):]
		}
	}
	return out
}

func publishValues(t *testing.T, tb *testBundle, topic, prefix string, n int) {
	t.Helper()
	recs := make([]*pgmsg.Record, n)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: topic, Partition: 0, Value: fmt.Appendf(nil, "%s%d", prefix, i)}
	}
	require.NoError(t, tb.Client.Publish(tb.Ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
}

// A second group's Fetch of records another group fetched takes them from
// the listener's record cache, with the same answer; records published
// since are read and answered too.
func TestFetchCacheSharesReads(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "c", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	publishValues(t, tb, "c", "a", 10)
	first := fetchValues(t, tb, "c", 0)
	require.Len(t, first, 10)
	served := tb.srv.FetchCacheServed()
	require.Equal(t, first, fetchValues(t, tb, "c", 0))
	require.Equal(t, served+10, tb.srv.FetchCacheServed(), "the second read is the cache's")

	publishValues(t, tb, "c", "b", 5)
	got := fetchValues(t, tb, "c", 3)
	require.Len(t, got, 12)
	for off := int64(3); off < 15; off++ {
		want := fmt.Sprintf("a%d", off)
		if off >= 10 {
			want = fmt.Sprintf("b%d", off-10)
		}
		require.Equal(t, want, got[off], "offset %d", off)
	}
}

// After the log is truncated under a new log epoch (what the first
// publish on a promoted standby that lacked the old primary's last
// records does), a Fetch answers the new records at the reused offsets,
// never the cached ones of the old epoch.
func TestFetchCacheDropsAnOldEpoch(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "e", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	publishValues(t, tb, "e", "old", 10)
	require.Len(t, fetchValues(t, tb, "e", 0), 10)
	require.Len(t, fetchValues(t, tb, "e", 0), 10)

	// Offsets 5..9 lost, as on a standby that had not received them, and
	// a new epoch, as the first publish on its timeline starts one.
	schema := pgx.Identifier{tb.Schema}.Sanitize()
	var topicID int32
	require.NoError(t, tb.Pool.QueryRow(tb.Ctx, `SELECT topic_id FROM `+schema+`.topic WHERE name = 'e'`).Scan(&topicID))
	_, err = tb.Pool.Exec(tb.Ctx, `DELETE FROM `+schema+`.record WHERE topic_id = $1 AND partition = 0 AND "offset" >= 5`, topicID)
	require.NoError(t, err)
	_, err = tb.Pool.Exec(tb.Ctx, `UPDATE `+schema+`.topic_partition SET next_offset = 5, log_epoch = log_epoch + 1
		WHERE topic_id = $1 AND partition = 0`, topicID)
	require.NoError(t, err)
	// A failover's new primary is noticed by the listener's notification
	// connection, which reconnects and wakes everyone; here a
	// notification of the topic says the same. The high watermark the
	// listener read before serves at most partitionsMaxAge.
	_, err = tb.Pool.Exec(tb.Ctx, `SELECT pg_notify($1, 'e')`, tb.Schema+"_log")
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	var got map[int64]string
	for {
		got = fetchValues(t, tb, "e", 0)
		if len(got) == 5 || time.Now().After(deadline) {
			break
		}
	}
	require.Len(t, got, 5, "nothing past the new high watermark")
	publishValues(t, tb, "e", "new", 5)
	deadline = time.Now().Add(10 * time.Second)
	for {
		got = fetchValues(t, tb, "e", 0)
		if len(got) == 10 || time.Now().After(deadline) {
			break
		}
	}
	require.Len(t, got, 10)
	for off := int64(0); off < 10; off++ {
		want := fmt.Sprintf("old%d", off)
		if off >= 5 {
			want = fmt.Sprintf("new%d", off-5)
		}
		require.Equal(t, want, got[off], "offset %d", off)
	}
}
