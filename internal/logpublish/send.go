package logpublish

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Send publishes planned batches (Plan) on the pool: one partition's in
// one statement, several in one transaction. It retries for the topic's
// backpressure wait and, after the commit, queues the consumers' wake-up
// and the segments ahead (afterCommit).
func (p *Publisher) Send(ctx context.Context, batches []*Batch) error {
	err := p.withBackpressure(ctx, batches[0].Topic, func() error {
		if len(batches) == 1 {
			// One partition: one statement in autocommit, one round trip,
			// merged with this client's other calls to the partition that
			// wait for the one in flight (merge.go).
			if batches[0].ProducerID == "" {
				return p.sendMerged(ctx, batches[0])
			}
			return p.sendBatch(ctx, p.pool, batches[0], false)
		}
		return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error { return p.sendBatches(ctx, tx, batches, false) })
	})
	if err == nil {
		for _, b := range batches {
			p.afterCommit(b, true)
		}
	}
	return err
}

// SendTx publishes planned batches inside the caller's transaction tx,
// once: a backpressure error aborts tx, so it is not retried.
func (p *Publisher) SendTx(ctx context.Context, tx pgx.Tx, batches []*Batch) error {
	// Notified inside tx: the notification is delivered iff tx commits.
	if err := p.sendBatches(ctx, tx, batches, true); err != nil {
		return err
	}
	// Segments are created ahead by another transaction (it waits for tx
	// to release the counter row), never inside the caller's.
	for _, b := range batches {
		p.afterCommit(b, false)
	}
	return nil
}

// SendOne publishes the records of one partition (a Producer's batch) in
// one transaction on the pool, one attempt but waiting on the topic's
// backpressure as Send does, and queues the work that follows a commit.
func (p *Publisher) SendOne(ctx context.Context, topic string, partition int32, records []*pgmsgtype.Record, idem Idempotence) error {
	b := &Batch{Topic: topic, Partition: partition, Records: records, ProducerID: idem.ProducerID, Sequence: idem.Sequence}
	err := p.withBackpressure(ctx, b.Topic, func() error { return p.sendBatch(ctx, p.pool, b, false) })
	if err == nil {
		p.afterCommit(b, true)
	}
	return err
}

// isRoutingRace reports the error PostgreSQL raises, rarely, when an
// insert runs right after another session attached the segment it needs:
// no partition of the topic's table record_N. The segment exists; the same
// statement succeeds when run again. See TestPublishIntoFreshSegmentsConcurrently.
func isRoutingRace(err error) bool {
	t, ok := errs.NoPartitionFor(err)
	return ok && strings.HasPrefix(t, "record_") && !isRecordBlock(t)
}

// isTopicGoneRace reports the error of an insert into a topic whose table
// a concurrent topic delete dropped after the publish had looked the topic
// up: no partition for the topic in its block of the record table
// (record_bK, migration 030), or in the record table itself. Found by the
// HTTP property test; it is the topic's absence, PM001.
func isTopicGoneRace(err error) bool {
	t, ok := errs.NoPartitionFor(err)
	return ok && (t == "record" || isRecordBlock(t))
}

// isRecordBlock reports whether table is a block of the record table,
// record_b followed by digits (functions/log.sql, _record_block).
func isRecordBlock(table string) bool {
	k, ok := strings.CutPrefix(table, "record_b")
	if !ok || k == "" {
		return false
	}
	for _, c := range k {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// withBackpressure runs publish (a whole transaction of the client's own),
// retrying while it fails with Backpressure, for up to the topic's
// backpressure wait, and a few times on a segment routing race. (SendTx
// does not retry: the caller's transaction is aborted by the error.)
func (p *Publisher) withBackpressure(ctx context.Context, topic string, publish func() error) error {
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
	if !errors.Is(err, errs.Backpressure) {
		return err
	}
	// PM014 says how long to wait: the topic's backpressure_timeout_ms.
	wait, ok := errs.BackpressureWait(err)
	if !ok {
		wait = p.cfg.BackpressureTimeout
	}
	return errs.RetryWhile(ctx, errs.Backpressure, wait, err, publish)
}

// Params returns b as the store's publish parameters: its records'
// values, keys, encoded headers and timestamps (truncated to the
// microsecond PostgreSQL keeps).
func (p *Publisher) Params(b *Batch) (store.PublishBatch, error) {
	params := store.NewPublishBatch(b.Topic, b.Partition, len(b.Records))
	for i, r := range b.Records {
		params.Values[i] = r.Value
		params.SetKey(i, r.Key)
		if len(r.Headers) > 0 {
			h, err := store.EncodeHeaders(r.Headers)
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

func applyPublishResult(b *Batch, rows []store.PublishResult) {
	for _, row := range rows {
		b.SegmentsLow = b.SegmentsLow || row.SegmentsLow
		for i, r := range b.Records {
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
// pass false and call afterCommit.
func (p *Publisher) sendBatch(ctx context.Context, exec store.DBTX, b *Batch, notify bool) error {
	params, err := p.Params(b)
	if err != nil {
		return err
	}
	if b.ProducerID != "" {
		return p.sendIdempotent(ctx, exec, b, &params, notify)
	}
	if !notify {
		meta, err := p.TopicMeta(ctx, exec, b.Topic, false)
		if err != nil {
			return err
		}
		if !meta.Backpressure {
			// A batch of its own transaction goes with COPY when it is
			// large enough (store.PublishCopy), else with the direct
			// statement (store.PublishDirect); each answers nil when
			// publish() has more to do.
			if pool, ok := exec.(*pgxpool.Pool); ok && params.CopyEligible() {
				row, err := p.store.PublishCopy(ctx, pool, meta.ID, &params)
				if err != nil {
					return p.publishError(b.Topic, err)
				}
				if row != nil {
					applyPublishResult(b, []store.PublishResult{*row})
					return nil
				}
			}
			row, err := p.store.PublishDirect(ctx, exec, &params)
			if err != nil {
				return p.publishError(b.Topic, err)
			}
			if row != nil {
				applyPublishResult(b, []store.PublishResult{*row})
				return nil
			}
		}
	}
	rows, err := p.store.Publish(ctx, exec, &params, notify)
	if err != nil {
		return p.publishError(b.Topic, err)
	}
	applyPublishResult(b, rows)
	return nil
}

// sendIdempotent publishes b through publish_idempotent(): a batch the
// producer stored before is not written again, and its stored offsets and
// publish time are reported (b.Duplicate).
func (p *Publisher) sendIdempotent(ctx context.Context, exec store.DBTX, b *Batch, params *store.PublishBatch, notify bool) error {
	row, err := p.store.PublishIdempotent(ctx, exec, params, b.ProducerID, b.Sequence, notify)
	if err != nil {
		return p.publishError(b.Topic, err)
	}
	b.Duplicate = row.Duplicate
	applyPublishResult(b, []store.PublishResult{row})
	return nil
}

// sendBatches sends every partition's batch in one round trip (pipelined)
// inside tx; idempotent batches go one after the other.
func (p *Publisher) sendBatches(ctx context.Context, tx pgx.Tx, batches []*Batch, notify bool) error {
	if len(batches) == 1 || batches[0].ProducerID != "" {
		for _, b := range batches {
			if err := p.sendBatch(ctx, tx, b, notify); err != nil {
				return err
			}
		}
		return nil
	}
	pl := p.store.PublishPipeline()
	for _, b := range batches {
		params, err := p.Params(b)
		if err != nil {
			return err
		}
		pl.Queue(&params, notify)
	}
	failed, err := pl.Send(ctx, tx, func(i int, rows []store.PublishResult) {
		applyPublishResult(batches[i], rows)
	})
	if err != nil && failed >= 0 {
		return p.publishError(batches[failed].Topic, err)
	}
	return err
}

// publishError maps a failed publish's error: a topic dropped under the
// statement is unknown (PM001), and an error that says the cached
// metadata is stale (PM001, PM005) drops it.
func (p *Publisher) publishError(topic string, err error) error {
	if isTopicGoneRace(err) {
		p.ForgetTopic(topic)
		return errs.New(errs.UnknownTopic, "unknown topic %q: it was deleted while the publish ran", topic)
	}
	if code := errs.Code(err); code == errs.PartitionOutOfRange.Code() || code == errs.UnknownTopic.Code() {
		p.ForgetTopic(topic)
	}
	return err
}

// SendSequenced publishes one partition's records of a Kafka idempotent
// producer (the Kafka listener's Produce) by Kafka's sequence rule, and
// queues the work that follows the commit: the consumers' wake-up
// (outside the transaction, coalesced with the client's others) and the
// segments ahead. A batch large enough goes with COPY when it is the
// producer's next one (store.KafkaPublishCopy); every other, and one COPY
// declined, is one statement in autocommit (store.KafkaPublish), which
// tells a retry, an older batch and a gap apart. For KafkaStored and
// KafkaDuplicate the records get their offsets.
func (p *Publisher) SendSequenced(ctx context.Context, topic string, partition int32, records []*pgmsgtype.Record, producerID string, sequence int64) (store.KafkaPublishResult, error) {
	b := &Batch{Topic: topic, Partition: partition, Records: records}
	params, err := p.Params(b)
	if err != nil {
		return store.KafkaPublishResult{}, err
	}
	var res store.KafkaPublishResult
	if params.CopyEligible() {
		// An unknown topic is KafkaPublish's to report.
		if meta, err := p.TopicMeta(ctx, p.pool, topic, false); err == nil && !meta.Backpressure {
			row, err := p.store.KafkaPublishCopy(ctx, p.pool, meta.ID, &params, producerID, sequence)
			if err != nil {
				return res, p.publishError(topic, err)
			}
			if row != nil {
				res.Outcome, res.Result = store.KafkaStored, *row
			}
		}
	}
	if res.Outcome == "" {
		err = p.withBackpressure(ctx, topic, func() error {
			var err error
			res, err = p.store.KafkaPublish(ctx, p.pool, &params, producerID, sequence)
			return err
		})
		if err != nil {
			return res, p.publishError(topic, err)
		}
	}
	switch res.Outcome {
	case store.KafkaStored:
		applyPublishResult(b, []store.PublishResult{res.Result})
		p.afterCommit(b, true)
	case store.KafkaDuplicate:
		b.Duplicate = true
		applyPublishResult(b, []store.PublishResult{res.Result})
	}
	return res, nil
}

// Sequenced is one Kafka idempotent producer's batch for
// SendSequencedMany, and what became of it.
type Sequenced struct {
	Records    []*pgmsgtype.Record
	ProducerID string
	Sequence   int64
	Result     store.KafkaPublishResult
	Err        error
}

// SendSequencedMany publishes batches of one partition from Kafka
// idempotent producers (the listener's produce requests that queued
// behind each other), in their order, each decided as SendSequenced
// decides it. Consecutive batches too small for COPY go with one commit
// for all of them (store.KafkaPublishMany): one WAL flush instead of one
// each, which is what their latency was made of. A batch large enough
// for COPY goes on its own through SendSequenced: COPY stores its rows for
// less than _kafka_publish() does (measured: a round of 100-record
// batches through KafkaPublishMany ran at 0.65x native produce, with COPY
// at 0.89x). When a shared transaction fails (backpressure, a record the
// server refuses, a topic deleted under it) or the topic has
// backpressure, its batches go one by one, so that one batch's error is
// its own.
func (p *Publisher) SendSequencedMany(ctx context.Context, topic string, partition int32, items []*Sequenced) {
	together := false
	if len(items) > 1 {
		meta, err := p.TopicMeta(ctx, p.pool, topic, false)
		together = err == nil && !meta.Backpressure
	}
	alone := func(run []*Sequenced) {
		for _, it := range run {
			it.Result, it.Err = p.SendSequenced(ctx, topic, partition, it.Records, it.ProducerID, it.Sequence)
		}
	}
	start := 0
	flush := func(end int) {
		run := items[start:end]
		if len(run) > 1 && together && p.sendSequencedTogether(ctx, topic, partition, run) {
			return
		}
		alone(run)
	}
	for i, it := range items {
		if len(it.Records) >= store.CopyMinRecords {
			flush(i)
			alone(items[i : i+1])
			start = i + 1
		}
	}
	flush(len(items))
}

func (p *Publisher) sendSequencedTogether(ctx context.Context, topic string, partition int32, items []*Sequenced) bool {
	batches := make([]*Batch, len(items))
	params := make([]store.PublishBatch, len(items))
	in := make([]store.KafkaPublishItem, len(items))
	for i, it := range items {
		batches[i] = &Batch{Topic: topic, Partition: partition, Records: it.Records}
		var err error
		if params[i], err = p.Params(batches[i]); err != nil {
			return false
		}
		in[i] = store.KafkaPublishItem{Batch: &params[i], ProducerID: it.ProducerID, Sequence: it.Sequence}
	}
	res, err := p.store.KafkaPublishMany(ctx, p.pool, in)
	if err != nil {
		return false
	}
	for i, it := range items {
		it.Result, it.Err = res[i], nil
		switch res[i].Outcome {
		case store.KafkaStored:
			applyPublishResult(batches[i], []store.PublishResult{res[i].Result})
			p.afterCommit(batches[i], true)
		case store.KafkaDuplicate:
			batches[i].Duplicate = true
			applyPublishResult(batches[i], []store.PublishResult{res[i].Result})
		}
	}
	return true
}
