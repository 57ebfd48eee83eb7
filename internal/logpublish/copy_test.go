package logpublish

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/store"
)

// copySequence reports whether the partition has published with COPY:
// its offset sequence exists once a COPY publish has run.
func copySequence(t *testing.T, ctx context.Context, b *pgtest.Bundle, topic string, partition int32) bool {
	t.Helper()
	var seq *uint32
	require.NoError(t, b.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT c.offset_seq FROM %[1]s.topic_partition c
		JOIN %[1]s.topic t USING (topic_id) WHERE t.name = $1 AND c.partition = $2`, pgx.Identifier{b.Schema}.Sanitize()),
		topic, partition).Scan(&seq))
	return seq != nil
}

// copyTestClient returns a schema with maxConns connections, a publisher
// on it, and a context that ends with the test (at most a minute).
func copyTestClient(t *testing.T, maxConns int32) (*pgtest.Bundle, *testPublisher, context.Context) {
	t.Helper()
	c := newTestPublisher(t, maxConns, time.Minute)
	return c.b, c, c.ctx
}

// Batches of store.CopyMinRecords records or more go with COPY: what is
// stored and what Publish reports are what the direct statement gives
// (offsets contiguous and gapless across both paths, keys, headers,
// timestamps given or stamped by the server), and a batch that COPY
// cannot carry (some records with a timestamp, some without) goes the
// direct way.
func TestPublishCopy(t *testing.T) {
	t.Parallel()
	b, c, ctx := copyTestClient(t, 4)
	c.createTopic("t", 2, nil)

	n := store.CopyMinRecords + 4
	batch := func(tag string, opts func(i int, r *Record)) []*Record {
		recs := make([]*Record, n)
		for i := range recs {
			recs[i] = &Record{Topic: "t", Partition: 0, Value: []byte(fmt.Sprintf("%s-%d", tag, i))}
			if opts != nil {
				opts(i, recs[i])
			}
		}
		return recs
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	var published [][]*Record
	pub := func(recs []*Record) {
		t.Helper()
		before := time.Now().Add(-time.Second)
		require.NoError(t, c.publishManual(ctx, recs))
		for _, r := range recs {
			require.Equal(t, int32(0), r.Partition)
			require.False(t, r.Timestamp.IsZero())
			if !r.Timestamp.Equal(at.Truncate(time.Microsecond)) {
				require.True(t, r.Timestamp.After(before), "server timestamp %v", r.Timestamp)
			}
		}
		published = append(published, recs)
	}

	// A few records: the direct statement, no sequence.
	pub(batch("small", nil)[:3])
	require.False(t, copySequence(t, ctx, b, "t", 0))
	// Mixed timestamps: COPY cannot mix a default and given values.
	pub(batch("mixed", func(i int, r *Record) {
		if i%2 == 0 {
			r.Timestamp = at
		}
	}))
	require.False(t, copySequence(t, ctx, b, "t", 0))
	// COPY: plain values; keys, headers, NULL values and given timestamps.
	pub(batch("plain", nil))
	require.True(t, copySequence(t, ctx, b, "t", 0))
	pub(batch("full", func(i int, r *Record) {
		r.Key = []byte(fmt.Sprintf("k%d", i))
		if i%3 == 0 {
			r.Value = nil
		}
		r.Headers = map[string][]byte{"h": []byte(fmt.Sprint(i)), "quote\"": []byte("é")}
		r.Timestamp = at
	}))
	pub(batch("after", nil)[:2])
	require.False(t, copySequence(t, ctx, b, "t", 1))

	// Every record reads back as published, at the offset reported.
	var want []*Record
	for _, recs := range published {
		want = append(want, recs...)
	}
	for i, r := range want {
		require.Equal(t, int64(i), r.Offset, "offsets contiguous across the two paths")
	}
	got := c.fetch("t", 0, 0, int32(len(want)+10))
	require.Len(t, got, len(want))
	for i, r := range got {
		w := want[i]
		require.Equal(t, w.Offset, r.Offset)
		require.Equal(t, w.Value, r.Value, "offset %d", i)
		require.Equal(t, w.Key, r.Key, "offset %d", i)
		require.Equal(t, len(w.Headers), len(r.Headers), "offset %d", i)
		for k, v := range w.Headers {
			require.Equal(t, v, r.Headers[k])
		}
		require.True(t, w.Timestamp.Equal(r.Timestamp), "offset %d: published %v, stored %v", i, w.Timestamp, r.Timestamp)
	}
}

// What COPY does not do itself it leaves to publish(), with nothing
// stored by the declined COPY: segments to create (a small segment size,
// so that batches keep reaching past them), a topic with backpressure
// settings, and records whose size may exceed max_record_bytes (the
// client's bound counts headers twice: jsonb's text adds spaces). The
// offsets stay gapless and every record is stored once.
func TestPublishCopyDeclines(t *testing.T) {
	t.Parallel()
	b, c, ctx := copyTestClient(t, 4)
	c.createTopic("seg", 1, map[string]any{"segment_records": 50})
	c.createTopic("size", 1, map[string]any{"max_record_bytes": 300})

	n := store.CopyMinRecords + 1
	records := func(topic string, size int, headers map[string][]byte) []*Record {
		recs := make([]*Record, n)
		for i := range recs {
			recs[i] = &Record{Topic: topic, Value: make([]byte, size), Headers: headers}
		}
		return recs
	}
	total := 0
	for i := 0; i < 20; i++ {
		require.NoError(t, c.publish(ctx, records("seg", 10, nil)))
		total += n
	}
	got := c.fetch("seg", 0, 0, int32(total+10))
	require.Len(t, got, total)
	for i, r := range got {
		require.Equal(t, int64(i), r.Offset)
	}
	require.True(t, copySequence(t, ctx, b, "seg", 0))

	// 200 bytes of value and 60 of headers: within 300 as stored, over
	// it as the client bounds it, so publish() stores it.
	h := map[string][]byte{"a": []byte("0123456789"), "b": []byte("0123456789"), "c": []byte("0123")}
	require.NoError(t, c.publish(ctx, records("size", 200, h)))
	require.False(t, copySequence(t, ctx, b, "size", 0))
	// Over the limit: PM006 from publish(), nothing stored.
	err := c.publish(ctx, records("size", 301, nil))
	require.ErrorIs(t, err, errs.RecordTooLarge)
	got = c.fetch("size", 0, 0, int32(100))
	require.Len(t, got, n)

	// Backpressure settings: publish() answers (PM014 when behind).
	c.createTopic("bp", 1, map[string]any{"max_lag_records": n})
	_, err = c.store.GroupCreate(ctx, b.Pool, "bp", "g", "earliest")
	require.NoError(t, err)
	require.NoError(t, c.publish(ctx, records("bp", 10, nil)))
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	err = c.publish(short, records("bp", 10, nil))
	require.True(t, errors.Is(err, errs.Backpressure) || errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.False(t, copySequence(t, ctx, b, "bp", 0))
}

// A COPY publish cancelled while it waits for the partition's counter
// row stores nothing: the server is asked to cancel the statement, as pgx
// does, and the connection stays usable.
func TestPublishCopyCancelled(t *testing.T) {
	t.Parallel()
	b, c, ctx := copyTestClient(t, 2)
	c.createTopic("t", 1, nil)
	recs := func(tag string) []*Record {
		out := make([]*Record, store.CopyMinRecords)
		for i := range out {
			out[i] = &Record{Topic: "t", Value: []byte(tag)}
		}
		return out
	}

	tx, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, c.PublishTx(ctx, tx, []*Record{{Topic: "t", Value: []byte("holder")}}, false))
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	err = c.publish(short, recs("cancelled"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, tx.Commit(ctx))

	require.NoError(t, c.publish(ctx, recs("after")))
	got := c.fetch("t", 0, 0, int32(100))
	require.Len(t, got, 1+store.CopyMinRecords)
	require.Equal(t, "holder", string(got[0].Value))
	for _, r := range got[1:] {
		require.Equal(t, "after", string(r.Value))
	}
	require.True(t, copySequence(t, ctx, b, "t", 0))
}

// The SQL side guards what the client sends: _publish_copy_end fails
// when the COPY stored other than the records reserved, and then nothing
// is stored and the counter is unchanged.
func TestPublishCopyCountChecked(t *testing.T) {
	t.Parallel()
	b, c, ctx := copyTestClient(t, 2)
	c.createTopic("t", 1, nil)
	s := pgx.Identifier{b.Schema}.Sanitize()
	var id int32
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT topic_id FROM "+s+".topic WHERE name = 't'").Scan(&id))

	for _, stored := range []int{3, 6} {
		err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT %s._publish_copy_begin(%d, 0, 5, 10)", s, id)); err != nil {
				return err
			}
			rows := make([][]any, stored)
			for i := range rows {
				rows[i] = []any{id, int32(0), []byte("v")}
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{b.Schema, "record"}, []string{"topic_id", "partition", "value"},
				pgx.CopyFromRows(rows)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, fmt.Sprintf("SELECT * FROM %s._publish_copy_end(%d, 0, 5)", s, id))
			return err
		})
		require.ErrorIs(t, errs.Map(err), errs.InvalidArgument, "%d stored for 5 reserved", stored)
	}
	var next int64
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT next_offset FROM "+s+".topic_partition WHERE topic_id = $1", id).Scan(&next))
	require.Zero(t, next)
	got := c.fetch("t", 0, 0, int32(10))
	require.Empty(t, got)
}
