package kafkasrv

import (
	"sync"

	"github.com/pgmsg/pgmsg/internal/logpublish"
)

// A partition's produce requests are stored one round at a time from
// this listener: the partition's counter row admits one writer anyway.
// Whatever queued while a round ran makes the next round, and the
// idempotent producers' batches of one round are stored with one commit
// (logpublish.SendSequencedMany): with a batch per producer and a
// commit each, a partition written by several producers waited for
// their WAL flushes one after another, and with one produce request in
// flight per idempotent producer (as franz-go sends them) that wait was
// every batch's latency.

// partitionWork is one produce request's work on a partition: an
// idempotent producer's single batch (seq), stored with the round's
// others in queue order, or anything else (run), run on its own after
// them.
type partitionWork struct {
	seq    *logpublish.Sequenced
	run    func()
	queued func()    // if set, called once the work has its place in the queue
	wake   chan bool // false: done; true: lead the next round
}

// partitionQueue is one partition's produce work (Server.partQueues).
type partitionQueue struct {
	s         *Server
	topic     string
	partition int32

	mu      sync.Mutex
	busy    bool // a round runs or is about to
	pending []*partitionWork
}

func (s *Server) partitionQueue(topic string, partition int32) *partitionQueue {
	key := tp{topic, partition}
	if v, ok := s.partQueues.Load(key); ok {
		return v.(*partitionQueue)
	}
	v, _ := s.partQueues.LoadOrStore(key, &partitionQueue{s: s, topic: topic, partition: partition})
	return v.(*partitionQueue)
}

// do queues w and returns once it ran. The caller that finds the queue
// idle leads rounds: it runs what is pending, its own work included,
// and hands the lead to the first work that queued meanwhile, so that
// no caller waits for rounds after its own.
func (q *partitionQueue) do(w *partitionWork) {
	w.wake = make(chan bool, 1)
	q.mu.Lock()
	q.pending = append(q.pending, w)
	if w.queued != nil {
		w.queued()
	}
	if q.busy {
		q.mu.Unlock()
		if !<-w.wake {
			return
		}
		q.mu.Lock()
	}
	q.busy = true
	round := q.pending
	q.pending = nil
	q.mu.Unlock()

	q.runRound(round)

	q.mu.Lock()
	var next *partitionWork
	if len(q.pending) > 0 {
		next = q.pending[0]
	} else {
		q.busy = false
	}
	q.mu.Unlock()
	for _, r := range round {
		if r != w {
			r.wake <- false
		}
	}
	if next != nil {
		next.wake <- true
	}
}

// runRound stores a round's work: the idempotent batches together, then
// the rest one by one.
func (q *partitionQueue) runRound(round []*partitionWork) {
	var seqs []*logpublish.Sequenced
	for _, r := range round {
		if r.seq != nil {
			seqs = append(seqs, r.seq)
		}
	}
	if len(seqs) > 0 {
		q.s.pub.SendSequencedMany(q.s.ctx, q.topic, q.partition, seqs)
	}
	for _, r := range round {
		if r.run != nil {
			r.run()
		}
	}
}
