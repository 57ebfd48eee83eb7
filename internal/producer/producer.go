// Package producer is the batching engine behind pgmsg.Producer (franz-go's
// producer is the model): the per-partition batchers, the buffer bounds
// and the wait for room, the linger and batch-size triggers, one sender
// goroutine per partition with a batch in flight (so records to a
// partition are committed in the order they were produced), the retries
// of a failed batch (and of an idempotent one), the promises, Flush and
// Close, and (Submit) the per-record checks that run before a record is
// queued, inside the record's "publish" span (internal/telemetry).
// Everything it needs of the database comes through Sink: the Client's
// publish engine, internal/logpublish (OnPublisher). The root keeps the
// public API (ProducerConfig and its defaults, Producer,
// Client.NewProducer).
package producer

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/logpublish"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Batch is one partition's records sent in one transaction. ProducerID,
// when set, makes the publish idempotent: the records are numbered from
// Sequence.
type Batch struct {
	Topic      string
	Partition  int32
	Records    []*pgmsgtype.Record
	ProducerID string
	Sequence   int64
}

// Sink is what a Producer needs of the database; publisherSink
// implements it on internal/logpublish (tests use their own). Errors are the library's (internal/errs sentinels,
// mapped database errors).
type Sink interface {
	// Partition chooses rec's partition among the topic's partitions:
	// rec.Partition when manual (checked against partitions), the key's
	// hash, or, for a record without key, spread.Spread's choice.
	Partition(rec *pgmsgtype.Record, partitions int, manual bool, spread Spreader) (int32, error)
	// Publish publishes b in one transaction (one attempt, waiting on the
	// topic's backpressure as a publish does) and, when it committed,
	// queues the work that follows a commit (the consumers' wake-up).
	Publish(ctx context.Context, b Batch) error
}

// Spreader picks the partition of a record without key (the sticky
// partition); Producer implements it, for Sink.Partition's use while the
// Producer's lock is held.
type Spreader interface {
	Spread(topic string, partitions int) int32
}

// Config is a Producer's settings, all set (the root fills in defaults
// and checks them); see pgmsg.ProducerConfig.
type Config struct {
	Linger             time.Duration
	MaxBatchRecords    int
	MaxBatchBytes      int
	RequestTimeout     time.Duration
	ManualPartition    bool
	MaxBufferedRecords int
	MaxBufferedBytes   int64
	FailWhenFull       bool
	DeliveryTimeout    time.Duration
	// ProducerID, when set, makes every batch idempotent.
	ProducerID string
}

// Producer batches records into few transactions: at most one in flight
// per partition. Safe for concurrent use.
type Producer struct {
	sink Sink
	cfg  Config
	// pub, pool and checks are Submit's (OnPublisher).
	pub    *logpublish.Publisher
	pool   store.DBTX
	checks Checks

	mu      sync.Mutex
	closed  bool
	parts   map[topicPartition]*partBatcher
	sticky  map[string]int32
	senders int        // running sender goroutines, guarded by mu
	idle    *sync.Cond // signalled (with mu) when senders drops to 0
	// held and heldBytes count the records (and their key+value bytes)
	// queued or in flight; room is closed, and replaced, when they drop.
	held      int
	heldBytes int64
	room      chan struct{}
	// lingering: each topic's partitions lingering for their callers
	// (partBatcher.lingering), where Spread sends unkeyed records first.
	lingering map[string][]*partBatcher
	// spreadUsed: Spread was called since Produce reset it (the record's
	// partition is the sticky one, not its key's or its own).
	spreadUsed bool
	// callersLinger is adaptiveLinger (tests lengthen it).
	callersLinger time.Duration
}

// adaptiveLinger is how long a partition whose batch carried several
// unkeyed records waits, with Linger 0, for their callers to produce
// again before it sends what is pending (Spread sends unkeyed records to
// the lingering partitions first, the one missing the most). The wait
// ends as soon as as many records are pending as the batch carried plus
// those that were already waiting. Without it, 64 closed-loop
// ProduceSync callers on 4 partitions split: the callers a batch answered
// produced into whichever partition was sticky then, and waited there
// for the batch in flight to end, two batches per record.
const adaptiveLinger = 250 * time.Microsecond

type topicPartition struct {
	topic     string
	partition int32
}

type pendingRecord struct {
	rec     *pgmsgtype.Record
	promise func(*pgmsgtype.Record, error)
	// spread: the record's partition is the sticky one (Spread), not its
	// key's or its own.
	spread bool
}

type partBatcher struct {
	tp      topicPartition
	pending []pendingRecord
	bytes   int
	sending bool
	timer   *time.Timer
	// nextSeq numbers the next batch's first record (idempotent).
	nextSeq int64
	// lingering: the sender waits (until lingerDone is closed) for the
	// callers of its last batch to produce again, until expect records
	// are pending or the timer fires (adaptiveLinger).
	lingering  bool
	expect     int
	lingerStop *time.Timer
	lingerDone chan struct{}
}

// New returns a Producer that publishes through sink.
func New(sink Sink, cfg Config) *Producer {
	p := &Producer{sink: sink, cfg: cfg, parts: map[topicPartition]*partBatcher{}, sticky: map[string]int32{},
		lingering: map[string][]*partBatcher{}, callersLinger: adaptiveLinger}
	p.idle = sync.NewCond(&p.mu)
	return p
}

// Produce queues rec, already checked, to its topic of partitions
// partitions, waiting for room in the buffer (until ctx ends) unless
// FailWhenFull. promise is called exactly once, when the record is
// committed or has failed; it must not be nil.
func (p *Producer) Produce(ctx context.Context, rec *pgmsgtype.Record, partitions int, promise func(*pgmsgtype.Record, error)) {
	size := int64(len(rec.Key) + len(rec.Value))
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed {
			promise(rec, errs.New(errs.Closed, "producer is closed"))
			return
		}
		if p.hasRoomLocked(size) {
			break
		}
		if p.cfg.FailWhenFull {
			promise(rec, errs.New(errs.BufferFull, "producer buffer full: %d records, %d bytes held (MaxBufferedRecords %d, MaxBufferedBytes %d)",
				p.held, p.heldBytes, p.cfg.MaxBufferedRecords, p.cfg.MaxBufferedBytes))
			return
		}
		if p.room == nil {
			p.room = make(chan struct{})
		}
		room := p.room
		p.mu.Unlock()
		select {
		case <-room:
			p.mu.Lock()
		case <-ctx.Done():
			p.mu.Lock()
			promise(rec, ctx.Err())
			return
		}
	}
	p.spreadUsed = false
	part, err := p.sink.Partition(rec, partitions, p.cfg.ManualPartition, p)
	if err != nil {
		promise(rec, err)
		return
	}
	tp := topicPartition{rec.Topic, part}
	b := p.parts[tp]
	if b == nil {
		b = &partBatcher{tp: tp}
		p.parts[tp] = b
	}
	b.pending = append(b.pending, pendingRecord{rec: rec, promise: promise, spread: p.spreadUsed})
	b.bytes += len(rec.Key) + len(rec.Value)
	p.held++
	p.heldBytes += size
	if b.lingering && (len(b.pending) >= b.expect || p.full(b)) {
		p.endLingerLocked(b)
	}
	p.maybeSendLocked(b)
}

// lingerLocked makes b's sender wait for the callers of the batch of n
// records it has just answered (adaptiveLinger) and returns the channel
// closed when the wait ends; nil when it does not wait: Linger set (the
// caller's choice), the producer closing, a batch that failed or was not
// all sticky records, or as
// many records pending as it would wait for.
func (p *Producer) lingerLocked(b *partBatcher, batch []pendingRecord, err error) chan struct{} {
	if err != nil || len(batch) < 2 || p.cfg.Linger > 0 || p.closed {
		return nil
	}
	for _, pr := range batch {
		if !pr.spread {
			return nil
		}
	}
	want := min(len(b.pending)+len(batch), p.cfg.MaxBatchRecords)
	if len(b.pending) >= want || p.full(b) {
		return nil
	}
	b.lingering, b.expect, b.lingerDone = true, want, make(chan struct{})
	p.lingering[b.tp.topic] = append(p.lingering[b.tp.topic], b)
	b.lingerStop = time.AfterFunc(p.callersLinger, func() {
		p.mu.Lock()
		p.endLingerLocked(b)
		p.mu.Unlock()
	})
	return b.lingerDone
}

// endLingerLocked ends b's linger, if it lingers: its sender goes on.
func (p *Producer) endLingerLocked(b *partBatcher) {
	if !b.lingering {
		return
	}
	b.lingering = false
	b.lingerStop.Stop()
	l := slices.DeleteFunc(p.lingering[b.tp.topic], func(x *partBatcher) bool { return x == b })
	if len(l) == 0 {
		delete(p.lingering, b.tp.topic)
	} else {
		p.lingering[b.tp.topic] = l
	}
	close(b.lingerDone)
}

// Spread returns a partition of topic lingering for its callers, else
// topic's sticky partition, choosing one at random when there is none (or
// it is out of range). Only Sink.Partition calls it,
// with p's lock held.
func (p *Producer) Spread(topic string, partitions int) int32 {
	p.spreadUsed = true
	// A lingering partition short of the records it waits for first, the
	// one missing the most: its callers are coming back.
	var best *partBatcher
	for _, b := range p.lingering[topic] {
		if int(b.tp.partition) < partitions && len(b.pending) < b.expect &&
			(best == nil || b.expect-len(b.pending) > best.expect-len(best.pending)) {
			best = b
		}
	}
	if best != nil {
		return best.tp.partition
	}
	s, ok := p.sticky[topic]
	if !ok || int(s) >= partitions {
		s = rand.Int32N(int32(partitions))
		p.sticky[topic] = s
	}
	return s
}

// hasRoomLocked reports whether a record of size bytes fits in the buffer;
// one record always fits when nothing is held.
func (p *Producer) hasRoomLocked(size int64) bool {
	if p.held == 0 {
		return true
	}
	if p.held >= p.cfg.MaxBufferedRecords {
		return false
	}
	return p.cfg.MaxBufferedBytes == 0 || p.heldBytes+size <= p.cfg.MaxBufferedBytes
}

// releaseLocked gives back the room of records that are done, waking
// Produce calls waiting for it.
func (p *Producer) releaseLocked(n int, bytes int64) {
	p.held -= n
	p.heldBytes -= bytes
	if p.room != nil {
		close(p.room)
		p.room = nil
	}
}

func (p *Producer) full(b *partBatcher) bool {
	return len(b.pending) >= p.cfg.MaxBatchRecords || b.bytes >= p.cfg.MaxBatchBytes
}

// maybeSendLocked starts the sender of b unless one runs, honouring Linger.
func (p *Producer) maybeSendLocked(b *partBatcher) {
	if b.sending || len(b.pending) == 0 {
		return
	}
	if p.cfg.Linger > 0 && !p.full(b) && !p.closed {
		if b.timer == nil {
			b.timer = time.AfterFunc(p.cfg.Linger, func() {
				p.mu.Lock()
				b.timer = nil
				p.startLocked(b)
				p.mu.Unlock()
			})
		}
		return
	}
	p.startLocked(b)
}

func (p *Producer) startLocked(b *partBatcher) {
	if b.sending || len(b.pending) == 0 {
		return
	}
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.sending = true
	p.senders++
	go p.sender(b)
}

// sender sends b's pending records batch after batch until none is left.
func (p *Producer) sender(b *partBatcher) {
	for {
		p.mu.Lock()
		if len(b.pending) == 0 {
			b.sending = false
			p.senders--
			if p.senders == 0 {
				p.idle.Broadcast()
			}
			p.mu.Unlock()
			return
		}
		n, bytes := 0, 0
		for n < len(b.pending) && n < p.cfg.MaxBatchRecords {
			sz := len(b.pending[n].rec.Key) + len(b.pending[n].rec.Value)
			if n > 0 && bytes+sz > p.cfg.MaxBatchBytes {
				break
			}
			bytes += sz
			n++
		}
		batch := b.pending[:n:n]
		b.pending = b.pending[n:]
		b.bytes -= bytes
		// The sticky partition moves on once its batch is closed, so unkeyed
		// records spread over partitions batch by batch (Kafka's sticky
		// partitioner).
		if s, ok := p.sticky[b.tp.topic]; ok && s == b.tp.partition {
			delete(p.sticky, b.tp.topic)
		}
		p.mu.Unlock()

		recs := make([]*pgmsgtype.Record, n)
		for i, pr := range batch {
			recs[i] = pr.rec
		}
		pb := Batch{Topic: b.tp.topic, Partition: b.tp.partition, Records: recs}
		if p.cfg.ProducerID != "" {
			// The sequence moves on whatever the outcome: a batch that
			// failed after all may be stored, and the next must not
			// overlap it.
			p.mu.Lock()
			pb.ProducerID, pb.Sequence = p.cfg.ProducerID, b.nextSeq
			b.nextSeq += int64(n)
			p.mu.Unlock()
		}
		err := p.send(pb)
		// The linger starts before the callers hear back, so that what
		// they produce next finds the sticky partition on b.
		p.mu.Lock()
		wait := p.lingerLocked(b, batch, err)
		p.mu.Unlock()
		for _, pr := range batch {
			pr.promise(pr.rec, err)
		}
		p.mu.Lock()
		p.releaseLocked(n, int64(bytes))
		p.mu.Unlock()
		if wait != nil {
			<-wait
		}
	}
}

// send publishes one batch, retrying for up to DeliveryTimeout while it
// fails with a retryable error that left nothing written (never past a
// negative DeliveryTimeout: the deadline has passed).
func (p *Producer) send(pb Batch) error {
	deadline := time.Now().Add(p.cfg.DeliveryTimeout)
	pause := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
		err := p.sink.Publish(ctx, pb)
		cancel()
		// Backpressure has its own wait (the topic's backpressure_timeout_ms,
		// in the Sink's Publish).
		// An idempotent batch is retried whatever its outcome was: if it
		// was stored, the retry only reports where.
		retry := errs.IsRetryable(err) && nothingWritten(err)
		if pb.ProducerID != "" {
			retry = retryIdempotent(err)
		}
		if err == nil || errors.Is(err, errs.Backpressure) || !retry || time.Now().Add(pause).After(deadline) {
			return err
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Second)
	}
}

// retryIdempotent reports whether an idempotent batch that failed with err
// is sent again: a retryable error, or one that left the outcome unknown
// (the connection broke, the request timed out), which the retry settles.
// Errors the server or the client answered are final.
func retryIdempotent(err error) bool {
	if errs.IsRetryable(err) {
		return true
	}
	if _, ok := errors.AsType[*errs.Sentinel](err); ok {
		return false
	}
	return !errs.IsDatabase(err) && !errors.Is(err, pgx.ErrTxClosed)
}

// nothingWritten reports whether a failed publish is known to have
// written nothing: the server answered with an error (its transaction
// rolled back), or the statement was never sent.
func nothingWritten(err error) bool {
	return errs.IsDatabase(err) || errs.SafeToRetry(err)
}

// Flush sends every queued record now (ignoring Linger) and waits until no
// record is queued or in flight.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	for _, b := range p.parts {
		p.endLingerLocked(b)
		p.startLocked(b)
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.mu.Lock()
		for p.senders > 0 {
			p.idle.Wait()
		}
		p.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close flushes queued records and stops the producer; Produce fails after
// (also a Produce waiting for room) with errs.Closed.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	if p.room != nil {
		close(p.room)
		p.room = nil
	}
	p.mu.Unlock()
	return p.Flush(ctx)
}
