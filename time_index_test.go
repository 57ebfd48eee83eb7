package pgmsg_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// OffsetForTime answers Kafka's ListOffsets by timestamp (the first offset
// whose timestamp is at or after t) exactly, with and without the time
// index, with timestamps out of order, and after records that made an
// entry were deleted.
func TestOffsetForTime(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "tt", 1)
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	const n = 3000
	recs := make([]*pgmsg.Record, n)
	for i := range recs {
		ts := base.Add(time.Duration(i) * time.Second)
		switch {
		case i%500 == 250:
			ts = ts.Add(24 * time.Hour) // a record from the future
		case i%300 == 7:
			ts = ts.Add(-time.Hour) // a late one
		}
		recs[i] = &pgmsg.Record{Topic: "tt", Partition: 0, Value: []byte{byte(i)}, Timestamp: ts}
	}
	for i := 0; i < n; i += 500 {
		require.NoError(t, tb.client.Publish(tb.ctx, recs[i:i+500], nil))
	}
	var stored []*pgmsg.Record
	for from := int64(0); from < n; {
		page, err := tb.client.Fetch(tb.ctx, "tt", 0, from, 1000)
		require.NoError(t, err)
		require.NotEmpty(t, page)
		stored = append(stored, page...)
		from = page[len(page)-1].Offset + 1
	}
	want := func(at time.Time) int64 {
		for _, r := range stored {
			if !r.Timestamp.Before(at) {
				return r.Offset
			}
		}
		return int64(n)
	}
	probes := []time.Time{base.Add(-2 * time.Hour), base, base.Add(time.Second), base.Add(250 * time.Second),
		base.Add(251 * time.Second), base.Add(1234500 * time.Millisecond), base.Add(2999 * time.Second),
		base.Add(3000 * time.Second), base.Add(20 * time.Hour), base.Add(24*time.Hour + 251*time.Second), base.Add(48 * time.Hour)}
	check := func(stage string) {
		t.Helper()
		for _, at := range probes {
			got, err := tb.client.OffsetForTime(tb.ctx, "tt", 0, at)
			require.NoError(t, err)
			require.Equal(t, want(at), got, "%s: %s", stage, at)
		}
	}
	check("no index")
	all, err := tb.client.OffsetsForTime(tb.ctx, "tt", base.Add(251*time.Second))
	require.NoError(t, err)
	require.Equal(t, []pgmsg.PartitionOffset{{Partition: 0, Offset: want(base.Add(251 * time.Second))}}, all)

	q := pgx.Identifier{tb.Schema}.Sanitize()
	var entries int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT `+q+`.time_index_run(p_stride => 100)`).Scan(&entries))
	require.Equal(t, n/100, entries)
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT `+q+`.time_index_run(p_stride => 100)`).Scan(&entries))
	require.Zero(t, entries, "nothing new")
	check("indexed")

	// Compaction-like deletion of the records from the future: entries
	// still say their spans hold a late timestamp; the answer stays exact.
	_, err = tb.Pool.Exec(tb.ctx, `DELETE FROM `+q+`.record WHERE "timestamp" > $1`, base.Add(12*time.Hour))
	require.NoError(t, err)
	filtered := stored[:0]
	for _, r := range stored {
		if !r.Timestamp.After(base.Add(12 * time.Hour)) {
			filtered = append(filtered, r)
		}
	}
	stored = filtered
	check("after deletes")

	// Group resets by time use the same search.
	_, err = tb.client.CreateGroup(tb.ctx, "tt", "g", "earliest")
	require.NoError(t, err)
	at := base.Add(1234 * time.Second)
	parts, err := tb.client.ResetGroup(tb.ctx, "tt", "g", at.Format(time.RFC3339Nano), nil)
	require.NoError(t, err)
	require.Equal(t, want(at), parts[0].NextOffset)

	_, err = tb.client.OffsetForTime(tb.ctx, "tt", 5, base)
	require.ErrorIs(t, err, pgmsg.ErrPartitionOutOfRange)
	_, err = tb.client.OffsetForTime(tb.ctx, "nope", 0, base)
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic)
	_, err = tb.client.OffsetsForTime(tb.ctx, "nope", base)
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic)
}
