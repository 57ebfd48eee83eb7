package pgmsg

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// Producer defaults.
const (
	ProducerMaxBatchRecordsDefault = 1000
	ProducerMaxBatchBytesDefault   = 4 << 20
	ProducerRequestTimeoutDefault  = 30 * time.Second
	// ProducerMaxBufferedRecordsDefault bounds the records a Producer holds
	// (queued or in flight), as franz-go's MaxBufferedRecords.
	ProducerMaxBufferedRecordsDefault = 10000
	// ProducerDeliveryTimeoutDefault is how long a batch is retried on
	// retryable errors, as Kafka's delivery.timeout.ms.
	ProducerDeliveryTimeoutDefault = 2 * time.Minute
)

// ProducerConfig configures a Producer; nil means defaults.
type ProducerConfig struct {
	// Linger is how long a batch waits for more records before it is sent,
	// when no batch to its partition is in flight. Zero (the default) sends
	// at once; records that arrive while a batch is in flight still share
	// the next transaction, which is the group commit that makes many
	// concurrent single-record callers cheap.
	Linger time.Duration
	// MaxBatchRecords caps the records of one transaction. Default 1000.
	MaxBatchRecords int
	// MaxBatchBytes caps the key+value bytes of one transaction. Default 4 MiB.
	MaxBatchBytes int
	// RequestTimeout bounds one batch's transaction. Default 30s.
	RequestTimeout time.Duration
	// ManualPartition sends each record to its Record.Partition. Default false.
	ManualPartition bool
	// MaxBufferedRecords bounds the records the Producer holds, queued or
	// in flight. When it is reached, Produce waits for room (until its
	// context ends, when the record fails with the context's error) or,
	// with FailWhenFull, fails the record at once with ErrBufferFull.
	// Default 10000.
	MaxBufferedRecords int
	// MaxBufferedBytes bounds the key+value bytes held the same way. A
	// record larger than it is still taken when nothing else is held.
	// Default 0: no byte bound.
	MaxBufferedBytes int64
	// FailWhenFull makes Produce fail a record with ErrBufferFull instead
	// of waiting when the buffer is full. Default false: wait.
	FailWhenFull bool
	// DeliveryTimeout is how long a batch that failed with a retryable
	// error (IsRetryable) that left nothing written (the server rolled the
	// transaction back, or it was never sent) is retried, with backoff from
	// 50 ms to 1 s, before its records fail. A batch whose outcome is
	// unknown (the connection broke after it was sent) is not retried:
	// its records fail with the error, as they may have been stored.
	// Default 2m; negative: never retry.
	DeliveryTimeout time.Duration
	// Idempotent makes every batch an idempotent publish (as Kafka's
	// enable.idempotence): the Producer numbers its records per partition
	// and a batch sent again after an unknown outcome is stored once, so
	// such batches are retried too, for up to DeliveryTimeout, in order
	// (one batch in flight per partition). Each batch costs a call of
	// publish_idempotent() instead of the direct statement. Default false.
	Idempotent bool
	// ProducerID names an Idempotent producer (1 to 200 bytes). Default: a
	// random id per Producer. Give the same id to two Producers only if
	// they never publish at the same time: their sequences would collide.
	ProducerID string
}

// Producer batches records from many goroutines into few transactions: at
// most one transaction in flight per partition, so records to a partition
// are committed in the order Produce was called. Safe for concurrent use.
type Producer struct {
	client *Client
	cfg    ProducerConfig

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
}

type topicPartition struct {
	topic     string
	partition int32
}

type pendingRecord struct {
	rec     *Record
	promise func(*Record, error)
}

type partBatcher struct {
	tp      topicPartition
	pending []pendingRecord
	bytes   int
	sending bool
	timer   *time.Timer
	// nextSeq numbers the next batch's first record (Idempotent).
	nextSeq int64
}

// NewProducer returns a Producer. Close it to flush and stop it.
func (c *Client) NewProducer(cfg *ProducerConfig) (*Producer, error) {
	out := ProducerConfig{}
	if cfg != nil {
		out = *cfg
	}
	if out.MaxBatchRecords == 0 {
		out.MaxBatchRecords = ProducerMaxBatchRecordsDefault
	}
	if out.MaxBatchBytes == 0 {
		out.MaxBatchBytes = ProducerMaxBatchBytesDefault
	}
	if out.RequestTimeout == 0 {
		out.RequestTimeout = ProducerRequestTimeoutDefault
	}
	if out.MaxBufferedRecords == 0 {
		out.MaxBufferedRecords = ProducerMaxBufferedRecordsDefault
	}
	if out.DeliveryTimeout == 0 {
		out.DeliveryTimeout = ProducerDeliveryTimeoutDefault
	}
	switch {
	case out.Linger < 0:
		return nil, fmt.Errorf("pgmsg: ProducerConfig.Linger must not be negative, got %s", out.Linger)
	case out.MaxBatchRecords < 1:
		return nil, fmt.Errorf("pgmsg: ProducerConfig.MaxBatchRecords must be at least 1, got %d", out.MaxBatchRecords)
	case out.MaxBatchBytes < 1:
		return nil, fmt.Errorf("pgmsg: ProducerConfig.MaxBatchBytes must be at least 1, got %d", out.MaxBatchBytes)
	case out.RequestTimeout < 0:
		return nil, fmt.Errorf("pgmsg: ProducerConfig.RequestTimeout must not be negative, got %s", out.RequestTimeout)
	case out.MaxBufferedRecords < 1:
		return nil, fmt.Errorf("pgmsg: ProducerConfig.MaxBufferedRecords must be at least 1, got %d", out.MaxBufferedRecords)
	case out.MaxBufferedBytes < 0:
		return nil, fmt.Errorf("pgmsg: ProducerConfig.MaxBufferedBytes must not be negative, got %d", out.MaxBufferedBytes)
	}
	if out.Idempotent && out.ProducerID == "" {
		var b [16]byte
		_, _ = crand.Read(b[:])
		out.ProducerID = "producer-" + hex.EncodeToString(b[:])
	}
	if out.Idempotent && len(out.ProducerID) > 200 {
		return nil, fmt.Errorf("pgmsg: ProducerConfig.ProducerID must be at most 200 bytes, got %d", len(out.ProducerID))
	}
	p := &Producer{client: c, cfg: out, parts: map[topicPartition]*partBatcher{}, sticky: map[string]int32{}}
	p.idle = sync.NewCond(&p.mu)
	return p, nil
}

// Produce queues rec and returns. promise (may be nil) is called exactly
// once, when the record is committed (rec's Partition, Offset and
// Timestamp are then set) or has failed. When the buffer is full
// (MaxBufferedRecords, MaxBufferedBytes) Produce waits for room, or fails
// the record with ErrBufferFull under FailWhenFull. ctx bounds the
// topic-metadata lookup and that wait; a queued record is sent even if ctx
// ends.
func (p *Producer) Produce(ctx context.Context, rec *Record, promise func(*Record, error)) {
	if promise == nil {
		promise = func(*Record, error) {}
	}
	if rec != nil && p.client.tracer() != nil {
		end := p.client.startPublishSpan(ctx, rec.Topic, []*Record{rec})
		done := promise
		promise = func(r *Record, err error) {
			end(err)
			done(r, err)
		}
	}
	if rec == nil {
		promise(rec, newError(ErrInvalidArgument, "nil record"))
		return
	}
	if err := ValidateName("topic", rec.Topic); err != nil {
		promise(rec, err)
		return
	}
	meta, err := p.client.topicMeta(ctx, p.client.pool, rec.Topic, false)
	if err != nil {
		promise(rec, err)
		return
	}
	if err := checkRecord(rec, meta); err != nil {
		promise(rec, err)
		return
	}
	size := int64(len(rec.Key) + len(rec.Value))
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed {
			promise(rec, newError(ErrClosed, "producer is closed"))
			return
		}
		if p.hasRoomLocked(size) {
			break
		}
		if p.cfg.FailWhenFull {
			promise(rec, newError(ErrBufferFull, "producer buffer full: %d records, %d bytes held (MaxBufferedRecords %d, MaxBufferedBytes %d)",
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
	part, err := p.client.choosePartition(rec, meta, p.cfg.ManualPartition, func() int32 {
		s, ok := p.sticky[rec.Topic]
		if !ok || int(s) >= meta.partitions {
			s = rand.Int32N(int32(meta.partitions))
			p.sticky[rec.Topic] = s
		}
		return s
	})
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
	b.pending = append(b.pending, pendingRecord{rec: rec, promise: promise})
	b.bytes += len(rec.Key) + len(rec.Value)
	p.held++
	p.heldBytes += size
	p.maybeSendLocked(b)
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

// ProduceSync produces records and waits until each is committed or
// failed; it returns the first error. Records may land in different
// transactions: use Publish for all-or-nothing.
func (p *Producer) ProduceSync(ctx context.Context, records ...*Record) error {
	var wg sync.WaitGroup
	errs := make([]error, len(records))
	wg.Add(len(records))
	for i, r := range records {
		p.Produce(ctx, r, func(_ *Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
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

		recs := make([]*Record, n)
		for i, pr := range batch {
			recs[i] = pr.rec
		}
		pb := &partitionBatch{topic: b.tp.topic, partition: b.tp.partition, records: recs}
		if p.cfg.Idempotent {
			// The sequence moves on whatever the outcome: a batch that
			// failed after all may be stored, and the next must not
			// overlap it.
			p.mu.Lock()
			pb.producerID, pb.sequence = p.cfg.ProducerID, b.nextSeq
			b.nextSeq += int64(n)
			p.mu.Unlock()
		}
		err := p.send(pb)
		if err == nil {
			p.client.afterCommit(pb, true)
		}
		for _, pr := range batch {
			pr.promise(pr.rec, err)
		}
		p.mu.Lock()
		p.releaseLocked(n, int64(bytes))
		p.mu.Unlock()
	}
}

// send publishes one batch, retrying for up to DeliveryTimeout while it
// fails with a retryable error that left nothing written (never past a
// negative DeliveryTimeout: the deadline has passed).
func (p *Producer) send(pb *partitionBatch) error {
	deadline := time.Now().Add(p.cfg.DeliveryTimeout)
	pause := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
		err := p.client.withBackpressure(ctx, pb.topic, func() error { return p.client.sendBatch(ctx, p.client.pool, pb, false) })
		cancel()
		// Backpressure has its own wait (the topic's backpressure_timeout_ms,
		// in withBackpressure).
		// An idempotent batch is retried whatever its outcome was: if it
		// was stored, the retry only reports where.
		retry := IsRetryable(err) && nothingWritten(err)
		if pb.producerID != "" {
			retry = retryIdempotent(err)
		}
		if err == nil || errors.Is(err, ErrBackpressure) || !retry || time.Now().Add(pause).After(deadline) {
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
	if IsRetryable(err) {
		return true
	}
	if _, ok := errors.AsType[*Sentinel](err); ok {
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
// record is queued or in flight, so every record produced before the call
// is committed or failed.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	for _, b := range p.parts {
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
// (also a Produce waiting for room) with ErrClosed.
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
