package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
)

// PublishBatch is one partition's records to append, column by column
// (the arrays publish() takes). Make it with NewPublishBatch.
type PublishBatch struct {
	Topic     string
	Partition int32
	// Values has one entry per record (nil: a NULL value).
	Values [][]byte
	// Keys and Headers are nil when no record has one (SQL NULL), else
	// one entry per record; headers are JSON objects (jsonb).
	Keys    [][]byte
	Headers [][]byte
	// timestamps is nil when no record has one, else one per record
	// (invalid: the publish time).
	timestamps []pgtype.Timestamptz
}

// NewPublishBatch returns a batch of n records for topic's partition,
// with n NULL values.
func NewPublishBatch(topic string, partition int32, n int) PublishBatch {
	return PublishBatch{Topic: topic, Partition: partition, Values: make([][]byte, n)}
}

// SetKey sets record i's key (nil: none).
func (b *PublishBatch) SetKey(i int, key []byte) {
	if key == nil {
		return
	}
	if b.Keys == nil {
		b.Keys = make([][]byte, len(b.Values))
	}
	b.Keys[i] = key
}

// SetHeaders sets record i's headers, a JSON object (nil: none).
func (b *PublishBatch) SetHeaders(i int, headers []byte) {
	if headers == nil {
		return
	}
	if b.Headers == nil {
		b.Headers = make([][]byte, len(b.Values))
	}
	b.Headers[i] = headers
}

// SetTimestamp sets record i's timestamp, as given: PostgreSQL keeps
// microseconds, so callers that report what is stored truncate it first.
func (b *PublishBatch) SetTimestamp(i int, t time.Time) {
	if b.timestamps == nil {
		b.timestamps = make([]pgtype.Timestamptz, len(b.Values))
	}
	b.timestamps[i] = pgtype.Timestamptz{Time: t, Valid: true}
}

// PublishResult is what a publish of one partition's batch answers.
type PublishResult struct {
	Partition   int32
	BaseOffset  int64
	RecordCount int32
	// Timestamp is the publish time (statement_timestamp()).
	Timestamp time.Time
	// SegmentsLow: the partition's segments ahead run low (create more
	// after commit, SegmentEnsure).
	SegmentsLow bool
	// Duplicate (PublishIdempotent): the batch was stored before and is
	// not written again; the rest describes what was stored.
	Duplicate bool
}

// publishDirectSQL appends one partition's batch with _publish_direct()
// (functions/log.sql), what publish() does on its common path in one
// statement: reserve the offsets on the partition's counter row (its lock
// orders publishers, see docs/architecture.md) and insert the records.
// The function runs as the schema's owner, so that producers append only
// through pgmsg's rules (docs/operations.md, "Database roles"); its statement is planned once per
// session. It appends nothing and returns no row when publish() has more
// to do: a topic with backpressure settings, a batch that reaches past the
// segments created so far, a record larger than max_record_bytes
// (publish() raises PM006), an unknown topic (PM001), or the first
// publish to the partition on a new timeline (a promoted standby:
// publish() starts a new log epoch); the caller then calls publish(). Timestamps, partitions and the batch's shape are
// checked by the Go client before (docs/benchmarks.md, "Where the time
// goes").
const publishDirectSQL = `SELECT d.base_offset, d.published_at, d.segments_low
  FROM pgmsg._publish_direct($1::text, $2::integer, $3::bytea[], $4::bytea[], $5::jsonb[], $6::timestamptz[]) d`

// PublishDirect appends b with publishDirectSQL. It returns nil, nil when
// publish() must do it (Publish).
func (s *Store) PublishDirect(ctx context.Context, exec DBTX, b *PublishBatch) (*PublishResult, error) {
	// One allocation for the result and the timestamp's scan target
	// (pgx plans a scan into a pgtype.Timestamptz without allocating).
	res := &struct {
		PublishResult
		ts pgtype.Timestamptz
	}{PublishResult: PublishResult{Partition: b.Partition, RecordCount: int32(len(b.Values))}}
	err := s.DB(exec).QueryRow(ctx, publishDirectSQL, b.Topic, b.Partition, b.Values, b.Keys, b.Headers,
		b.timestamps).Scan(&res.BaseOffset, &res.ts, &res.SegmentsLow)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Map(err)
	}
	res.Timestamp = res.ts.Time
	return &res.PublishResult, nil
}

// publishArgs are publish()'s arguments for b (dbsqlc.RecordPublishSQL).
func publishArgs(b *PublishBatch, notify bool) []any {
	return []any{b.Topic, b.Values, b.Keys, b.Headers, b.timestamps, pgtype.Int4{Int32: b.Partition, Valid: true}, notify}
}

// scanPublish reads publish()'s rows (dbsqlc.RecordPublishSQL's columns)
// into out[:0] and closes rows.
func scanPublish(rows pgx.Rows, out []PublishResult) ([]PublishResult, error) {
	defer rows.Close()
	out = out[:0]
	var ts pgtype.Timestamptz
	for rows.Next() {
		out = append(out, PublishResult{})
		r := &out[len(out)-1]
		if err := rows.Scan(&r.Partition, &r.BaseOffset, &r.RecordCount, &ts, &r.SegmentsLow); err != nil {
			return nil, err
		}
		r.Timestamp = ts.Time
	}
	return out, errs.Map(rows.Err())
}

// Publish appends b with publish() (RecordPublish), which does what
// PublishDirect leaves to it: backpressure, segments to create, the
// errors to raise. notify sends the wake-up inside the statement's
// transaction. It returns publish()'s rows: one for the partition.
func (s *Store) Publish(ctx context.Context, exec DBTX, b *PublishBatch, notify bool) ([]PublishResult, error) {
	// sqlc's statement, scanned by hand as PublishPipeline.Send does
	// (scanPublish), into values rather than a pointer per row.
	rows, err := s.DB(exec).Query(ctx, dbsqlc.RecordPublishSQL, publishArgs(b, notify)...)
	if err != nil {
		return nil, errs.Map(err)
	}
	return scanPublish(rows, nil)
}

// PublishIdempotent appends b with publish_idempotent() as producer
// producerID, its records numbered from sequence: a batch the producer
// stored before is not written again (Duplicate). It fails unless
// publish_idempotent() answers one row for all of b's records.
func (s *Store) PublishIdempotent(ctx context.Context, exec DBTX, b *PublishBatch, producerID string, sequence int64, notify bool) (PublishResult, error) {
	rows, err := s.q.RecordPublishIdempotent(ctx, s.DB(exec), dbsqlc.RecordPublishIdempotentParams{
		Topic: b.Topic, ProducerID: producerID, Sequence: sequence, Values: b.Values, Keys: b.Keys,
		Headers: b.Headers, Timestamps: b.timestamps, Partition: pgtype.Int4{Int32: b.Partition, Valid: true}, Notify: notify,
	})
	if err != nil {
		return PublishResult{}, errs.Map(err)
	}
	if len(rows) != 1 || rows[0].RecordCount != int32(len(b.Values)) {
		return PublishResult{}, fmt.Errorf("pgmsg: idempotent publish to topic %q partition %d answered %d rows for %d records", b.Topic, b.Partition, len(rows), len(b.Values))
	}
	r := rows[0]
	return PublishResult{Partition: r.Partition, BaseOffset: r.BaseOffset, RecordCount: r.RecordCount,
		Timestamp: r.Timestamp.Time, SegmentsLow: r.SegmentsLow, Duplicate: r.Duplicate}, nil
}

// PublishPipeline is publishes of several partitions' batches with
// publish(), sent inside one transaction in one round trip (pipelined).
// Make it with Store.PublishPipeline, Queue each batch, then Send.
type PublishPipeline struct {
	sql string
	pb  pgx.Batch
	n   int
}

// PublishPipeline returns an empty pipeline.
func (s *Store) PublishPipeline() *PublishPipeline {
	return &PublishPipeline{sql: s.SQL(dbsqlc.RecordPublishSQL)}
}

// Queue adds b's publish; notify sends the wake-up inside the
// transaction.
func (p *PublishPipeline) Queue(b *PublishBatch, notify bool) {
	p.pb.Queue(p.sql, publishArgs(b, notify)...)
	p.n++
}

// Send sends the queued publishes inside tx and hands each batch's rows
// to done, in the order queued (the slice is reused for the next batch).
// When a batch fails it returns the batch's index with the error; failed
// is -1 when the error is not one batch's.
func (p *PublishPipeline) Send(ctx context.Context, tx pgx.Tx, done func(i int, rows []PublishResult)) (failed int, err error) {
	results := tx.SendBatch(ctx, &p.pb)
	var out []PublishResult
	for i := range p.n {
		rows, err := results.Query()
		if err != nil {
			results.Close()
			return i, errs.Map(err)
		}
		if out, err = scanPublish(rows, out); err != nil {
			results.Close()
			return i, err
		}
		done(i, out)
	}
	return -1, errs.Map(results.Close())
}
