package kafkasrv_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// span is the offsets first..last.
func span(first, last int64) []int64 {
	var out []int64
	for o := first; o <= last; o++ {
		out = append(out, o)
	}
	return out
}

// TestFetchReadMissesSegment: a read through the record table once
// returned only the records of the first of the two segments its range
// spanned (the chaos failover run, docs/reliability.md; the claims'
// TestClaimReadMissesSegment). A Kafka consumer fetches on from the last
// offset it was given + 1, so a Fetch answer with a gap, or one that
// starts past the fetch offset, skips records for good. Detaching a
// segment from the record table plays that read (the segment's table and
// its catalog row stay): every Fetch, with the record cache and without,
// must still answer the records in order from its fetch offset; one whose
// records are not stored anywhere (deleted, not compacted) fails, and a
// compacted partition's holes are answered as holes.
func TestFetchReadMissesSegment(t *testing.T) {
	t.Parallel()
	for _, cache := range []int64{0, -1} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
			t.Parallel()
			tb := setup(t, &kafkasrv.Config{FetchCacheBytes: cache})
			ctx := tb.Ctx
			s := pgx.Identifier{tb.Schema}.Sanitize()
			_, err := tb.Client.CreateTopic(ctx, "ms", pgmsg.TopicConfig{Partitions: 2, SegmentRecords: 16})
			require.NoError(t, err)
			var recs []*pgmsg.Record
			for i := range 80 {
				recs = append(recs, &pgmsg.Record{Topic: "ms", Partition: int32(i % 2), Value: fmt.Appendf(nil, "v-%d", i)})
			}
			require.NoError(t, tb.Client.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
			var topicID int32
			require.NoError(t, tb.Pool.QueryRow(ctx, `SELECT topic_id FROM `+s+`.topic WHERE name = 'ms'`).Scan(&topicID))
			cl := tb.kclient(t)
			fetch := func(partition int32, from int64) ([]int64, error) {
				parts := map[int32]int64{0: 0, 1: 0}
				req := fetchReq("ms", 0, 0, 1<<20, parts, 1<<20)
				req.Topics[0].Partitions = req.Topics[0].Partitions[partition : partition+1]
				req.Topics[0].Partitions[0].FetchOffset = from
				resp, err := cl.Broker(0).Request(ctx, req)
				if err != nil {
					return nil, err
				}
				p := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
				require.Zero(t, p.ErrorCode)
				return decodeFetched(t, p), nil
			}
			detach := func(partition int32) string {
				seg := pgx.Identifier{tb.Schema, fmt.Sprintf("record_%d_p%d_16", topicID, partition)}.Sanitize()
				_, err := tb.Pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s.%s DETACH PARTITION %s`, s,
					pgx.Identifier{fmt.Sprintf("record_%d", topicID)}.Sanitize(), seg))
				require.NoError(t, err)
				var viaRecord int
				require.NoError(t, tb.Pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.record WHERE topic_id = $1 AND partition = $2 AND "offset" BETWEEN 10 AND 39`,
					topicID, partition).Scan(&viaRecord))
				require.Equal(t, 14, viaRecord, "the record table's read misses the segment")
				return seg
			}
			detach(0)
			// Past the missing segment, into it, from its start and across
			// it: in order from the fetch offset, nothing skipped (each
			// starts before the record cache's window, when on, so each
			// reads).
			for _, from := range []int64{32, 20, 16, 10} {
				got, err := fetch(0, from)
				require.NoError(t, err, "from %d", from)
				require.Equal(t, span(from, 39), got, "from %d", from)
			}
			// Records stored nowhere: the Fetch fails, nothing is answered.
			seg1 := detach(1)
			_, err = tb.Pool.Exec(ctx, `DELETE FROM `+seg1+` WHERE "offset" BETWEEN 20 AND 22`)
			require.NoError(t, err)
			_, err = fetch(1, 10)
			require.Error(t, err, "a Fetch that misses stored records is not answered")
			cl = tb.kclient(t) // the listener closed the connection
			got, err := fetch(1, 32)
			require.NoError(t, err)
			require.Equal(t, span(32, 39), got)
		})
	}
}

// TestFetchCompactedHoles: a compacted partition's holes (below its
// compacted_to) are answered as holes, not taken for a read that missed
// records.
func TestFetchCompactedHoles(t *testing.T) {
	t.Parallel()
	tb := setup(t, &kafkasrv.Config{FetchCacheBytes: -1})
	ctx := tb.Ctx
	s := pgx.Identifier{tb.Schema}.Sanitize()
	_, err := tb.Client.CreateTopic(ctx, "cp", pgmsg.TopicConfig{Partitions: 1, SegmentRecords: 16,
		Settings: map[string]any{"cleanup_policy": "compact"}})
	require.NoError(t, err)
	var recs []*pgmsg.Record
	for i := range 40 {
		recs = append(recs, &pgmsg.Record{Topic: "cp", Key: fmt.Appendf(nil, "k-%d", i%4), Value: fmt.Appendf(nil, "v-%d", i)})
	}
	require.NoError(t, tb.Client.Publish(ctx, recs, nil))
	// compact_run skips a partition whose counter row is locked (SKIP
	// LOCKED), as it is while the publisher's after-commit work creates
	// segments ahead: run it until it has compacted the partition (CI saw
	// one run right after the publish remove nothing).
	var stored []int64
	for {
		_, err = tb.Pool.Exec(ctx, `SELECT * FROM `+s+`.compact_run(4)`)
		require.NoError(t, err)
		rows, err := tb.Pool.Query(ctx, `SELECT "offset" FROM `+s+`.record r JOIN `+s+`.topic t USING (topic_id) WHERE t.name = 'cp' ORDER BY 1`)
		require.NoError(t, err)
		stored, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		if len(stored) < 40 || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Less(t, len(stored), 40, "compaction removed records")
	cl := tb.kclient(t)
	resp, err := cl.Broker(0).Request(ctx, fetchReq("cp", 0, 0, 1<<20, map[int32]int64{0: 0}, 1<<20))
	require.NoError(t, err)
	p := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	require.Zero(t, p.ErrorCode)
	require.Equal(t, stored, decodeFetched(t, p))
}
