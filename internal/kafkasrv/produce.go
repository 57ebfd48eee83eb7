package kafkasrv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/logpublish"
	"github.com/pgmsg/pgmsg/internal/store"
)

// produce stores each partition's batches with one publish through the
// client's fast path (a manual-partition Publish, or PublishIdempotent for
// an idempotent producer's batch), the partitions concurrently. Whatever
// acks asks, a partition is answered once its records are committed;
// acks=0 answers nothing.
func (c *conn) produce(ctx context.Context, req *kmsg.ProduceRequest, tickets []*ticket) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	var fail *batchError
	switch {
	case req.TransactionID != nil:
		fail = &batchError{kerr.TransactionalIDAuthorizationFailed.Code, "transactions are not supported"}
	case req.Acks != 0 && req.Acks != 1 && req.Acks != -1:
		fail = &batchError{kerr.InvalidRequiredAcks.Code, "acks must be -1, 0 or 1"}
	}
	// tickets are the request's partitions in order (conn.order): each
	// partition's publish waits for the connection's previous produce to
	// the partition, whether or not this one is refused.
	type job struct {
		sp    *kmsg.ProduceResponseTopicPartition
		topic string
		raw   []byte
		t     *ticket
		skip  bool
	}
	var jobs []job
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		resp.Topics = append(resp.Topics, st)
	}
	k := 0
	for i, rt := range req.Topics {
		for j, rp := range rt.Partitions {
			sp := &resp.Topics[i].Partitions[j]
			*sp = kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = -1, -1, -1
			t := tickets[k]
			k++
			skip := false
			if fail != nil {
				setProduceError(req.Version, sp, fail)
				skip = true
			} else if code := c.authorize(ctx, "topic", rt.Topic, "write"); code != 0 {
				sp.ErrorCode = code
				skip = true
			}
			if skip && t.prev == nil {
				c.done(t)
				continue
			}
			jobs = append(jobs, job{sp: sp, topic: rt.Topic, raw: rp.Records, t: t, skip: skip})
		}
	}
	var wg sync.WaitGroup
	var fatal error
	var fatalOnce sync.Once
	for i := range jobs {
		j := jobs[i]
		run := func() {
			defer c.done(j.t)
			var batches []batch
			var berr *batchError
			if !j.skip {
				batches, berr = decodeBatches(j.raw, j.topic, j.sp.Partition, int(c.s.cfg.MaxRequestBytes))
			}
			if err := j.t.wait(ctx); err != nil {
				fatalOnce.Do(func() { fatal = err })
				return
			}
			if j.skip {
				return
			}
			if berr != nil {
				setProduceError(req.Version, j.sp, berr)
				return
			}
			if err := c.s.publish(ctx, j.sp, batches, func() { c.queued(j.t) }); err != nil {
				fatalOnce.Do(func() { fatal = err })
			}
		}
		if i == len(jobs)-1 {
			run()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	wg.Wait()
	if fatal != nil {
		return nil, fatal
	}
	if req.Acks == 0 {
		return nil, nil
	}
	return resp, nil
}

func setProduceError(version int16, sp *kmsg.ProduceResponseTopicPartition, e *batchError) {
	sp.ErrorCode = e.code
	if version >= 8 && e.msg != "" {
		msg := e.msg
		sp.ErrorMessage = &msg
	}
}

// publish stores one partition's batches and sets sp's answer. It
// returns an error only when the connection must close (its context
// ended). It calls queued once the connection's next produce to the
// partition may start: for an idempotent producer's batch, as soon as
// the batch has its place in the partition's queue (the next one is
// stored after it, in the same round or a later one); for anything else,
// once it is stored.
func (s *Server) publish(ctx context.Context, sp *kmsg.ProduceResponseTopicPartition, batches []batch, queued func()) error {
	for _, b := range batches {
		if b.transactional {
			setProduceError(0, sp, &batchError{code: kerr.TransactionalIDAuthorizationFailed.Code})
			return nil
		}
	}
	var err error
	base := int64(-1)
	first := batches[0].records[0]
	q := s.partitionQueue(first.Topic, first.Partition)
	switch {
	case batches[0].producerID < 0:
		recs := batches[0].records
		for _, b := range batches[1:] {
			recs = append(recs, b.records...)
		}
		// One publish per partition at a time from the listener: the
		// partition's counter row admits one writer anyway, and calls
		// queued behind it would be merged by the client into statements
		// of many large batches, which measured slower than back-to-back
		// batches (produce_benchmark_test.go).
		q.do(&partitionWork{run: func() {
			err = s.client.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true})
		}})
		if err == nil {
			base = recs[0].Offset
		}
	case len(batches) == 1:
		// An idempotent producer's batch, stored once by its producer
		// id, epoch and first sequence; in one commit with the other
		// batches queued behind the partition's round, this producer's
		// next ones (pipelined on its connection) included.
		b := batches[0]
		w := &partitionWork{seq: &logpublish.Sequenced{Records: b.records, ProducerID: kafkaProducerID(b), Sequence: int64(b.firstSequence)}, queued: queued}
		q.do(w)
		base, err = s.sequenced(w.seq)
	default:
		q.do(&partitionWork{run: func() {
			for i, b := range batches {
				var off int64
				w := &logpublish.Sequenced{Records: b.records, ProducerID: kafkaProducerID(b), Sequence: int64(b.firstSequence)}
				w.Result, w.Err = s.pub.SendSequenced(ctx, first.Topic, first.Partition, w.Records, w.ProducerID, w.Sequence)
				if off, err = s.sequenced(w); err != nil {
					break
				}
				if i == 0 {
					base = off
				}
			}
		}})
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		code, msg := errorCode(err)
		setProduceError(0, sp, &batchError{code: code})
		if msg != "" {
			sp.ErrorMessage = &msg
		}
		if code == kerr.UnknownServerError.Code {
			s.logger.Warn("kafka: produce failed", "err", err)
		}
		return nil
	}
	sp.BaseOffset = base
	return nil
}

// errDuplicateSequence: an idempotent batch stored before the last one.
var errDuplicateSequence = errors.New("kafkasrv: batch stored before (duplicate sequence number)")

// errorCode maps a pgmsg error onto the Kafka error code a client acts on,
// with the message to send along.
func errorCode(err error) (int16, string) {
	switch {
	case errors.Is(err, errDuplicateSequence):
		return kerr.DuplicateSequenceNumber.Code, err.Error()
	case errors.Is(err, pgmsg.ErrUnknownTopic), errors.Is(err, pgmsg.ErrPartitionOutOfRange):
		return kerr.UnknownTopicOrPartition.Code, err.Error()
	case errors.Is(err, pgmsg.ErrRecordTooLarge):
		return kerr.MessageTooLarge.Code, err.Error()
	case errors.Is(err, pgmsg.ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code, err.Error()
	case errors.Is(err, pgmsg.ErrBackpressure):
		return kerr.RequestTimedOut.Code, err.Error()
	case errors.Is(err, pgmsg.ErrInvalidName):
		return kerr.InvalidTopicException.Code, err.Error()
	case errors.Is(err, pgmsg.ErrInvalidArgument), errors.Is(err, pgmsg.ErrEmptyBatch):
		return kerr.InvalidRecord.Code, err.Error()
	case errors.Is(err, pgmsg.ErrNotEnoughReplicas):
		// min_insync_replicas refused the write: Kafka's answer when the
		// in-sync set is smaller than min.insync.replicas (retriable;
		// nothing was stored).
		return kerr.NotEnoughReplicas.Code, err.Error()
	case pgmsg.IsRetryable(err):
		return kerr.KafkaStorageError.Code, err.Error()
	}
	return kerr.UnknownServerError.Code, "internal error"
}

func kafkaProducerID(b batch) string {
	return "kafka-" + strconv.FormatInt(b.producerID, 10) + "-" + strconv.Itoa(int(b.producerEpoch))
}

// sequenced returns an idempotent producer's stored batch's base offset
// (the stored one for a retry), or the error Kafka's rule gives it, with
// one batch remembered per producer and partition
// (logpublish.SendSequenced, _kafka_publish()).
func (s *Server) sequenced(w *logpublish.Sequenced) (int64, error) {
	if w.Err != nil {
		return 0, w.Err
	}
	res, recs, producerID, seq := w.Result, w.Records, w.ProducerID, w.Sequence
	topic, partition := recs[0].Topic, recs[0].Partition
	last := seq + int64(len(recs)) - 1
	switch res.Outcome {
	case store.KafkaStored, store.KafkaDuplicate:
		return res.Result.BaseOffset, nil
	case store.KafkaUnknown:
		return 0, fmt.Errorf("topic %q partition %d: %w", topic, partition, pgmsg.ErrPartitionOutOfRange)
	case store.KafkaOld:
		// Kafka keeps the last five batches for this; pgmsg keeps one
		// and answers DUPLICATE_SEQUENCE_NUMBER, which producers take as
		// stored (a producer numbers its records once, so this is one
		// stored earlier, resent when its connection failed).
		return 0, errDuplicateSequence
	}
	if !res.State.Found {
		return 0, fmt.Errorf("producer %s's first batch on topic %q partition %d starts at sequence %d, not 0: %w",
			producerID, topic, partition, seq, pgmsg.ErrOutOfOrderSequence)
	}
	return 0, fmt.Errorf("producer %s sent records %d to %d of topic %q partition %d, whose last stored batch is %d to %d: %w",
		producerID, seq, last, topic, partition, res.State.FirstSequence, res.State.LastSequence, pgmsg.ErrOutOfOrderSequence)
}
