package pgmsg

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
)

var pgxTxReadOnly = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

// PublishOpts are per-call options of Publish; nil means defaults.
type PublishOpts struct {
	// ManualPartition publishes each record to its Record.Partition instead
	// of choosing by key. Default false.
	ManualPartition bool
}

// partitionBatch is the records of one call bound for one partition.
type partitionBatch struct {
	topic     string
	partition int32
	records   []*Record
	// segmentsLow is set by the publish when the partition's segments ahead
	// run low: create more after commit (afterCommit).
	segmentsLow bool
	// producerID, when set, makes the publish idempotent: the batch's
	// records are numbered from sequence (publish_idempotent, migration
	// 023), and duplicate reports that the batch was stored before.
	producerID string
	sequence   int64
	duplicate  bool
}

// Publish appends records (each naming its Topic) atomically: all of them
// are committed, or none is and no offset is consumed. On success each
// record's Partition, Offset and Timestamp are set, as stored: a Timestamp
// given is truncated to the microsecond (PostgreSQL's precision), and a
// zero one becomes the publish time. A record's partition is
// Record.Partition under ManualPartition, else the Kafka-compatible hash of
// its key, else one random partition of its topic shared by all unkeyed
// records of the call.
func (c *Client) Publish(ctx context.Context, records []*Record, opts *PublishOpts) (err error) {
	batches, err := c.planPublish(ctx, c.pool, records, opts, nil)
	if err != nil {
		return err
	}
	return c.publishBatches(ctx, records, batches)
}

// publishBatches publishes planned batches on the pool: one partition's in
// one statement, several in one transaction. It retries for the topic's
// backpressure wait.
func (c *Client) publishBatches(ctx context.Context, records []*Record, batches []*partitionBatch) (err error) {
	end := c.startPublishSpan(ctx, batches[0].topic, records)
	defer func() { end(err) }()
	err = c.withBackpressure(ctx, batches[0].topic, func() error {
		if len(batches) == 1 {
			// One partition: one statement in autocommit, one round trip.
			return c.sendBatch(ctx, c.pool, batches[0], false)
		}
		return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error { return c.sendBatches(ctx, tx, batches, false) })
	})
	if err == nil {
		for _, b := range batches {
			c.afterCommit(b, true)
		}
	}
	return err
}

// PublishIdempotent is Publish as producer producerID (1 to 200 bytes, for
// example a UUID chosen once per producer) with the records numbered from
// sequence, in the order they are stored: by partition, then in the
// order given. Sent again with the same records and sequence, after an
// error that left the outcome unknown (a connection lost during the
// commit), it writes nothing and reports the stored offsets, timestamps
// and duplicate true: the records are stored once. Unkeyed records go to
// a partition drawn from producerID and sequence, the same on each retry.
// Sequences must grow per partition (the next call's sequence is this
// one's plus len(records)); a call that overlaps, or comes before, what
// the producer stored on a partition fails with ErrOutOfOrderSequence.
// Gaps are allowed. docs/sql-api.md (publish_idempotent) has the rules.
func (c *Client) PublishIdempotent(ctx context.Context, producerID string, sequence int64, records []*Record, opts *PublishOpts) (duplicate bool, err error) {
	if producerID == "" {
		// The SQL API checks the rest (length, sequence range).
		return false, newError(ErrInvalidArgument, "producer id must be 1 to 200 bytes")
	}
	batches, err := c.planPublish(ctx, c.pool, records, opts, &idempotence{producerID: producerID, sequence: sequence})
	if err != nil {
		return false, err
	}
	if err := c.publishBatches(ctx, records, batches); err != nil {
		return false, err
	}
	return batches[0].duplicate, nil
}

// isRoutingRace reports the error PostgreSQL raises, rarely, when an
// insert runs right after another session attached the segment it needs:
// no partition of the topic's table record_N. The segment exists; the same
// statement succeeds when run again. See TestPublishIntoFreshSegmentsConcurrently.
func isRoutingRace(err error) bool {
	t, ok := errs.NoPartitionFor(err)
	return ok && strings.HasPrefix(t, "record_")
}

// isTopicGoneRace reports the error of an insert into a topic whose table
// a concurrent topic delete dropped after the publish had looked the topic
// up: no partition of the root table record for the topic. Found by the
// HTTP property test; it is the topic's absence, PM001.
func isTopicGoneRace(err error) bool {
	t, ok := errs.NoPartitionFor(err)
	return ok && t == "record"
}

// withBackpressure runs publish (a whole transaction of the client's own),
// retrying while it fails with ErrBackpressure, for up to the topic's
// backpressure wait, and a few times on a segment routing race. (PublishTx
// does not retry: the caller's transaction is aborted by the error.)
func (c *Client) withBackpressure(ctx context.Context, topic string, publish func() error) error {
	err := publish()
	// Backing off from 5 ms to 100 ms, about half a second in all: on a
	// loaded machine (the full suite under -race) five tries within 75 ms
	// once ran out (TestPublishIntoFreshSegmentsConcurrently).
	pause := 5 * time.Millisecond
	for i := 0; i < 8 && isRoutingRace(err); i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 100*time.Millisecond)
		err = publish()
	}
	if !errors.Is(err, ErrBackpressure) {
		return err
	}
	meta, merr := c.topicMeta(ctx, c.pool, topic, false)
	if merr != nil {
		return err
	}
	return retryWhile(ctx, ErrBackpressure, meta.backpressureWait, err, publish)
}

// retryWhile calls op again while err (its last result) matches sentinel,
// backing off from 10 ms to 250 ms, for as long as the next attempt still
// starts within wait of now. It is how publishes and enqueues wait out
// backpressure; the consumer or worker making room is what ends the wait.
func retryWhile(ctx context.Context, sentinel error, wait time.Duration, err error, op func() error) error {
	deadline := time.Now().Add(wait)
	pause := 10 * time.Millisecond
	for errors.Is(err, sentinel) && time.Now().Add(pause).Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(pause*2, 250*time.Millisecond)
		err = op()
	}
	return err
}

// PublishTx is Publish inside the caller's transaction: the transactional
// outbox. The records become visible if and only if tx commits. Until then
// tx holds the row lock of each partition written, so other publishers to
// those partitions wait: keep such transactions short.
func (c *Client) PublishTx(ctx context.Context, tx pgx.Tx, records []*Record, opts *PublishOpts) (err error) {
	batches, err := c.planPublish(ctx, tx, records, opts, nil)
	if err != nil {
		return err
	}
	end := c.startPublishSpan(ctx, batches[0].topic, records)
	defer func() { end(err) }()
	// Notified inside tx: the notification is delivered iff tx commits.
	if err := c.sendBatches(ctx, tx, batches, true); err != nil {
		return err
	}
	// Segments are created ahead by another transaction (it waits for tx
	// to release the counter row), never inside the caller's.
	for _, b := range batches {
		c.afterCommit(b, false)
	}
	return nil
}

// planPublish validates records and groups them by (topic, partition), in
// the lock order every publisher uses: topic name, then partition.
//
// idem, when set, makes the plan idempotent: unkeyed records go to a
// partition drawn from the producer id and the sequence (so that a retry
// of the call lands where the first attempt did), and each batch gets the
// sequence of its first record, the records being numbered from
// idem.sequence in the order they are stored (by partition, then in the
// order given), as publish_idempotent() numbers them.
func (c *Client) planPublish(ctx context.Context, exec DBTX, records []*Record, opts *PublishOpts, idem *idempotence) ([]*partitionBatch, error) {
	if len(records) == 0 {
		return nil, newError(ErrEmptyBatch, "empty batch: publish needs at least one record")
	}
	manual := opts != nil && opts.ManualPartition
	type tp struct {
		topic     string
		partition int32
	}
	groups := map[tp]*partitionBatch{}
	spread := map[string]int32{}
	for _, r := range records {
		if r == nil {
			return nil, newError(ErrInvalidArgument, "nil record")
		}
		if err := ValidateName("topic", r.Topic); err != nil {
			return nil, err
		}
		meta, err := c.topicMeta(ctx, exec, r.Topic, false)
		if err != nil {
			return nil, err
		}
		if err := checkRecord(r, meta); err != nil {
			return nil, err
		}
		p, err := c.choosePartition(r, meta, manual, func() int32 {
			if s, ok := spread[r.Topic]; ok {
				return s
			}
			s := rand.Int32N(int32(meta.partitions))
			if idem != nil {
				s = idem.spread(meta.partitions)
			}
			spread[r.Topic] = s
			return s
		})
		if err != nil {
			return nil, err
		}
		k := tp{r.Topic, p}
		g := groups[k]
		if g == nil {
			g = &partitionBatch{topic: r.Topic, partition: p}
			groups[k] = g
		}
		g.records = append(g.records, r)
	}
	out := make([]*partitionBatch, 0, len(groups))
	for _, g := range groups {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	if idem != nil {
		seq := idem.sequence
		for _, b := range out {
			b.producerID, b.sequence = idem.producerID, seq
			seq += int64(len(b.records))
		}
	}
	return out, nil
}

// idempotence names an idempotent publish: its producer and the sequence
// number of its first record.
type idempotence struct {
	producerID string
	sequence   int64
}

// spread is the partition of an idempotent call's unkeyed records: a hash
// of the producer id and the sequence, the same on every retry.
func (i *idempotence) spread(partitions int) int32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(i.producerID))
	_, _ = h.Write([]byte{'/'})
	_, _ = h.Write(strconv.AppendInt(nil, i.sequence, 10))
	return int32(h.Sum64() % uint64(partitions))
}

// checkRecord refuses, before a round trip, a record whose timestamp is
// outside the UTC years 0001..9999 or that is larger than the topic allows.
func checkRecord(r *Record, meta topicMeta) error {
	if !r.Timestamp.IsZero() {
		if err := checkTime("record timestamp", r.Timestamp); err != nil {
			return err
		}
	}
	// A lower bound of what the SQL API measures (key + value + headers as
	// jsonb text); the SQL check stays authoritative.
	if n := len(r.Key) + len(r.Value); n > meta.maxRecordBytes {
		return newError(ErrRecordTooLarge, "record of %d bytes is larger than topic %q's max_record_bytes (%d)", n, r.Topic, meta.maxRecordBytes)
	}
	return nil
}

func (c *Client) choosePartition(r *Record, meta topicMeta, manual bool, spread func() int32) (int32, error) {
	switch {
	case manual:
		if r.Partition < 0 || int(r.Partition) >= meta.partitions {
			return 0, newError(ErrPartitionOutOfRange, "partition %d out of range: topic %q has %d partitions", r.Partition, r.Topic, meta.partitions)
		}
		return r.Partition, nil
	case r.Key != nil:
		return PartitionForKey(r.Key, meta.partitions), nil
	default:
		return spread(), nil
	}
}

func publishParams(b *partitionBatch) (dbsqlc.RecordPublishParams, error) {
	params := dbsqlc.RecordPublishParams{
		Topic:     b.topic,
		Values:    make([][]byte, len(b.records)),
		Partition: pgtype.Int4{Int32: b.partition, Valid: true},
	}
	for i, r := range b.records {
		params.Values[i] = r.Value
		if r.Key != nil {
			if params.Keys == nil {
				params.Keys = make([][]byte, len(b.records))
			}
			params.Keys[i] = r.Key
		}
		if len(r.Headers) > 0 {
			if params.Headers == nil {
				params.Headers = make([][]byte, len(b.records))
			}
			h, err := encodeHeaders(r.Headers)
			if err != nil {
				return params, err
			}
			params.Headers[i] = h
		}
		if !r.Timestamp.IsZero() {
			if params.Timestamps == nil {
				params.Timestamps = make([]pgtype.Timestamptz, len(b.records))
			}
			// PostgreSQL keeps microseconds: send exactly what is stored,
			// which applyPublishResult reports.
			params.Timestamps[i] = pgtype.Timestamptz{Time: r.Timestamp.Truncate(time.Microsecond), Valid: true}
		}
	}
	return params, nil
}

func applyPublishResult(b *partitionBatch, rows []*dbsqlc.RecordPublishRow) {
	for _, row := range rows {
		b.segmentsLow = b.segmentsLow || row.SegmentsLow
		for i, r := range b.records {
			r.Partition = row.Partition
			r.Offset = row.BaseOffset + int64(i)
			if r.Timestamp.IsZero() {
				r.Timestamp = row.Timestamp.Time
			} else {
				r.Timestamp = r.Timestamp.Truncate(time.Microsecond)
			}
		}
	}
}

// sendBatch publishes one partition's batch. notify sends the wake-up
// inside the statement's transaction; callers that commit on their own
// pass false and call notifyAfterCommit.
func (c *Client) sendBatch(ctx context.Context, exec DBTX, b *partitionBatch, notify bool) error {
	params, err := publishParams(b)
	if err != nil {
		return err
	}
	if b.producerID != "" {
		return c.sendIdempotent(ctx, exec, b, params, notify)
	}
	if !notify {
		meta, err := c.topicMeta(ctx, exec, b.topic, false)
		if err != nil {
			return err
		}
		if !meta.backpressure {
			row, err := c.publishDirect(ctx, exec, b, params)
			if err != nil {
				return c.publishError(b.topic, err)
			}
			if row != nil {
				applyPublishResult(b, []*dbsqlc.RecordPublishRow{row})
				return nil
			}
		}
	}
	params.Notify = notify
	rows, err := c.queries.RecordPublish(ctx, c.db(exec), params)
	if err != nil {
		return c.publishError(b.topic, err)
	}
	applyPublishResult(b, rows)
	return nil
}

// publishDirectSQL appends one partition's batch in one statement against
// the tables, as publish() does on its common path: reserve the offsets on
// the partition's counter row (its lock orders publishers, see
// docs/architecture.md) and insert the records. Unlike a call of the
// PL/pgSQL function, it runs from the connection's cached generic plan:
// no planning, no function call, no row materialised to return (issue 12;
// docs/benchmarks.md has the measurements). It appends nothing and returns
// no row when publish() has more to do: a topic with backpressure
// settings, a batch that reaches past the segments created so far, a
// record larger than max_record_bytes (publish() raises PM006), or an
// unknown topic (PM001); the caller then calls publish(). Timestamps,
// partitions and the batch's shape are checked by the Go client before.
const publishDirectSQL = `WITH t AS (
    SELECT tt.topic_id, tt.segment_records, tt.max_record_bytes FROM pgmsg.topic tt
    WHERE tt.name = $1::text AND NOT tt.config ?| ARRAY['max_lag_records', 'max_lag_bytes']
), r AS (
    UPDATE pgmsg.topic_partition c SET next_offset = c.next_offset + cardinality($3::bytea[])
      FROM t
     WHERE c.topic_id = t.topic_id AND c.partition = $2::integer
       AND c.next_offset + cardinality($3::bytea[]) <= c.segment_end
       AND NOT EXISTS (SELECT 1 FROM unnest($3::bytea[], $4::bytea[], $5::jsonb[]) AS u(v, k, h)
                        WHERE coalesce(octet_length(u.v), 0) + coalesce(octet_length(u.k), 0)
                              + coalesce(octet_length(u.h::text), 0) > t.max_record_bytes)
    RETURNING c.topic_id, c.next_offset - cardinality($3::bytea[]) AS base,
              c.next_offset > c.segment_end - 2 * t.segment_records AS segments_low
), ins AS (
    INSERT INTO pgmsg.record (topic_id, partition, "offset", "timestamp", key, value, headers)
    SELECT r.topic_id, $2::integer, r.base + u.ord - 1, coalesce(u.ts, statement_timestamp()), u.k, u.v, u.h
      FROM r, unnest($3::bytea[], $4::bytea[], $5::jsonb[], $6::timestamptz[]) WITH ORDINALITY AS u(v, k, h, ts, ord)
)
SELECT base, statement_timestamp(), segments_low FROM r`

// publishDirect runs publishDirectSQL; nil, nil means publish() must do it.
func (c *Client) publishDirect(ctx context.Context, exec DBTX, b *partitionBatch, params dbsqlc.RecordPublishParams) (*dbsqlc.RecordPublishRow, error) {
	row := &dbsqlc.RecordPublishRow{Partition: b.partition, RecordCount: int32(len(b.records))}
	err := c.db(exec).QueryRow(ctx, publishDirectSQL, b.topic, b.partition, params.Values, params.Keys, params.Headers,
		params.Timestamps).Scan(&row.BaseOffset, &row.Timestamp, &row.SegmentsLow)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return row, nil
}

// sendIdempotent publishes b through publish_idempotent(): a batch the
// producer stored before is not written again, and its stored offsets and
// publish time are reported (b.duplicate).
func (c *Client) sendIdempotent(ctx context.Context, exec DBTX, b *partitionBatch, params dbsqlc.RecordPublishParams, notify bool) error {
	rows, err := c.queries.RecordPublishIdempotent(ctx, c.db(exec), dbsqlc.RecordPublishIdempotentParams{
		Topic: params.Topic, ProducerID: b.producerID, Sequence: b.sequence, Values: params.Values, Keys: params.Keys,
		Headers: params.Headers, Timestamps: params.Timestamps, Partition: params.Partition, Notify: notify,
	})
	if err != nil {
		return c.publishError(b.topic, err)
	}
	if len(rows) != 1 || rows[0].RecordCount != int32(len(b.records)) {
		return fmt.Errorf("pgmsg: idempotent publish to topic %q partition %d answered %d rows for %d records", b.topic, b.partition, len(rows), len(b.records))
	}
	row := rows[0]
	b.duplicate = row.Duplicate
	applyPublishResult(b, []*dbsqlc.RecordPublishRow{{Partition: row.Partition, BaseOffset: row.BaseOffset,
		RecordCount: row.RecordCount, Timestamp: row.Timestamp, SegmentsLow: row.SegmentsLow}})
	return nil
}

// sendBatches sends every partition's batch in one round trip (pipelined)
// inside tx; idempotent batches go one after the other.
func (c *Client) sendBatches(ctx context.Context, tx pgx.Tx, batches []*partitionBatch, notify bool) error {
	if len(batches) == 1 || batches[0].producerID != "" {
		for _, b := range batches {
			if err := c.sendBatch(ctx, tx, b, notify); err != nil {
				return err
			}
		}
		return nil
	}
	var pb pgx.Batch
	sql := c.publishSQL()
	for _, b := range batches {
		params, err := publishParams(b)
		if err != nil {
			return err
		}
		pb.Queue(sql, params.Topic, params.Values, params.Keys, params.Headers, params.Timestamps, params.Partition, notify)
	}
	results := tx.SendBatch(ctx, &pb)
	for _, b := range batches {
		rows, err := results.Query()
		if err != nil {
			results.Close()
			return c.publishError(b.topic, err)
		}
		var out []*dbsqlc.RecordPublishRow
		for rows.Next() {
			var r dbsqlc.RecordPublishRow
			if err := rows.Scan(&r.Partition, &r.BaseOffset, &r.RecordCount, &r.Timestamp, &r.SegmentsLow); err != nil {
				rows.Close()
				results.Close()
				return err
			}
			out = append(out, &r)
		}
		if err := rows.Err(); err != nil {
			results.Close()
			return c.publishError(b.topic, err)
		}
		applyPublishResult(b, out)
	}
	return results.Close()
}

func (c *Client) publishSQL() string {
	return c.schemaSQL(dbsqlc.RecordPublishSQL)
}

func (c *Client) publishError(topic string, err error) error {
	if isTopicGoneRace(err) {
		c.forgetTopic(topic)
		return newError(ErrUnknownTopic, "unknown topic %q: it was deleted while the publish ran", topic)
	}
	err = mapError(err)
	if ErrorCode(err) == errs.PartitionOutOfRange.Code() || ErrorCode(err) == errs.UnknownTopic.Code() {
		c.forgetTopic(topic)
	}
	return err
}
