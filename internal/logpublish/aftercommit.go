package logpublish

import (
	"context"
	"errors"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/notifier"
)

// afterCommit queues the work that follows a committed publish of b, done
// by one goroutine per Publisher outside any publishing transaction:
//
//   - notify (when asked): wake consumers of the topic. Notifying inside
//     the publishing transaction would make its commit take PostgreSQL's
//     cluster-wide notify lock through the WAL flush, serialising the
//     commits of all publishers. Pending topics go out in one statement,
//     at most one in flight; a notification lost because the process dies
//     is only a later wake-up (consumers poll).
//   - segment_ensure for a partition whose segments ahead run low, in its
//     own transaction (creating segments inside publishing transactions
//     can deadlock multi-partition publishes).
func (p *Publisher) afterCommit(b *Batch, notify bool) {
	notify = notify && !p.cfg.DisableNotify
	if !notify && !b.SegmentsLow {
		return
	}
	p.sendMu.Lock()
	if p.sendPending == nil {
		p.sendPending = map[string]struct{}{}
		p.segPending = map[topicPartition]struct{}{}
		p.sendKick = make(chan struct{}, 1)
		p.sendStop = make(chan struct{})
		p.sendDone = make(chan struct{})
		go p.sendNotifications(p.sendStop, p.sendDone)
	}
	if notify {
		// "topic#partition": only the consumers of that partition wake up
		// (internal/notifier); SQL publish() notifies the whole topic.
		p.sendPending[notifier.PartitionKey(b.Topic, b.Partition)] = struct{}{}
	}
	if b.SegmentsLow {
		p.segPending[topicPartition{b.Topic, b.Partition}] = struct{}{}
	}
	p.sendMu.Unlock()
	select {
	case p.sendKick <- struct{}{}:
	default:
	}
}

func (p *Publisher) sendNotifications(stop, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			return
		case <-p.sendKick:
		}
		p.sendMu.Lock()
		topics := make([]string, 0, len(p.sendPending))
		for t := range p.sendPending {
			topics = append(topics, t)
		}
		clear(p.sendPending)
		segs := make([]topicPartition, 0, len(p.segPending))
		for tp := range p.segPending {
			segs = append(segs, tp)
		}
		clear(p.segPending)
		p.sendMu.Unlock()
		if len(topics) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := p.store.NotifyTopics(ctx, p.pool, p.cfg.Channel, topics)
			cancel()
			if err != nil {
				p.cfg.Logger.Debug("pgmsg: publish notification not sent; consumers will poll", "error", err)
			}
		}
		busy := false
		for _, tp := range segs {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			n, err := p.store.SegmentEnsure(ctx, p.pool, tp.topic, tp.partition)
			cancel()
			switch {
			case errors.Is(err, errs.UnknownTopic), errors.Is(err, errs.PartitionOutOfRange):
				// The topic was deleted meanwhile: nothing to do.
			case err != nil:
				p.cfg.Logger.Warn("pgmsg: creating segments ahead failed; publishers create them when needed",
					"topic", tp.topic, "partition", tp.partition, "error", err)
			case n < 0:
				// A publisher holds the partition's counter row: try again.
				busy = true
				p.sendMu.Lock()
				p.segPending[tp] = struct{}{}
				p.sendMu.Unlock()
			}
		}
		if busy {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			select {
			case p.sendKick <- struct{}{}:
			default:
			}
		}
	}
}
