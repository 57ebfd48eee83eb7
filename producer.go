package pgmsg

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Producer defaults.
const (
	ProducerMaxBatchRecordsDefault = 1000
	ProducerMaxBatchBytesDefault   = 4 << 20
	ProducerRequestTimeoutDefault  = 30 * time.Second
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
	switch {
	case out.Linger < 0:
		return nil, fmt.Errorf("pgmsg: ProducerConfig.Linger must not be negative, got %s", out.Linger)
	case out.MaxBatchRecords < 1:
		return nil, fmt.Errorf("pgmsg: ProducerConfig.MaxBatchRecords must be at least 1, got %d", out.MaxBatchRecords)
	case out.MaxBatchBytes < 1:
		return nil, fmt.Errorf("pgmsg: ProducerConfig.MaxBatchBytes must be at least 1, got %d", out.MaxBatchBytes)
	case out.RequestTimeout < 0:
		return nil, fmt.Errorf("pgmsg: ProducerConfig.RequestTimeout must not be negative, got %s", out.RequestTimeout)
	}
	p := &Producer{client: c, cfg: out, parts: map[topicPartition]*partBatcher{}, sticky: map[string]int32{}}
	p.idle = sync.NewCond(&p.mu)
	return p, nil
}

// Produce queues rec and returns at once. promise (may be nil) is called
// exactly once, from another goroutine, when the record is committed (rec's
// Partition, Offset and Timestamp are then set) or has failed. ctx bounds
// only the topic-metadata lookup; a queued record is sent even if ctx ends.
func (p *Producer) Produce(ctx context.Context, rec *Record, promise func(*Record, error)) {
	if promise == nil {
		promise = func(*Record, error) {}
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		promise(rec, newError(ErrClosed, "producer is closed"))
		return
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
	p.maybeSendLocked(b)
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
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
		pb := &partitionBatch{topic: b.tp.topic, partition: b.tp.partition, records: recs}
		err := p.client.withBackpressure(ctx, pb.topic, func() error { return p.client.sendBatch(ctx, p.client.pool, pb, false) })
		cancel()
		if err == nil {
			p.client.afterCommit(pb, true)
		}
		for _, pr := range batch {
			pr.promise(pr.rec, err)
		}
	}
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

// Close flushes queued records and stops the producer; Produce fails after.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return p.Flush(ctx)
}
