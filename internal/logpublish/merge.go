package logpublish

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Publishes of one Publisher (one client) to one partition are merged while one is in
// flight. A publish takes the partition's counter row lock and keeps it
// through its commit (the WAL flush), so a second publish to the same
// partition would only wait for that lock inside PostgreSQL; instead it
// waits in the client, and when the send in flight ends, every publish
// that queued meanwhile goes in one statement: one counter update, one
// insert, one commit for all of them (group commit, as Kafka's producer
// sends what accumulated for a partition while the previous request was
// out). A merged send is one transaction, so each call's records are
// still stored all or none, contiguously and in the call's order; calls
// that were concurrent never had an order between them. If a merged send
// fails in the server (a record too large, a topic deleted meanwhile),
// nothing was stored and each call is sent again alone, so each gets its
// own answer, as without merging; if its outcome is unknown (the
// connection was lost, the session terminated), every call of it gets
// that error, as each would alone.

// mergeMaxCalls and mergeMaxRecords cap what one merged send carries.
const (
	mergeMaxCalls   = 64
	mergeMaxRecords = 10000
)

// publishLane is one partition's publishes of this client: whether a send
// is in flight, and the calls waiting for it to end.
type publishLane struct {
	mu    sync.Mutex
	busy  bool
	queue []*laneCall
}

// laneCall is a call waiting in a lane; turn hands it what to do next.
type laneCall struct {
	b    *Batch
	turn chan laneTurn
}

// laneTurn: lead (first element: the call itself) is the calls it sends
// now, merged; else err is the outcome of the merged send that carried the
// call, and alone asks it to send its batch by itself.
type laneTurn struct {
	lead  []*laneCall
	err   error
	alone bool
}

func (p *Publisher) lane(topic string, partition int32) *publishLane {
	key := topicPartition{topic, partition}
	if l, ok := p.lanes.Load(key); ok {
		return l.(*publishLane)
	}
	l, _ := p.lanes.LoadOrStore(key, &publishLane{})
	return l.(*publishLane)
}

// idlePartition chooses the partition of a call's unkeyed records: a
// random one among those with no publish of this client in flight, so
// that concurrent calls spread over the partitions instead of queueing
// on one (Kafka's adaptive partitioning, KIP-794, does the same with
// its brokers' queues); a random one when all are busy. Once
// maxSendingPartitions partitions of the topic have a send in flight, it
// chooses one of those instead, where the call merges with the calls
// queued there (Kafka's sticky partitioner likewise fills a batch of one
// partition before it moves on): with many partitions, every call of 64
// concurrent ones found an idle partition and went alone, one transaction
// and one WAL flush per call of 100 records, where 4 partitions merged
// them into a few transactions of hundreds of records each; the
// 256-partition benchmark's server time per record was twice the
// 4-partition one's (docs/benchmarks.md, "Scale").
func (p *Publisher) idlePartition(topic string, partitions int) int32 {
	if s := p.sendingTo(topic); s != nil {
		s.mu.Lock()
		if len(s.parts) >= maxSendingPartitions {
			part := s.parts[rand.IntN(len(s.parts))]
			s.mu.Unlock()
			if int(part) < partitions {
				return part
			}
		} else {
			s.mu.Unlock()
		}
	}
	start := rand.Int32N(int32(partitions))
	// A few probes: enough to find an idle partition when calls are a
	// handful per partition, bounded for topics with many partitions.
	for i := int32(0); i < int32(min(partitions, 8)); i++ {
		part := (start + i) % int32(partitions)
		l, ok := p.lanes.Load(topicPartition{topic, part})
		if !ok {
			return part
		}
		lane := l.(*publishLane)
		lane.mu.Lock()
		busy := lane.busy
		lane.mu.Unlock()
		if !busy {
			return part
		}
	}
	return start
}

// maxSendingPartitions is how many partitions of a topic the unkeyed
// records of one client's calls are spread over at a time (idlePartition):
// as many sends in flight as a 4-partition topic allows. With 8, the
// 256-partition benchmark's server time per record was 6.3-9.2 us against
// 4.8-5.6 with 4 (and 4.1-6.1 for 4 partitions), alternating rounds.
const maxSendingPartitions = 4

// sendingPartitions is the partitions of one topic with a send of this
// client in flight (their lanes are busy). Never locked while holding a
// lane's lock or the other way round.
type sendingPartitions struct {
	mu    sync.Mutex
	parts []int32
}

func (p *Publisher) sendingTo(topic string) *sendingPartitions {
	if s, ok := p.sending.Load(topic); ok {
		return s.(*sendingPartitions)
	}
	s, _ := p.sending.LoadOrStore(topic, &sendingPartitions{})
	return s.(*sendingPartitions)
}

// laneBusy and laneIdle record that partition's lane of topic started or
// ended sending.
func (p *Publisher) laneBusy(topic string, partition int32) {
	s := p.sendingTo(topic)
	s.mu.Lock()
	s.parts = append(s.parts, partition)
	s.mu.Unlock()
}

func (p *Publisher) laneIdle(topic string, partition int32) {
	s := p.sendingTo(topic)
	s.mu.Lock()
	if i := slices.Index(s.parts, partition); i >= 0 {
		s.parts = slices.Delete(s.parts, i, i+1)
	}
	s.mu.Unlock()
}

// sendMerged publishes b (one call's records for one partition, not
// idempotent) on the pool, merged with the calls to the same partition
// that queue while a send is in flight.
func (p *Publisher) sendMerged(ctx context.Context, b *Batch) error {
	if meta, err := p.TopicMeta(ctx, p.pool, b.Topic, false); err != nil || meta.Backpressure {
		// publish() answers for a topic with backpressure (PM014 and its
		// wait): each call alone, as before.
		return p.sendBatch(ctx, p.pool, b, false)
	}
	l := p.lane(b.Topic, b.Partition)
	l.mu.Lock()
	if !l.busy {
		l.busy = true
		l.mu.Unlock()
		p.laneBusy(b.Topic, b.Partition)
		return p.leadLane(ctx, l, []*laneCall{{b: b}})
	}
	call := &laneCall{b: b, turn: make(chan laneTurn, 1)}
	l.queue = append(l.queue, call)
	l.mu.Unlock()
	var t laneTurn
	select {
	case t = <-call.turn:
	case <-ctx.Done():
		l.mu.Lock()
		if i := slices.Index(l.queue, call); i >= 0 {
			l.queue = slices.Delete(l.queue, i, i+1)
			l.mu.Unlock()
			return ctx.Err()
		}
		l.mu.Unlock()
		// Taken into a send already: its outcome is the call's.
		t = <-call.turn
	}
	switch {
	case t.lead != nil:
		return p.leadLane(ctx, l, t.lead)
	case t.alone:
		return p.sendBatch(ctx, p.pool, b, false)
	default:
		return t.err
	}
}

// leadLane sends calls (calls[0] is the caller's own) as one batch, hands
// the lane to the calls that queued meanwhile, and tells the others of
// calls their outcome.
func (p *Publisher) leadLane(ctx context.Context, l *publishLane, calls []*laneCall) error {
	var err error
	if len(calls) == 1 {
		err = p.sendBatch(ctx, p.pool, calls[0].b, false)
	} else {
		n := 0
		for _, call := range calls {
			n += len(call.b.Records)
		}
		merged := &Batch{Topic: calls[0].b.Topic, Partition: calls[0].b.Partition, Records: make([]*pgmsgtype.Record, 0, n)}
		for _, call := range calls {
			merged.Records = append(merged.Records, call.b.Records...)
		}
		// The send carries other calls' records: the leader's
		// cancellation must not cancel theirs.
		err = p.sendBatch(context.WithoutCancel(ctx), p.pool, merged, false)
		for _, call := range calls {
			call.b.SegmentsLow = merged.SegmentsLow
		}
	}

	l.mu.Lock()
	var next []*laneCall
	if len(l.queue) > 0 {
		n, records := 0, 0
		for n < len(l.queue) && n < mergeMaxCalls && (n == 0 || records+len(l.queue[n].b.Records) <= mergeMaxRecords) {
			records += len(l.queue[n].b.Records)
			n++
		}
		next = slices.Clone(l.queue[:n])
		l.queue = slices.Delete(l.queue, 0, n)
	} else {
		l.busy = false
	}
	l.mu.Unlock()
	if next == nil {
		p.laneIdle(calls[0].b.Topic, calls[0].b.Partition)
	}
	if next != nil {
		next[0].turn <- laneTurn{lead: next}
	}

	// A merged send the server refused (a statement error: rolled back),
	// or that never reached it, stored nothing: each call is sent again
	// alone for its own answer. Any other failure (the connection lost,
	// the session terminated) may have come after the commit: every call
	// gets it, as each would alone, and none is sent again.
	alone := err != nil && len(calls) > 1 && (errs.IsStatementError(err) || errs.SafeToRetry(err))
	for _, call := range calls[1:] {
		call.turn <- laneTurn{err: err, alone: alone}
	}
	if alone {
		return p.sendBatch(ctx, p.pool, calls[0].b, false)
	}
	return err
}
