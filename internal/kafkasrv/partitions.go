package kafkasrv

import (
	"context"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg/internal/notifier"
	"github.com/pgmsg/pgmsg/internal/store"
)

// The high watermarks: every Fetch reads its topics' partitions (log
// start, next offset, log epoch) before it reads records, and again each
// time a publish wakes it. With several groups reading a busy topic that
// was a query per group per publish; the groups woken by one publish now
// share one. A topic's partitions as read by a query that started after
// the listener's notifier had counted n wake-ups of the topic
// (notifier.Generation) serve every Fetch that counted at most n when it
// looked: such a Fetch was woken by none of the later publishes, and
// those wake it when their notifications arrive (it subscribes before
// reading). A read serves for at most partitionsMaxAge, so that a
// publisher that does not notify (Config.DisableNotify, a notification
// lost with the listener's connection) is seen as polling would see it.
// Without notifications every Fetch queries.
//
// Reads that share a generation are not ordered by what they saw (each
// takes its snapshot when it runs), so a shared read may be older than
// the one a client's previous answer came from: a Fetch whose offset is
// past a shared read's high watermark reads again on its own
// (partitionsNow) before it answers OFFSET_OUT_OF_RANGE. Without that,
// consumers were sent back to their reset offset now and then.

// partitionsMaxAge is the longest a topic's partitions as read once serve
// Fetches.
const partitionsMaxAge = 100 * time.Millisecond

// partitionsCache holds each topic's partitions as last read, and the read
// in flight.
type partitionsCache struct {
	mu sync.Mutex
	m  map[string]*partitionsEntry
}

type partitionsEntry struct {
	gen    uint64    // the generation counted before the read started
	at     time.Time // when it started
	parts  []store.KafkaPartition
	flight *partitionsRead
}

// keep makes parts, read after the notifier counted generation gen at
// time at, e's partitions unless e holds a later read. Call it with the
// cache's lock held.
func (e *partitionsEntry) keep(gen uint64, at time.Time, parts []store.KafkaPartition) {
	if e.parts == nil || gen > e.gen || (gen == e.gen && at.After(e.at)) {
		e.gen, e.at, e.parts = gen, at, parts
	}
}

// partitionsRead is a read of a topic's partitions in flight: the
// generation counted before it started, and its result once done is
// closed.
type partitionsRead struct {
	gen   uint64
	at    time.Time
	done  chan struct{}
	parts []store.KafkaPartition
	err   error
}

// partitions returns topic's partitions as of a read that started after
// every wake-up of the topic the listener's notifier had counted when it
// was called (and less than partitionsMaxAge ago). The slice is shared:
// read it only.
func (s *Server) partitions(ctx context.Context, topic string) ([]store.KafkaPartition, error) {
	if s.notify == nil {
		return s.store.KafkaPartitions(ctx, s.client.Pool(), topic)
	}
	c := &s.parts
	gen := s.notify.Generation(topic)
	now := time.Now()
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*partitionsEntry{}
	}
	e := c.m[topic]
	if e == nil {
		e = &partitionsEntry{}
		c.m[topic] = e
	}
	if e.parts != nil && e.gen >= gen && now.Sub(e.at) < partitionsMaxAge {
		parts := e.parts
		c.mu.Unlock()
		return parts, nil
	}
	r := e.flight
	if r == nil || r.gen < gen || now.Sub(r.at) >= partitionsMaxAge {
		r = &partitionsRead{gen: gen, at: now, done: make(chan struct{})}
		e.flight = r
		go s.readPartitions(topic, e, r)
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.parts, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// partitionsNow reads topic's partitions now, and keeps the read for
// the Fetches that come after it.
func (s *Server) partitionsNow(ctx context.Context, topic string) ([]store.KafkaPartition, error) {
	if s.notify == nil {
		return s.store.KafkaPartitions(ctx, s.client.Pool(), topic)
	}
	gen, at := s.notify.Generation(topic), time.Now()
	parts, err := s.store.KafkaPartitions(ctx, s.client.Pool(), topic)
	if err != nil {
		return nil, err
	}
	c := &s.parts
	c.mu.Lock()
	if e := c.m[topic]; e != nil {
		e.keep(gen, at, parts)
	}
	c.mu.Unlock()
	return parts, nil
}

// readPartitions runs read r of topic's partitions for entry e, on the
// server's context so that a Fetch that gives up does not fail the
// others waiting for it.
func (s *Server) readPartitions(topic string, e *partitionsEntry, r *partitionsRead) {
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	r.parts, r.err = s.store.KafkaPartitions(ctx, s.client.Pool(), topic)
	c := &s.parts
	c.mu.Lock()
	if r.err == nil {
		e.keep(r.gen, r.at, r.parts)
	}
	if e.flight == r {
		e.flight = nil
	}
	c.mu.Unlock()
	close(r.done)
}

// forgetPartitions drops what is known of every topic's partitions (a
// topic was created or deleted, or partitions added, through this
// listener: topicCache.invalidate).
func (s *Server) forgetPartitions() {
	c := &s.parts
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}

// newNotifier is the listener's own notification listener on the
// client's channel, or nil when the client's notifications are disabled
// (pgmsg.Config.DisableNotify). It asks the client without subscribing,
// which would start the client's own LISTEN connection, unused here.
func newNotifier(s *Server) *notifier.Notifier {
	if s.client.NotifyDisabled() {
		return nil
	}
	return notifier.New(s.client.Pool().Config().ConnConfig, s.client.Schema()+"_log", s.logger)
}
