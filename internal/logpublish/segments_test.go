package logpublish

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// segmentEnds returns the end of each partition's segments and how many
// are listed for it. It checks what a publish relies on: the segments are
// contiguous from the partition's start, and its counter row's
// segment_end (the end publishers write below, which creators leave to
// the publishes) is within them.
func (p *testPublisher) segmentEnds(topic string) (ends map[int32]int64, segs map[int32]int) {
	p.t.Helper()
	s := pgx.Identifier{p.b.Schema}.Sanitize()
	rows, err := p.b.Pool.Query(p.ctx, `SELECT tp.partition, tp.segment_end, tp.start_offset,
	       coalesce((SELECT array_agg(g.start_offset || '-' || g.end_offset ORDER BY g.start_offset)
	                   FROM `+s+`.segment g WHERE g.topic_id = tp.topic_id AND g.partition = tp.partition), '{}')
	  FROM `+s+`.topic_partition tp JOIN `+s+`.topic t ON t.topic_id = tp.topic_id
	 WHERE t.name = $1`, topic)
	require.NoError(p.t, err)
	ends, segs = map[int32]int64{}, map[int32]int{}
	for rows.Next() {
		var (
			part              int32
			counterEnd, start int64
			list              []string
		)
		require.NoError(p.t, rows.Scan(&part, &counterEnd, &start, &list))
		end := start
		for _, r := range list {
			var lo, hi int64
			_, err := fmt.Sscanf(r, "%d-%d", &lo, &hi)
			require.NoError(p.t, err)
			require.Equal(p.t, end, lo, "partition %d segments %v", part, list)
			end = hi
		}
		require.LessOrEqual(p.t, counterEnd, end, "partition %d: the counter row's end is past its segments %v", part, list)
		ends[part], segs[part] = end, len(list)
	}
	require.NoError(p.t, rows.Err())
	return ends, segs
}

// counterEnd returns the segment_end of partition part's counter row.
func (p *testPublisher) counterEnd(topic string, part int32) int64 {
	p.t.Helper()
	s := pgx.Identifier{p.b.Schema}.Sanitize()
	var end int64
	require.NoError(p.t, p.b.Pool.QueryRow(p.ctx, `SELECT tp.segment_end FROM `+s+`.topic_partition tp
	  JOIN `+s+`.topic t ON t.topic_id = tp.topic_id WHERE t.name = $1 AND tp.partition = $2`, topic, part).Scan(&end))
	return end
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

	// A batch that reaches past the end the counter row knows (16, its
	// first segment's: _segments_ahead leaves the counter rows alone)
	// moves it to the segments' end, the publish's fallback, which creates
	// none: they reach offset 21.
	c.sqlPublish("t", 0, 20)
	c.sqlPublish("t", 2, 20)
	ends, _ = c.segmentEnds("t")
	for _, part := range []int32{0, 2} {
		require.Equal(t, int64(48), ends[part], "partition %d", part)
		require.Equal(t, int64(48), c.counterEnd("t", part), "partition %d", part)
	}
	require.Equal(t, int64(48), ends[5])
	require.Equal(t, int64(16), c.counterEnd("t", 5))

	// Partitions 0 and 2 are one segment short of their headroom (next
	// offset 21). A transaction holds the topic table's lock (as another
	// creator or a publish creating segments does) past the lock timeout:
	// nothing is created, -1 for every partition (try again).
	tx, err := c.b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	c.holdTopicTable(tx, "t")
	require.Equal(t, map[int32]int32{0: -1, 2: -1}, c.ensureMany("t", 0, 2))
	ends, segs = c.segmentEnds("t")
	require.Equal(t, int64(48), ends[0])
	require.Equal(t, int64(48), ends[2])
	require.Equal(t, 3, segs[2])
	require.Equal(t, 3+1+3+1+1+3, c.segmentTables(), "no segment table left behind")
	require.NoError(t, tx.Rollback(ctx))

	require.Equal(t, map[int32]int32{0: 1, 2: 1}, c.ensureMany("t", 2, 0))
	ends, segs = c.segmentEnds("t")
	require.Equal(t, int64(64), ends[0])
	require.Equal(t, int64(64), ends[2])
	require.Equal(t, 4, segs[2])
	require.Equal(t, int64(48), c.counterEnd("t", 2))

	// Records go into the new segments, in order: the batch reaches past
	// the counter row's end again, which moves to the segments' end.
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
	require.Equal(t, int64(64), c.counterEnd("t", 2))

	// Out of range, unknown topic: the SQL's errors, nothing created.
	_, err = c.store.SegmentEnsureMany(ctx, c.b.Pool, "t", []int32{1, 6})
	require.ErrorIs(t, err, errs.PartitionOutOfRange)
	_, err = c.store.SegmentEnsureMany(ctx, c.b.Pool, "nope", []int32{0})
	require.ErrorIs(t, err, errs.UnknownTopic)
	_, segs = c.segmentEnds("t")
	require.Equal(t, 1, segs[1])
}

// The publisher creates the segments ahead of every partition it published
// to past half of its segment, after its commits (several partitions of a
// topic in one transaction); a partition published to less keeps its one
// segment.
func TestPublisherCreatesSegmentsAhead(t *testing.T) {
	t.Parallel()
	c := newTestPublisher(t, 4, time.Minute)
	c.createTopic("t", 40, map[string]any{"segment_records": 16})
	var recs []*Record
	for part := int32(0); part < 40; part++ {
		n := 7 // 9 left of the first segment: not low
		if part%2 == 0 {
			n = 9 // 7 left, less than half: low
		}
		for range n {
			recs = append(recs, &Record{Topic: "t", Partition: part, Value: []byte("v")})
		}
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
	}, 50*time.Second, 20*time.Millisecond, "segments ahead of the partitions past half their segment")
	ends, segs := c.segmentEnds("t")
	for part := int32(1); part < 40; part += 2 {
		require.Equal(t, int64(16), ends[part], "partition %d is at half its segment", part)
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

// holdTopicTable takes, in tx, the lock segment creators take on the
// topic's table (_segment_lock), as another creator holds it until it
// ends.
func (p *testPublisher) holdTopicTable(tx pgx.Tx, topic string) {
	p.t.Helper()
	s := pgx.Identifier{p.b.Schema}.Sanitize()
	var id int32
	require.NoError(p.t, tx.QueryRow(p.ctx, `SELECT topic_id FROM `+s+`.topic WHERE name = $1`, topic).Scan(&id))
	_, err := tx.Exec(p.ctx, `LOCK TABLE `+pgx.Identifier{p.b.Schema, fmt.Sprintf("record_%d", id)}.Sanitize()+
		` IN SHARE UPDATE EXCLUSIVE MODE`)
	require.NoError(p.t, err)
}

// _segments_ahead takes no counter row: with 3 of 5 rows held by a
// publishing transaction (past the lock timeout), every partition still
// gets its headroom, and the holder goes on and commits. The counter rows
// keep the end they knew; the held transaction's later update of one
// does not undo the segments, and records go into them. A version that
// moved the counter rows after its DDL waited for the held rows and gave
// them up (-1), its DDL for them rolled back.
func TestSegmentsAheadIgnoresHeldRows(t *testing.T) {
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

	require.Equal(t, map[int32]int32{0: 2, 1: 2, 2: 2, 3: 2, 4: 2}, c.ensureMany("h", 0, 1, 2, 3, 4))
	ends, segs := c.segmentEnds("h")
	for part := int32(0); part < 5; part++ {
		require.Equal(t, int64(48), ends[part], "partition %d", part)
		require.Equal(t, 3, segs[part], "partition %d", part)
		require.Equal(t, int64(16), c.counterEnd("h", part), "partition %d", part)
	}
	require.Equal(t, before+10, c.segmentTables())
	c.holdCounterRow(tx, "h", 0)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, map[int32]int32{0: 0, 1: 0, 2: 0, 3: 0, 4: 0}, c.ensureMany("h", 4, 3, 2, 1, 0))

	// Records go into the segments created while the rows were held.
	recs := make([]*Record, 40)
	for i := range recs {
		recs[i] = &Record{Topic: "h", Partition: 0, Value: []byte(fmt.Sprint(i))}
	}
	require.NoError(t, c.publishManual(ctx, recs))
	got := c.fetch("h", 0, 1, 100)
	require.Len(t, got, 40)
	require.Equal(t, int64(40), got[39].Offset)
	require.Equal(t, int64(48), c.counterEnd("h", 0))
}

// segments_low, which makes the publisher create segments after its
// commit, reads where the segments end when the counter row's end alone
// is low: once _segments_ahead has attached the headroom, publishes with
// publish() and the direct statement stop asking for more, though their
// counter row still knows only the first segment.
func TestSegmentsLowReadsTheSegmentsEnd(t *testing.T) {
	t.Parallel()
	c := newTestPublisher(t, 4, time.Minute)
	c.createTopic("low", 1, map[string]any{"segment_records": 16})
	s := pgx.Identifier{c.b.Schema}.Sanitize()
	low := func(q string) bool {
		t.Helper()
		var v bool
		require.NoError(t, c.b.Pool.QueryRow(c.ctx, q).Scan(&v))
		return v
	}
	viaPublish := `SELECT segments_low FROM ` + s + `.publish('low', ARRAY['x'::bytea], p_partition => 0, p_notify => false)`
	viaDirect := `SELECT segments_low FROM ` + s + `._publish_direct('low', 0, ARRAY['x'::bytea], NULL, NULL, NULL)`
	for i := 1; i <= 8; i++ {
		require.False(t, low(viaPublish), "next offset %d: half of the first segment left", i)
	}
	require.True(t, low(viaPublish), "next offset 9: less than half of the first segment left")
	require.True(t, low(viaDirect), "next offset 10")
	require.Equal(t, map[int32]int32{0: 2}, c.ensureMany("low", 0))
	require.False(t, low(viaPublish), "two segments of headroom")
	require.False(t, low(viaDirect), "two segments of headroom")
	require.Equal(t, int64(16), c.counterEnd("low", 0))
}

// A REPEATABLE READ transaction whose snapshot is older than segments
// _segments_ahead attached, publishing past the counter row's end and
// past the segments it sees, fails with serialization_failure (40001:
// retry), not with the CREATE TABLE of a segment that exists (42P07).
// With the end on the counter row it failed on that row with 40001.
func TestPublishRepeatableReadPastUnseenSegments(t *testing.T) {
	t.Parallel()
	c := newTestPublisher(t, 4, time.Minute)
	ctx := c.ctx
	c.createTopic("rr", 1, map[string]any{"segment_records": 16})
	c.sqlPublish("rr", 0, 1)
	s := pgx.Identifier{c.b.Schema}.Sanitize()

	tx, err := c.b.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM `+s+`.segment`).Scan(&n))
	require.Equal(t, map[int32]int32{0: 2}, c.ensureMany("rr", 0))
	vals := make([][]byte, 40)
	for i := range vals {
		vals[i] = []byte("v")
	}
	_, err = tx.Exec(ctx, `SELECT * FROM `+s+`.publish('rr', $1, p_partition => 0, p_notify => false)`, vals)
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Equal(t, "40001", pe.Code, "%v", err)
	require.NoError(t, tx.Rollback(ctx))

	// Retried in a new transaction, it goes in.
	c.sqlPublish("rr", 0, 40)
	ends, _ := c.segmentEnds("rr")
	require.Equal(t, int64(48), ends[0])
	require.Equal(t, int64(48), c.counterEnd("rr", 0))
}
