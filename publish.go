package pgmsg

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/store"
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
	// PM014 says how long to wait: the topic's backpressure_timeout_ms.
	wait, ok := errs.BackpressureWait(err)
	if !ok {
		wait = BackpressureTimeoutDefault
	}
	return errs.RetryWhile(ctx, ErrBackpressure, wait, err, publish)
}

// retryWhile is errs.RetryWhile, for job.go's wait on a full queue.
func retryWhile(ctx context.Context, sentinel error, wait time.Duration, err error, op func() error) error {
	return errs.RetryWhile(ctx, sentinel, wait, err, op)
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
		meta, err := c.topicMeta(ctx, exec, r.Topic, false) // PM003, PM001 from SQL
		if err != nil {
			return nil, err
		}
		// Only what the call needs: a timestamp pgx can send and
		// PostgreSQL can hold (publish() refuses the rest of the years
		// outside 0001..9999 with the same PM004). Record sizes are
		// publish()'s to refuse (PM006; the direct statement declines an
		// oversized record and leaves it to publish()).
		if !r.Timestamp.IsZero() {
			if err := checkTime("record timestamp", r.Timestamp); err != nil {
				return nil, err
			}
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
// The Producer checks each record with it before batching, so that a bad
// record fails alone instead of the batch it would share with others'.
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

func publishParams(b *partitionBatch) (store.PublishBatch, error) {
	params := store.NewPublishBatch(b.topic, b.partition, len(b.records))
	for i, r := range b.records {
		params.Values[i] = r.Value
		params.SetKey(i, r.Key)
		if len(r.Headers) > 0 {
			h, err := encodeHeaders(r.Headers)
			if err != nil {
				return params, err
			}
			params.SetHeaders(i, h)
		}
		if !r.Timestamp.IsZero() {
			// PostgreSQL keeps microseconds: send exactly what is stored,
			// which applyPublishResult reports.
			params.SetTimestamp(i, r.Timestamp.Truncate(time.Microsecond))
		}
	}
	return params, nil
}

func applyPublishResult(b *partitionBatch, rows []store.PublishResult) {
	for _, row := range rows {
		b.segmentsLow = b.segmentsLow || row.SegmentsLow
		for i, r := range b.records {
			r.Partition = row.Partition
			r.Offset = row.BaseOffset + int64(i)
			if r.Timestamp.IsZero() {
				r.Timestamp = row.Timestamp
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
		return c.sendIdempotent(ctx, exec, b, &params, notify)
	}
	if !notify {
		meta, err := c.topicMeta(ctx, exec, b.topic, false)
		if err != nil {
			return err
		}
		if !meta.backpressure {
			// The direct statement (store.PublishDirect): nil when
			// publish() has more to do.
			row, err := c.store.PublishDirect(ctx, exec, &params)
			if err != nil {
				return c.publishError(b.topic, err)
			}
			if row != nil {
				applyPublishResult(b, []store.PublishResult{*row})
				return nil
			}
		}
	}
	rows, err := c.store.Publish(ctx, exec, &params, notify)
	if err != nil {
		return c.publishError(b.topic, err)
	}
	applyPublishResult(b, rows)
	return nil
}

// sendIdempotent publishes b through publish_idempotent(): a batch the
// producer stored before is not written again, and its stored offsets and
// publish time are reported (b.duplicate).
func (c *Client) sendIdempotent(ctx context.Context, exec DBTX, b *partitionBatch, params *store.PublishBatch, notify bool) error {
	row, err := c.store.PublishIdempotent(ctx, exec, params, b.producerID, b.sequence, notify)
	if err != nil {
		return c.publishError(b.topic, err)
	}
	b.duplicate = row.Duplicate
	applyPublishResult(b, []store.PublishResult{row})
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
	pl := c.store.PublishPipeline()
	for _, b := range batches {
		params, err := publishParams(b)
		if err != nil {
			return err
		}
		pl.Queue(&params, notify)
	}
	failed, err := pl.Send(ctx, tx, func(i int, rows []store.PublishResult) {
		applyPublishResult(batches[i], rows)
	})
	if err != nil && failed >= 0 {
		return c.publishError(batches[failed].topic, err)
	}
	return err
}

func (c *Client) publishError(topic string, err error) error {
	if isTopicGoneRace(err) {
		c.forgetTopic(topic)
		return newError(ErrUnknownTopic, "unknown topic %q: it was deleted while the publish ran", topic)
	}
	if ErrorCode(err) == errs.PartitionOutOfRange.Code() || ErrorCode(err) == errs.UnknownTopic.Code() {
		c.forgetTopic(topic)
	}
	return err
}
