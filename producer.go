package pgmsg

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg/internal/producer"
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
	// concurrent single-record callers cheap. With zero, a partition whose
	// batch carried several unkeyed records waits up to 250µs for those
	// records' callers to produce again (they go to it, as the sticky
	// partition), and sends as soon as they have: concurrent ProduceSync
	// callers stay in one transaction instead of splitting into a record
	// sent alone and the rest waiting behind it.
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
	// engine is the batching machinery (internal/producer); it checks
	// records and publishes them through the client's publish engine.
	engine *producer.Producer
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
	ecfg := producer.Config{
		Linger:             out.Linger,
		MaxBatchRecords:    out.MaxBatchRecords,
		MaxBatchBytes:      out.MaxBatchBytes,
		RequestTimeout:     out.RequestTimeout,
		ManualPartition:    out.ManualPartition,
		MaxBufferedRecords: out.MaxBufferedRecords,
		MaxBufferedBytes:   out.MaxBufferedBytes,
		FailWhenFull:       out.FailWhenFull,
		DeliveryTimeout:    out.DeliveryTimeout,
	}
	if out.Idempotent {
		ecfg.ProducerID = out.ProducerID
	}
	engine := producer.OnPublisher(c.publisher, c.pool, producer.Checks{ValidateName: ValidateName, Tracer: c.tracer}, ecfg)
	return &Producer{engine: engine}, nil
}

// Produce queues rec and returns. promise (may be nil) is called exactly
// once, when the record is committed (rec's Partition, Offset and
// Timestamp are then set) or has failed. When the buffer is full
// (MaxBufferedRecords, MaxBufferedBytes) Produce waits for room, or fails
// the record with ErrBufferFull under FailWhenFull. ctx bounds the
// topic-metadata lookup and that wait; a queued record is sent even if ctx
// ends.
func (p *Producer) Produce(ctx context.Context, rec *Record, promise func(*Record, error)) {
	p.engine.Submit(ctx, rec, promise)
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

// Flush sends every queued record now (ignoring Linger) and waits until no
// record is queued or in flight, so every record produced before the call
// is committed or failed.
func (p *Producer) Flush(ctx context.Context) error { return p.engine.Flush(ctx) }

// Close flushes queued records and stops the producer; Produce fails after
// (also a Produce waiting for room) with ErrClosed.
func (p *Producer) Close(ctx context.Context) error { return p.engine.Close(ctx) }
