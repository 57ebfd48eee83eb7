package kafkasrv

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/logpublish"
)

// Kill stops the listener as a killed process would: its registration is
// left to expire instead of being removed.
func (s *Server) Kill() error {
	if r := s.registry.Load(); r != nil {
		r.abandon.Store(true)
	}
	return s.Close()
}

// FetchCacheServed is how many records Fetches took from the record cache.
func (s *Server) FetchCacheServed() int64 {
	s.fetchCache.mu.Lock()
	defer s.fetchCache.mu.Unlock()
	return s.fetchCache.served
}

// HoldPartition runs a round on a partition that lasts until release is
// called: what is produced to the partition meanwhile waits in its queue.
func (s *Server) HoldPartition(topic string, partition int32) (release func()) {
	q := s.partitionQueue(topic, partition)
	started, hold := make(chan struct{}), make(chan struct{})
	go q.do(&partitionWork{run: func() { close(started); <-hold }})
	<-started
	return func() { close(hold) }
}

// AwaitQueued waits until n works wait in the partition's queue, or
// ctx ends.
func (s *Server) AwaitQueued(ctx context.Context, topic string, partition int32, n int) error {
	q := s.partitionQueue(topic, partition)
	for {
		q.mu.Lock()
		queued := len(q.pending)
		q.mu.Unlock()
		if queued >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d works queued: %w", queued, n, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// StoreRound stores batches as idempotent producers' first batches
// (producer id i+1, epoch 0, sequence 0) on a partition, queued behind a
// round that is held until all of them wait: they make the next round
// together. It returns each batch's base offset or error.
func (s *Server) StoreRound(topic string, partition int32, batches [][]*pgmsg.Record) ([]int64, []error) {
	q := s.partitionQueue(topic, partition)
	release := s.HoldPartition(topic, partition)
	bases, errs := make([]int64, len(batches)), make([]error, len(batches))
	var wg sync.WaitGroup
	for i, recs := range batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &partitionWork{seq: &logpublish.Sequenced{Records: recs, ProducerID: kafkaProducerID(batch{producerID: int64(i + 1)})}}
			q.do(w)
			bases[i], errs[i] = s.sequenced(w.seq)
		}()
	}
	_ = s.AwaitQueued(context.Background(), topic, partition, len(batches))
	release()
	wg.Wait()
	return bases, errs
}
