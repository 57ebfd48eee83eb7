package pgmsg_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// TestTopicOffsets: TopicOffsets answers what LogMetrics answers for the
// partitions, sizes aside, after publishes that span segments.
func TestTopicOffsets(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "a", 2)
	tb.topic(t, "b", 1)
	var recs []*pgmsg.Record
	for range 150 {
		recs = append(recs, &pgmsg.Record{Topic: "a", Value: []byte("x")}, &pgmsg.Record{Topic: "b", Value: []byte("y")})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))
	// After the publish the client creates segments ahead in the
	// background, so a segment may be added between the two reads: read
	// both again until they describe the same state (segment creation
	// stops at two segments ahead).
	var want, got []pgmsg.PartitionMetrics
	for try := 0; ; try++ {
		var err error
		want, _, err = tb.client.LogMetrics(tb.ctx)
		require.NoError(t, err)
		got, err = tb.client.TopicOffsets(tb.ctx)
		require.NoError(t, err)
		require.Len(t, got, 3)
		for i := range want {
			require.Positive(t, want[i].Bytes)
			want[i].Bytes = 0
		}
		if try == 50 || assert.ObjectsAreEqual(want, got) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, want, got)
	require.EqualValues(t, 150, got[2].EndOffset, "topic b")
	require.Greater(t, got[2].Segments, 1, "150 records of 64 a segment")
}

// LogMetrics' oldest unconsumed record of a lagging group is the record at
// its cursor, found in the segment that holds it (offsets 100 and 64 are in
// the second segment of 64, offset 0 in the first); a group caught up has
// none.
func TestGroupMetricsOldestUnconsumed(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "o", 1)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := make([]*pgmsg.Record, 150)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: "o", Value: []byte("x"), Timestamp: t0.Add(time.Duration(i) * time.Second)}
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))
	cursors := map[string]int64{"at0": 0, "at64": 64, "at100": 100, "done": 150}
	for g, off := range cursors {
		_, err := tb.client.CreateGroup(tb.ctx, "o", g, pgmsg.PositionEarliest)
		require.NoError(t, err)
		commitTo(t, tb, "o", g, off)
	}
	_, groups, err := tb.client.LogMetrics(tb.ctx)
	require.NoError(t, err)
	require.Len(t, groups, len(cursors))
	for _, g := range groups {
		off := cursors[g.Group]
		require.Equal(t, off, g.NextOffset, g.Group)
		if off == 150 {
			require.True(t, g.OldestUnconsumed.IsZero(), "caught up: %v", g.OldestUnconsumed)
			continue
		}
		require.True(t, t0.Add(time.Duration(off)*time.Second).Equal(g.OldestUnconsumed), "%s: %v", g.Group, g.OldestUnconsumed)
	}
}
