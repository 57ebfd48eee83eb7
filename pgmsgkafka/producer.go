package pgmsgkafka

import (
	"context"
	"errors"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
)

// NewLogProducer returns a producer with its own kgo client, configured
// from cfg: Linger (ProducerLinger), MaxBatchBytes (ProducerBatchMaxBytes),
// RequestTimeout, MaxBufferedRecords, MaxBufferedBytes, FailWhenFull
// (TryProduce), DeliveryTimeout (RecordDeliveryTimeout) and
// ManualPartition. MaxBatchRecords and ProducerID have no Kafka
// equivalent and are ignored; writes are idempotent whatever Idempotent
// says (Kafka's default; kgo.DisableIdempotentWrite in Config.Opts turns
// that off).
func (b *Backend) NewLogProducer(cfg *pgmsg.ProducerConfig) (pgmsg.LogProducer, error) {
	c := pgmsg.ProducerConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.MaxBatchRecords < 0 || c.MaxBatchBytes < 0 || c.MaxBufferedRecords < 0 || c.MaxBufferedBytes < 0 ||
		c.Linger < 0 || c.RequestTimeout < 0 {
		return nil, pgmsg.NewError(pgmsg.ErrInvalidArgument, nil, "producer limits and durations must not be negative")
	}
	var opts []kgo.Opt
	if c.Linger > 0 {
		opts = append(opts, kgo.ProducerLinger(c.Linger))
	}
	if c.MaxBatchBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(min(c.MaxBatchBytes, 1<<30))))
	}
	if c.RequestTimeout > 0 {
		opts = append(opts, kgo.ProduceRequestTimeout(c.RequestTimeout))
	}
	if c.MaxBufferedRecords > 0 {
		opts = append(opts, kgo.MaxBufferedRecords(c.MaxBufferedRecords))
	}
	if c.MaxBufferedBytes > 0 {
		opts = append(opts, kgo.MaxBufferedBytes(int(c.MaxBufferedBytes)))
	}
	if c.DeliveryTimeout > 0 {
		opts = append(opts, kgo.RecordDeliveryTimeout(c.DeliveryTimeout))
	}
	cl, err := b.newClient(opts...)
	if err != nil {
		return nil, err
	}
	return &producer{client: cl, manual: c.ManualPartition, try: c.FailWhenFull}, nil
}

// producer is a pgmsg.LogProducer on its own kgo client.
type producer struct {
	client *kgo.Client
	manual bool
	try    bool // FailWhenFull

	mu     sync.Mutex
	closed bool
}

func (p *producer) Produce(ctx context.Context, rec *pgmsg.Record, promise func(*pgmsg.Record, error)) {
	if promise == nil {
		promise = func(*pgmsg.Record, error) {}
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		promise(rec, pgmsg.NewError(pgmsg.ErrClosed, nil, "producer is closed"))
		return
	}
	if err := checkRecord(rec, p.manual); err != nil {
		promise(rec, err)
		return
	}
	produce(ctx, p.client, rec, p.manual, p.try, promise)
}

func (p *producer) ProduceSync(ctx context.Context, records ...*pgmsg.Record) error {
	var wg sync.WaitGroup
	errs := make([]error, len(records))
	wg.Add(len(records))
	for i, r := range records {
		p.Produce(ctx, r, func(_ *pgmsg.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	return firstError(errs)
}

func (p *producer) Flush(ctx context.Context) error { return p.client.Flush(ctx) }

func (p *producer) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.client.Flush(ctx)
	p.client.Close()
	return err
}

// produce sends rec through cl and calls promise with rec, its Partition,
// Offset and Timestamp set, or with the error mapped to pgmsg's sentinels.
func produce(ctx context.Context, cl *kgo.Client, rec *pgmsg.Record, manual, try bool, promise func(*pgmsg.Record, error)) {
	kr := &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp}
	if kr.Value == nil {
		kr.Value = []byte{} // a nil value is a tombstone in Kafka; pgmsg stores an empty one
	}
	for k, v := range rec.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: k, Value: v})
	}
	var mark *manualMark
	if manual {
		mark = &manualMark{}
		kr.Partition = rec.Partition
		kr.Context = context.WithValue(ctx, manualKey{}, mark)
	}
	done := func(kr *kgo.Record, err error) {
		if err != nil {
			promise(rec, produceError(rec, mark, err))
			return
		}
		rec.Partition, rec.Offset, rec.Timestamp = kr.Partition, kr.Offset, kr.Timestamp
		promise(rec, nil)
	}
	if try {
		cl.TryProduce(ctx, kr, done)
		return
	}
	cl.Produce(ctx, kr, done)
}

// produceError maps a failed produce to pgmsg's sentinels.
func produceError(rec *pgmsg.Record, mark *manualMark, err error) error {
	switch {
	case mark != nil && mark.outOfRange:
		return pgmsg.NewError(pgmsg.ErrPartitionOutOfRange, err, "partition %d out of range of topic %q", rec.Partition, rec.Topic)
	case errors.Is(err, kgo.ErrMaxBuffered):
		return pgmsg.NewError(pgmsg.ErrBufferFull, err, "producer buffer full")
	case errors.Is(err, kerr.MessageTooLarge):
		return pgmsg.NewError(pgmsg.ErrRecordTooLarge, err, "record too large for topic %q", rec.Topic)
	case errors.Is(err, kgo.ErrClientClosed):
		return pgmsg.NewError(pgmsg.ErrClosed, err, "producer is closed")
	}
	return mapError(err)
}

// manualKey marks, in a record's Context, a record whose partition was
// chosen by the caller (PublishOpts.ManualPartition); the partitioner
// sets outOfRange when it is not one of the topic's.
type manualKey struct{}

type manualMark struct{ outOfRange bool }

// partitioner is kgo's StickyKeyPartitioner (murmur2 of the key, the
// partition pgmsg.PartitionForKey picks; records without a key stick to
// one partition per batch), except for records marked manual.
type partitioner struct{ sticky kgo.Partitioner }

func newPartitioner() kgo.Partitioner {
	return partitioner{sticky: kgo.StickyKeyPartitioner(nil)}
}

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &topicPartitioner{sticky: p.sticky.ForTopic(topic).(stickyTopicPartitioner)}
}

// stickyTopicPartitioner is what kgo's StickyKeyPartitioner returns per topic.
type stickyTopicPartitioner interface {
	kgo.TopicPartitioner
	kgo.TopicPartitionerOnNewBatch
}

type topicPartitioner struct{ sticky stickyTopicPartitioner }

func manualOf(r *kgo.Record) *manualMark {
	if r.Context == nil {
		return nil
	}
	m, _ := r.Context.Value(manualKey{}).(*manualMark)
	return m
}

func (t *topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return manualOf(r) != nil || t.sticky.RequiresConsistency(r)
}

// Partition returns the index of the record's partition among all n
// partitions (RequiresConsistency keeps them all in the mapping).
func (t *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if m := manualOf(r); m != nil {
		if int(r.Partition) >= n {
			m.outOfRange = true
			return -1 // kgo fails the record
		}
		return int(r.Partition)
	}
	return t.sticky.Partition(r, n)
}

func (t *topicPartitioner) OnNewBatch() { t.sticky.OnNewBatch() }
