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
