package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// A read that knows how many rows it returns allocates a chunk for them,
// not a fixed 256 KiB; one that does not, or whose rows are larger,
// allocates up to chunkMax, and a record larger than that gets its own.
func TestRecordDecoderChunkSize(t *testing.T) {
	for _, tc := range []struct {
		left       int64
		need, want int
	}{
		{left: 125, need: 1024, want: 125 * 1024},
		{left: 1, need: 10, want: 10},
		{left: 0, need: 10, want: chunkMax},
		{left: 100000, need: 1024, want: chunkMax},
		{left: 3, need: chunkMax + 1, want: chunkMax + 1},
	} {
		d := &recordDecoder{row: RecordRow{Left: tc.left}}
		d.reserve(tc.need)
		if cap(d.chunk) != tc.want {
			t.Errorf("left %d, need %d: chunk of %d bytes, want %d", tc.left, tc.need, cap(d.chunk), tc.want)
		}
		before := cap(d.chunk)
		d.chunk = append(d.chunk, make([]byte, tc.need)...)
		if tc.left > 1 && tc.want < chunkMax {
			d.reserve(tc.need) // the next row of the same size fits
			if cap(d.chunk) != before {
				t.Errorf("left %d, need %d: a new chunk for the second row", tc.left, tc.need)
			}
		}
	}
}

// Reads through the record table are planned for their values each time,
// never from a generic plan: a prepared statement's (or a PL/pgSQL
// statement's) sixth execution plans generically once, which locks every
// segment of every topic (and then fails every time once they outnumber
// the lock table). Seven reads of one partition's range across a segment
// boundary, in one transaction, lock only what they read (the record
// tables on the way and two segments with their indexes), however many
// segments other topics have; so does offset_for_time().
func TestRecordTableReadsLockTheirSegments(t *testing.T) {
	ctx := context.Background()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 1})
	s := New(b.Schema)
	topicID := map[string]int32{}
	for _, name := range []string{"t", "other"} {
		if _, err := s.TopicCreate(ctx, b.Pool, name, 1, []byte(`{"segment_records": 16}`)); err != nil {
			t.Fatal(err)
		}
		var id int32
		if err := b.Pool.QueryRow(ctx, `SELECT topic_id FROM `+pgx.Identifier{b.Schema, "topic"}.Sanitize()+` WHERE name = $1`, name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		topicID[name] = id
	}
	for _, topic := range []string{"t", "other"} {
		pb := NewPublishBatch(topic, 0, 40)
		if topic == "other" {
			pb = NewPublishBatch(topic, 0, 400) // 25 segments and more
		}
		for i := range pb.Values {
			pb.Values[i] = []byte(fmt.Sprint(i))
		}
		if _, err := s.Publish(ctx, b.Pool, &pb, false); err != nil {
			t.Fatal(err)
		}
	}
	var segments int
	if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{b.Schema, "segment"}.Sanitize()+` WHERE topic_id = $1`,
		topicID["other"]).Scan(&segments); err != nil {
		t.Fatal(err)
	}
	if segments < 25 {
		t.Fatalf("%d segments of topic other", segments)
	}
	locks := func(read func(tx pgx.Tx) error) int {
		t.Helper()
		tx, err := b.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		for range 7 {
			if err := read(tx); err != nil {
				t.Fatal(err)
			}
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_locks WHERE pid = pg_catalog.pg_backend_pid() AND locktype = 'relation'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := 0
	count := func(*RecordRow) error { n++; return nil }
	for name, read := range map[string]func(tx pgx.Tx) error{
		"ReadRange": func(tx pgx.Tx) error {
			return s.ReadRange(ctx, tx, "record", false, topicID["t"], 0, 10, 20, count)
		},
		// A SQL function that reads through it: a timestamp's position
		// (time_index_run, retention_run and _compact_run do the same,
		// and read every topic).
		"functions": func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT `+pgx.Identifier{b.Schema}.Sanitize()+`.offset_for_time('t', 0, pg_catalog.now() - interval '1 hour')`)
			return err
		},
		"KafkaRecords": func(tx pgx.Tx) error {
			recs, err := s.KafkaRecords(ctx, tx, topicID["t"], 0, 10, 40, 11)
			n += len(recs)
			return err
		},
	} {
		n = 0
		got := locks(read)
		if n != 7*11 && name != "functions" {
			t.Errorf("%s: read %d records, want %d", name, n, 7*11)
		}
		// record, record_<id>, two segments and their primary keys, the
		// catalog's own; not the other topic's segments.
		if got >= segments {
			t.Errorf("%s: %d relation locks after 7 reads, with %d segments in another topic", name, got, segments)
		}
	}
}
