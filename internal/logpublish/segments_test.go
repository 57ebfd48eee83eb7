package logpublish

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// sqlPublish appends n records to partition part of topic with publish()
// (no Publisher: nothing creates segments after the commit).
func (p *testPublisher) sqlPublish(topic string, part int32, n int) {
	p.t.Helper()
	vals := make([][]byte, n)
	for i := range vals {
		vals[i] = []byte("v")
	}
	_, err := p.b.Pool.Exec(p.ctx, `SELECT `+pgx.Identifier{p.b.Schema}.Sanitize()+
		`.publish($1, $2, NULL, NULL, NULL, $3, false)`, topic, vals, part)
	require.NoError(p.t, err)
}

// segmentEnds returns each partition's segment_end and the segments
// listed for it.
func (p *testPublisher) segmentEnds(topic string) (ends map[int32]int64, segs map[int32]int) {
	p.t.Helper()
	s := pgx.Identifier{p.b.Schema}.Sanitize()
	rows, err := p.b.Pool.Query(p.ctx, `SELECT tp.partition, tp.segment_end,
	       (SELECT count(*) FROM `+s+`.segment g WHERE g.topic_id = tp.topic_id AND g.partition = tp.partition)
	  FROM `+s+`.topic_partition tp JOIN `+s+`.topic t ON t.topic_id = tp.topic_id
	 WHERE t.name = $1`, topic)
	require.NoError(p.t, err)
	ends, segs = map[int32]int64{}, map[int32]int{}
	for rows.Next() {
		var (
			part int32
			end  int64
			n    int
		)
		require.NoError(p.t, rows.Scan(&part, &end, &n))
		ends[part], segs[part] = end, n
	}
	require.NoError(p.t, rows.Err())
	return ends, segs
}

// ensureMany is SegmentEnsureMany's answer by partition.
func (p *testPublisher) ensureMany(topic string, parts ...int32) map[int32]int32 {
	p.t.Helper()
	rows, err := p.store.SegmentEnsureMany(p.ctx, p.b.Pool, topic, parts)
	require.NoError(p.t, err)
	out := map[int32]int32{}
	for _, r := range rows {
		_, dup := out[r.Partition]
		require.False(p.t, dup, "partition %d answered twice", r.Partition)
		out[r.Partition] = r.Created
	}
	return out
}

// _segments_ahead (SegmentEnsureMany) creates the segments ahead of several
// partitions in one call, as segment_ensure does for one: two segments of
// headroom past each partition's next offset, none for a partition that
// has them, nothing for a partition whose counter row a publisher holds
// (-1) while the others of the run get theirs; records then go into the
// new segments.
func TestSegmentEnsureMany(t *testing.T) {
	t.Parallel()
	c := newTestPublisher(t, 4, time.Minute)
	ctx := c.ctx
	c.createTopic("t", 6, map[string]any{"segment_records": 16})
	for _, part := range []int32{0, 2, 5} {
		c.sqlPublish("t", part, 1)
	}
	// publish() itself created none: each partition has its first segment.
	ends, segs := c.segmentEnds("t")
	for part := int32(0); part < 6; part++ {
		require.Equal(t, int64(16), ends[part])
		require.Equal(t, 1, segs[part])
	}

	// Unsorted, with a duplicate: one row per partition.
	got := c.ensureMany("t", 5, 0, 2, 0)
	require.Equal(t, map[int32]int32{0: 2, 2: 2, 5: 2}, got)
	ends, segs = c.segmentEnds("t")
	for part := int32(0); part < 6; part++ {
		want, wantSegs := int64(16), 1
		if part == 0 || part == 2 || part == 5 {
			want, wantSegs = 48, 3 // next offset 1 plus two segments of 16
		}
		require.Equal(t, want, ends[part], "partition %d", part)
		require.Equal(t, wantSegs, segs[part], "partition %d", part)
	}
	require.Equal(t, map[int32]int32{0: 0, 2: 0, 5: 0}, c.ensureMany("t", 0, 2, 5), "headroom is there")
	require.Empty(t, c.ensureMany("t"), "no partitions")

	// Partitions 0 and 2 need one more segment each (next offset 21);
	// a publisher holds partition 0's counter row past the lock timeout:
	// partition 2 gets its segment, partition 0 none (-1: try again).
	c.sqlPublish("t", 0, 20)
	c.sqlPublish("t", 2, 20)
	tx, err := c.b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	c.holdCounterRow(tx, "t", 0)
	require.Equal(t, map[int32]int32{0: -1, 2: 1}, c.ensureMany("t", 0, 2))
	ends, segs = c.segmentEnds("t")
	require.Equal(t, int64(48), ends[0])
	require.Equal(t, int64(64), ends[2])
	require.Equal(t, 3, segs[0])
	require.Equal(t, 4, segs[2])
	require.Equal(t, 3+3+4+1+1+1, c.segmentTables(), "no segment table left behind")
	require.NoError(t, tx.Rollback(ctx))

	require.Equal(t, map[int32]int32{0: 1, 2: 0}, c.ensureMany("t", 2, 0))
	ends, _ = c.segmentEnds("t")
	require.Equal(t, int64(64), ends[0])
	require.Equal(t, int64(64), ends[2])

	// Records go into the new segments, in order.
	recs := make([]*Record, 40)
	for i := range recs {
		recs[i] = &Record{Topic: "t", Partition: 2, Value: []byte(fmt.Sprint(i))}
	}
	require.NoError(t, c.publishManual(ctx, recs))
	got2 := c.fetch("t", 2, 21, 100)
	require.Len(t, got2, 40)
	for i, r := range got2 {
		require.Equal(t, int64(21+i), r.Offset)
		require.Equal(t, []byte(fmt.Sprint(i)), r.Value)
	}

	// Out of range, unknown topic: the SQL's errors, nothing created.
	_, err = c.store.SegmentEnsureMany(ctx, c.b.Pool, "t", []int32{1, 6})
	require.ErrorIs(t, err, errs.PartitionOutOfRange)
	_, err = c.store.SegmentEnsureMany(ctx, c.b.Pool, "nope", []int32{0})
	require.ErrorIs(t, err, errs.UnknownTopic)
	_, segs = c.segmentEnds("t")
	require.Equal(t, 1, segs[1])
}

// The publisher creates the segments ahead of every partition it published
// to, after its commits (several partitions of a topic in one transaction).
func TestPublisherCreatesSegmentsAhead(t *testing.T) {
	t.Parallel()
	c := newTestPublisher(t, 4, time.Minute)
	c.createTopic("t", 40, map[string]any{"segment_records": 16})
	var recs []*Record
	for part := int32(0); part < 40; part += 2 {
		recs = append(recs, &Record{Topic: "t", Partition: part, Value: []byte("v")})
	}
	require.NoError(t, c.publishManual(c.ctx, recs))
	require.Eventually(t, func() bool {
		ends, _ := c.segmentEnds("t")
		for part := int32(0); part < 40; part += 2 {
			if ends[part] != 48 {
				return false
			}
		}
		return true
	}, 50*time.Second, 20*time.Millisecond, "segments ahead of the published partitions")
	ends, segs := c.segmentEnds("t")
	for part := int32(1); part < 40; part += 2 {
		require.Equal(t, int64(16), ends[part], "partition %d was not published to", part)
		require.Equal(t, 1, segs[part])
	}
}

// segmentRuns groups pending partitions by topic, in lock order, in runs
// of at most segmentRunMax.
func TestSegmentRuns(t *testing.T) {
	t.Parallel()
	var segs []topicPartition
	for p := int32(segmentRunMax + 3); p >= 0; p-- {
		segs = append(segs, topicPartition{"b", p})
	}
	segs = append(segs, topicPartition{"a", 7}, topicPartition{"a", 1})
	runs := segmentRuns(segs)
	require.Len(t, runs, 3)
	require.Equal(t, segmentRun{topic: "a", partitions: []int32{1, 7}}, runs[0])
	require.Equal(t, "b", runs[1].topic)
	require.Len(t, runs[1].partitions, segmentRunMax)
	for i, p := range runs[1].partitions {
		require.Equal(t, int32(i), p)
	}
	require.Equal(t, segmentRun{topic: "b", partitions: []int32{segmentRunMax, segmentRunMax + 1, segmentRunMax + 2, segmentRunMax + 3}}, runs[2])
	require.Empty(t, segmentRuns(nil))
}

// Unkeyed calls spread over idle partitions until maxSendingPartitions of
// the topic have a send in flight; then they go to one of those, to merge
// with the calls queued there.
func TestIdlePartitionJoinsSendingOnes(t *testing.T) {
	t.Parallel()
	p := &Publisher{}
	const partitions = 256
	sending := map[int32]bool{}
	for i := int32(0); i < maxSendingPartitions-1; i++ {
		part := i * 31 % partitions
		p.laneBusy("t", part)
		sending[part] = true
	}
	outside := false
	for i := 0; i < 200 && !outside; i++ {
		part := p.idlePartition("t", partitions)
		require.True(t, part >= 0 && part < partitions)
		outside = !sending[part]
	}
	require.True(t, outside, "below the bound, calls go to other partitions too")

	p.laneBusy("t", 255)
	sending[255] = true
	for i := 0; i < 200; i++ {
		part := p.idlePartition("t", partitions)
		require.True(t, sending[part], "partition %d has no send in flight", part)
	}
	// Another topic's calls are not bound to "t"'s partitions.
	otherSeen := map[int32]bool{}
	for i := 0; i < 200; i++ {
		otherSeen[p.idlePartition("other", 6)] = true
	}
	require.Greater(t, len(otherSeen), 1)
	p.laneIdle("t", 255)
	p.laneIdle("t", 0)
	require.Len(t, p.sendingTo("t").parts, maxSendingPartitions-2)
	require.Empty(t, p.sendingTo("other").parts)
}

// holdCounterRow takes the counter row lock of partition part of topic in
// tx, as a publishing transaction holds it until it ends.
func (p *testPublisher) holdCounterRow(tx pgx.Tx, topic string, part int32) {
	p.t.Helper()
	s := pgx.Identifier{p.b.Schema}.Sanitize()
	_, err := tx.Exec(p.ctx, `UPDATE `+s+`.topic_partition tp SET next_offset = tp.next_offset
	  FROM `+s+`.topic t WHERE t.topic_id = tp.topic_id AND t.name = $1 AND tp.partition = $2`, topic, part)
	require.NoError(p.t, err)
}

// segmentTables counts the segment tables of the test's schema.
func (p *testPublisher) segmentTables() int {
	p.t.Helper()
	var n int
	require.NoError(p.t, p.b.Pool.QueryRow(p.ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace
	   AND relname LIKE 'record\_%\_p%\_%' AND relkind = 'r'`, p.b.Schema).Scan(&n))
	return n
}

// A run of _segments_ahead gives up only the partitions whose counter rows
// a publisher holds past the lock timeout: with 3 of 5 rows held by one
// transaction, the 2 free partitions still get their headroom, the held
// ones nothing (and no table left behind), and once the rows are released
// the next call creates theirs. A lock that does not conflict with the
// counter row's update (the KEY SHARE a foreign key check takes) does not
// make a partition busy.
func TestSegmentsAheadSkipsHeldRows(t *testing.T) {
	t.Parallel()
	c := newTestPublisher(t, 4, time.Minute)
	ctx := c.ctx
	c.createTopic("h", 5, map[string]any{"segment_records": 16})
	for part := int32(0); part < 5; part++ {
		c.sqlPublish("h", part, 1)
	}
	before := c.segmentTables()

	tx, err := c.b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, part := range []int32{0, 1, 3} {
		c.holdCounterRow(tx, "h", part)
	}
	s := pgx.Identifier{c.b.Schema}.Sanitize()
	_, err = tx.Exec(ctx, `SELECT 1 FROM `+s+`.topic_partition tp JOIN `+s+`.topic t ON t.topic_id = tp.topic_id
	 WHERE t.name = 'h' AND tp.partition = 4 FOR KEY SHARE OF tp`)
	require.NoError(t, err)

	require.Equal(t, map[int32]int32{0: -1, 1: -1, 2: 2, 3: -1, 4: 2}, c.ensureMany("h", 0, 1, 2, 3, 4))
	ends, segs := c.segmentEnds("h")
	for part := int32(0); part < 5; part++ {
		want, wantSegs := int64(16), 1
		if part == 2 || part == 4 {
			want, wantSegs = 48, 3
		}
		require.Equal(t, want, ends[part], "partition %d", part)
		require.Equal(t, wantSegs, segs[part], "partition %d", part)
	}
	require.Equal(t, before+4, c.segmentTables(), "tables of the held partitions' segments")
	// The call left the rows it skipped as they were: the holder goes on
	// and commits.
	c.holdCounterRow(tx, "h", 0)
	require.NoError(t, tx.Commit(ctx))

	require.Equal(t, map[int32]int32{0: 2, 1: 2, 2: 0, 3: 2, 4: 0}, c.ensureMany("h", 4, 3, 2, 1, 0))
	ends, segs = c.segmentEnds("h")
	for part := int32(0); part < 5; part++ {
		require.Equal(t, int64(48), ends[part], "partition %d", part)
		require.Equal(t, 3, segs[part], "partition %d", part)
	}
	require.Equal(t, before+10, c.segmentTables())

	// Records go into the segments created while others were held.
	recs := make([]*Record, 40)
	for i := range recs {
		recs[i] = &Record{Topic: "h", Partition: 2, Value: []byte(fmt.Sprint(i))}
	}
	require.NoError(t, c.publishManual(ctx, recs))
	got := c.fetch("h", 2, 1, 100)
	require.Len(t, got, 40)
	require.Equal(t, int64(40), got[39].Offset)
}
