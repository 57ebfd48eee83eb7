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
//
// The partition's publishes go through its queue (partQueue): one at a
// time from this listener, the partition's counter row admitting one
// writer anyway, and the idempotent producers' batches that queued
// meanwhile, from other connections, are stored together in one
// transaction (a group commit; see publishGroup).
func (s *Server) publish(ctx context.Context, sp *kmsg.ProduceResponseTopicPartition, batches []batch) error {
	for _, b := range batches {
		if b.transactional {
			setProduceError(0, sp, &batchError{code: kerr.TransactionalIDAuthorizationFailed.Code})
			return nil
		}
	}
	it := &pubItem{batches: batches, done: make(chan struct{}), base: -1}
	for _, b := range batches {
		it.bytes += recordsBytes(b.records)
	}
	s.partitionQueue(batches[0].records[0].Topic, batches[0].records[0].Partition).add(s, it)
	// The queue stores the item on the server's context: it ends only
	// when the server closes.
	<-it.done
	err := it.err
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.ctx.Err() != nil {
			return s.ctx.Err()
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
	sp.BaseOffset = it.base
	return nil
}

// pubItem is one partition's batches of one Produce request, queued on
// the partition: done is closed once they are stored (base, the first
// batch's base offset) or refused (err).
type pubItem struct {
	batches []batch
	bytes   int
	done    chan struct{}
	base    int64
	err     error
}

// groupMaxBytes bounds the records of the batches one group commit
// stores together (at least one batch goes, whatever its size).
const groupMaxBytes = 4 << 20

// partQueue holds the publishes waiting for a partition. The first
// publish to find it idle starts a drainer, which takes what is waiting
// each time it is free and stores it.
type partQueue struct {
	mu      sync.Mutex
	busy    bool
	waiting []*pubItem
}

func (q *partQueue) add(s *Server, it *pubItem) {
	q.mu.Lock()
	q.waiting = append(q.waiting, it)
	start := !q.busy
	q.busy = true
	q.mu.Unlock()
	if start {
		go q.drain(s)
	}
}

func (q *partQueue) drain(s *Server) {
	for {
		q.mu.Lock()
		if len(q.waiting) == 0 {
			q.busy = false
			q.mu.Unlock()
			return
		}
		n, size := 1, q.waiting[0].bytes
		for n < len(q.waiting) && size+q.waiting[n].bytes <= groupMaxBytes {
			size += q.waiting[n].bytes
			n++
		}
		group := append([]*pubItem(nil), q.waiting[:n]...)
		q.waiting = append(q.waiting[:0], q.waiting[n:]...)
		q.mu.Unlock()
		s.publishGroup(s.ctx, group)
	}
}

func recordsBytes(recs []*pgmsg.Record) int {
	n := 0
	for _, r := range recs {
		n += len(r.Key) + len(r.Value) + 64
	}
	return n
}

func (s *Server) partitionQueue(topic string, partition int32) *partQueue {
	key := tp{topic, partition}
	if v, ok := s.partLocks.Load(key); ok {
		return v.(*partQueue)
	}
	v, _ := s.partLocks.LoadOrStore(key, new(partQueue))
	return v.(*partQueue)
}

// publishGroup stores a partition's queued items and closes their done.
// Idempotent producers' items (two or more) go in one transaction; any
// other item is stored alone: a plain batch with one publish (merging
// them measured slower than back-to-back batches, produce_benchmark_test.go),
// an idempotent one in a transaction of its own.
func (s *Server) publishGroup(ctx context.Context, items []*pubItem) {
	var idem []*pubItem
	for _, it := range items {
		if it.batches[0].producerID >= 0 {
			idem = append(idem, it)
			continue
		}
		s.publishPlain(ctx, it)
	}
	switch {
	case len(idem) == 1:
		s.publishIdempotentItems(ctx, idem)
	case len(idem) > 1:
		if err := s.publishIdempotentItems(ctx, idem); err != nil {
			// The shared transaction failed (a record the client
			// refuses, the database): store each on its own, so that
			// each producer gets its own answer and no other's error.
			for _, it := range idem {
				s.publishIdempotentItems(ctx, []*pubItem{it})
			}
		}
	}
}

// publishPlain stores a non-idempotent item's batches with one publish.
func (s *Server) publishPlain(ctx context.Context, it *pubItem) {
	defer close(it.done)
	recs := it.batches[0].records
	for _, b := range it.batches[1:] {
		recs = append(recs, b.records...)
	}
	it.err = s.client.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true})
	if it.err == nil {
		it.base = recs[0].Offset
	}
}

func producerKey(b *batch) string {
	return "kafka-" + strconv.FormatInt(b.producerID, 10) + "-" + strconv.Itoa(int(b.producerEpoch))
}

// producerTurn is one producer's state on the partition inside a group's
// transaction: read under its lock once, then advanced by each batch the
// group stores for it.
type producerTurn struct {
	st   store.KafkaProducerState
	ok   bool
	last *batch // the producer's last batch the group stores (st then describes it)
}

// publishIdempotentItems stores idempotent producers' items in one
// transaction, each batch once, by its producer id, epoch and first
// sequence, and closes each item's done. It applies
// publish_idempotent()'s rule to the same producer_state rows, taking
// each producer's lock on the partition first, but publishes through the
// client's direct statement (Client.PublishTx) rather than the PL/pgSQL
// function, whose per-record arrays measured about 0.3x of a plain
// publish for Kafka-sized batches. Inside a transaction the client never
// publishes with COPY (only on its pool), so the server's role, the
// schema's admin, which may not write the record table, publishes
// through _publish_direct() (SECURITY DEFINER) and no refused COPY can
// abort the transaction.
// The rule: the batch the producer stored last on the partition, sent
// again with the same sequences, is a retry (nothing written); a batch
// starting after it is stored; anything else is out of order. An item's
// batches before a refused one are stored, as they were when each went
// in a transaction of its own.
//
// With several items, an error of the transaction itself is returned
// and no done is closed (the caller stores them one by one); otherwise
// every item ends with its answer.
func (s *Server) publishIdempotentItems(ctx context.Context, items []*pubItem) error {
	err := s.storeIdempotent(ctx, items)
	if err != nil && len(items) > 1 && ctx.Err() == nil {
		for _, it := range items {
			it.err, it.base = nil, -1
		}
		return err
	}
	for _, it := range items {
		if err != nil {
			it.err = err
		}
		close(it.done)
	}
	return nil
}

func (s *Server) storeIdempotent(ctx context.Context, items []*pubItem) error {
	topic, partition := items[0].batches[0].records[0].Topic, items[0].batches[0].records[0].Partition
	tx, err := s.client.Pool().Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	turns := map[string]*producerTurn{}
	var order []string // producers in the order of their first batch
	var recs []*pgmsg.Record
	// places[i][j] is where item i's batch j is: its records (stored now)
	// or the base offset of a retry.
	type place struct {
		b      *batch
		stored bool
		base   int64
	}
	places := make([][]place, len(items))
	for i, it := range items {
		for j := range it.batches {
			b := &it.batches[j]
			pid := producerKey(b)
			t := turns[pid]
			if t == nil {
				t = &producerTurn{}
				if t.st, t.ok, err = s.store.KafkaProducerLock(ctx, tx, topic, partition, pid); err != nil {
					return err
				}
				turns[pid] = t
				order = append(order, pid)
			}
			if !t.ok {
				it.err = fmt.Errorf("topic %q partition %d: %w", topic, partition, pgmsg.ErrPartitionOutOfRange)
				break
			}
			seq := int64(b.firstSequence)
			last := seq + int64(len(b.records)) - 1
			st := &t.st
			if st.Found && st.FirstSequence == seq && st.LastSequence == last {
				if t.last != nil {
					places[i] = append(places[i], place{b: t.last, stored: true})
				} else {
					places[i] = append(places[i], place{base: st.BaseOffset})
				}
				continue
			}
			if st.Found && last <= st.LastSequence {
				// Wholly before the last stored batch: one stored earlier
				// (a producer numbers its records once), resent with the
				// batches after it when its connection failed. Kafka keeps
				// the last five batches for this; pgmsg keeps one and
				// answers DUPLICATE_SEQUENCE_NUMBER, which producers take
				// as stored.
				it.err = errDuplicateSequence
				break
			}
			if st.Found && seq != st.LastSequence+1 {
				it.err = fmt.Errorf("producer %s sent records %d to %d of topic %q partition %d, whose last stored batch is %d to %d: %w",
					pid, seq, last, topic, partition, st.FirstSequence, st.LastSequence, pgmsg.ErrOutOfOrderSequence)
				break
			}
			if !st.Found && seq != 0 {
				it.err = fmt.Errorf("producer %s's first batch on topic %q partition %d starts at sequence %d, not 0: %w",
					pid, topic, partition, seq, pgmsg.ErrOutOfOrderSequence)
				break
			}
			st.Found, st.FirstSequence, st.LastSequence = true, seq, last
			t.last = b
			recs = append(recs, b.records...)
			places[i] = append(places[i], place{b: b, stored: true})
		}
	}
	if len(recs) > 0 {
		if err := s.client.PublishTx(ctx, tx, recs, &pgmsg.PublishOpts{ManualPartition: true}); err != nil {
			return err
		}
		for _, pid := range order {
			t := turns[pid]
			if t.last == nil {
				continue
			}
			b := t.last
			if err := s.store.KafkaProducerSave(ctx, tx, t.st.TopicID, partition, pid, int64(b.firstSequence),
				int64(b.firstSequence)+int64(len(b.records))-1, b.records[0].Offset, int32(len(b.records)), b.records[0].Timestamp); err != nil {
				return err
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for i, it := range items {
		if len(places[i]) == 0 {
			continue
		}
		p := places[i][0]
		if p.stored {
			it.base = p.b.records[0].Offset
		} else {
			it.base = p.base
		}
	}
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
	case pgmsg.IsRetryable(err):
		return kerr.KafkaStorageError.Code, err.Error()
	}
	return kerr.UnknownServerError.Code, "internal error"
}
