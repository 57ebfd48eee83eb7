package kafkasrv

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

// produce stores each partition's batches with one publish through the
// client's fast path (a manual-partition Publish, or PublishIdempotent for
// an idempotent producer's batch), the partitions concurrently. Whatever
// acks asks, a partition is answered once its records are committed;
// acks=0 answers nothing.
func (c *conn) produce(ctx context.Context, req *kmsg.ProduceRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	var fail *batchError
	switch {
	case req.TransactionID != nil:
		fail = &batchError{kerr.TransactionalIDAuthorizationFailed.Code, "transactions are not supported"}
	case req.Acks != 0 && req.Acks != 1 && req.Acks != -1:
		fail = &batchError{kerr.InvalidRequiredAcks.Code, "acks must be -1, 0 or 1"}
	}
	type job struct {
		sp         *kmsg.ProduceResponseTopicPartition
		topic      string
		raw        []byte
		prev, mine chan struct{}
	}
	var jobs []job
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		resp.Topics = append(resp.Topics, st)
	}
	for i, rt := range req.Topics {
		for j, rp := range rt.Partitions {
			sp := &resp.Topics[i].Partitions[j]
			*sp = kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = -1, -1, -1
			if fail != nil {
				setProduceError(req.Version, sp, fail)
				continue
			}
			if code := c.authorize(ctx, "topic", rt.Topic, "write"); code != 0 {
				sp.ErrorCode = code
				continue
			}
			key := tp{rt.Topic, rp.Partition}
			mine := make(chan struct{})
			c.tailsMu.Lock()
			prev := c.tails[key]
			c.tails[key] = mine
			c.tailsMu.Unlock()
			jobs = append(jobs, job{sp: sp, topic: rt.Topic, raw: rp.Records, prev: prev, mine: mine})
		}
	}
	var wg sync.WaitGroup
	var fatal error
	var fatalOnce sync.Once
	for i := range jobs {
		j := jobs[i]
		run := func() {
			defer func() {
				close(j.mine)
				key := tp{j.topic, j.sp.Partition}
				c.tailsMu.Lock()
				if c.tails[key] == j.mine {
					delete(c.tails, key)
				}
				c.tailsMu.Unlock()
			}()
			batches, berr := decodeBatches(j.raw, j.topic, j.sp.Partition, int(c.s.cfg.MaxRequestBytes))
			if j.prev != nil {
				select {
				case <-j.prev:
				case <-ctx.Done():
					fatalOnce.Do(func() { fatal = ctx.Err() })
					return
				}
			}
			if berr != nil {
				setProduceError(req.Version, j.sp, berr)
				return
			}
			if err := c.s.publish(ctx, j.sp, batches); err != nil {
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
// ended).
func (s *Server) publish(ctx context.Context, sp *kmsg.ProduceResponseTopicPartition, batches []batch) error {
	for _, b := range batches {
		if b.transactional {
			setProduceError(0, sp, &batchError{code: kerr.TransactionalIDAuthorizationFailed.Code})
			return nil
		}
	}
	manual := &pgmsg.PublishOpts{ManualPartition: true}
	var err error
	base := int64(-1)
	if batches[0].producerID < 0 {
		recs := batches[0].records
		for _, b := range batches[1:] {
			recs = append(recs, b.records...)
		}
		// One publish per partition at a time from the listener: the
		// partition's counter row admits one writer anyway, and calls
		// queued behind it would be merged by the client into statements
		// of many large batches, which measured slower than back-to-back
		// batches (produce_benchmark_test.go).
		mu := s.partitionLock(recs[0].Topic, recs[0].Partition)
		mu.Lock()
		err = s.client.Publish(ctx, recs, manual)
		mu.Unlock()
		if err == nil {
			base = recs[0].Offset
		}
	} else {
		// An idempotent producer's batches: each stored once, by its
		// producer id, epoch and first sequence (publish_idempotent()).
		for i, b := range batches {
			pid := "kafka-" + strconv.FormatInt(b.producerID, 10) + "-" + strconv.Itoa(int(b.producerEpoch))
			if _, err = s.client.PublishIdempotent(ctx, pid, int64(b.firstSequence), b.records, manual); err != nil {
				break
			}
			if i == 0 {
				base = b.records[0].Offset
			}
		}
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

// errorCode maps a pgmsg error onto the Kafka error code a client acts on,
// with the message to send along.
func errorCode(err error) (int16, string) {
	switch {
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
	case pgmsg.IsRetryable(err):
		return kerr.KafkaStorageError.Code, err.Error()
	}
	return kerr.UnknownServerError.Code, "internal error"
}

func (s *Server) partitionLock(topic string, partition int32) *sync.Mutex {
	key := tp{topic, partition}
	if v, ok := s.partLocks.Load(key); ok {
		return v.(*sync.Mutex)
	}
	v, _ := s.partLocks.LoadOrStore(key, new(sync.Mutex))
	return v.(*sync.Mutex)
}
