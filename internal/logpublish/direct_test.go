package logpublish

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The direct publish statement stores what publish() stores, and leaves to
// it the topics and batches it does not cover: backpressure settings and a
// batch reaching past the segments created so far.
func TestPublishDirect(t *testing.T) {
	t.Parallel()
	c := newTestPublisher(t, 4, time.Minute)
	b, ctx := c.b, c.ctx
	c.createTopic("t", 1, map[string]any{"segment_records": 64})
	ts := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	recs := []*Record{
		{Topic: "t", Value: []byte("a"), Key: []byte("k"), Headers: map[string][]byte{"h": []byte("v")}, Timestamp: ts},
		{Topic: "t", Value: nil},
	}
	batch := &Batch{Topic: "t", Partition: 0, Records: recs}
	params, err := c.Params(batch)
	require.NoError(t, err)
	row, err := c.store.PublishDirect(ctx, b.Pool, &params)
	require.NoError(t, err)
	require.NotNil(t, row)
	require.Equal(t, int64(0), row.BaseOffset)

	got := c.fetch("t", 0, 0, 10)
	require.Len(t, got, 2)
	require.Equal(t, []byte("k"), got[0].Key)
	require.Equal(t, []byte("a"), got[0].Value)
	require.Equal(t, map[string][]byte{"h": []byte("v")}, got[0].Headers)
	require.True(t, got[0].Timestamp.Equal(ts))
	require.Nil(t, got[1].Value)
	require.True(t, got[1].Timestamp.Equal(row.Timestamp), "the publish time")

	// A batch past the segments created so far (64 records each, a few
	// ahead): no row; publish() creates the segments.
	big := make([]*Record, 300)
	for i := range big {
		big[i] = &Record{Topic: "t", Value: []byte("x")}
	}
	batch = &Batch{Topic: "t", Partition: 0, Records: big}
	params, err = c.Params(batch)
	require.NoError(t, err)
	row, err = c.store.PublishDirect(ctx, b.Pool, &params)
	require.NoError(t, err)
	require.Nil(t, row)
	require.NoError(t, c.publish(ctx, big))
	require.Equal(t, int64(2), big[0].Offset, "gapless after the refused direct statement")

	// A topic with backpressure settings: no row, even with stale metadata.
	_, err = b.Pool.Exec(ctx, `UPDATE `+pgx.Identifier{b.Schema, "topic"}.Sanitize()+
		` SET config = config || '{"max_lag_records": 1000000}' WHERE name = 't'`)
	require.NoError(t, err)
	batch = &Batch{Topic: "t", Partition: 0, Records: recs[:1]}
	params, err = c.Params(batch)
	require.NoError(t, err)
	row, err = c.store.PublishDirect(ctx, b.Pool, &params)
	require.NoError(t, err)
	require.Nil(t, row)
}
