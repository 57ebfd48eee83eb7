package logpublish

import (
	"context"
	"errors"
	"slices"
	"strings"
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
//   - segment_ensure for a partition whose segments ahead run low, outside
//     the publishing transaction (creating segments inside publishing
//     transactions can deadlock multi-partition publishes); the pending
//     partitions of a topic go together, up to segmentRunMax in one
//     transaction (segmentRuns).
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
		for _, run := range segmentRuns(segs) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			rows, err := p.store.SegmentEnsureMany(ctx, p.pool, run.topic, run.partitions)
			cancel()
			switch {
			case errors.Is(err, errs.UnknownTopic), errors.Is(err, errs.PartitionOutOfRange):
				// The topic was deleted meanwhile: nothing to do.
			case err != nil:
				p.cfg.Logger.Warn("pgmsg: creating segments ahead failed; publishers create them when needed",
					"topic", run.topic, "partitions", run.partitions, "error", err)
			default:
				for _, r := range rows {
					if r.Created < 0 {
						// The topic's table was busy (another creator, a
						// publish creating segments, DDL): try again.
						busy = true
						p.sendMu.Lock()
						p.segPending[topicPartition{run.topic, r.Partition}] = struct{}{}
						p.sendMu.Unlock()
					}
				}
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

// segmentRunMax is the most partitions whose segments ahead one
// transaction creates (segmentRuns). Each attach invalidates the topic
// table's cached partition descriptor in every session, which then
// rebuilds it on its next publish (parsing every segment's bounds): a new
// topic of 256 partitions attached its 512 segments ahead one partition
// per transaction, and those rebuilds were 17 % of the server's samples
// of the 256-partition benchmark (docs/benchmarks.md, "Scale"). Bounded
// because the transaction holds the topic table's segment lock until it
// commits (it takes no counter row: _segments_ahead()).
const segmentRunMax = 16

// segmentRun is partitions of one topic whose segments ahead are created
// in one transaction, in partition order.
type segmentRun struct {
	topic      string
	partitions []int32
}

// segmentRuns groups segs by topic, sorted by topic then partition, in
// runs of at most segmentRunMax partitions.
func segmentRuns(segs []topicPartition) []segmentRun {
	slices.SortFunc(segs, func(a, b topicPartition) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.partition) - int(b.partition)
	})
	var runs []segmentRun
	for _, tp := range segs {
		if n := len(runs); n == 0 || runs[n-1].topic != tp.topic || len(runs[n-1].partitions) == segmentRunMax {
			runs = append(runs, segmentRun{topic: tp.topic})
		}
		r := &runs[len(runs)-1]
		r.partitions = append(r.partitions, tp.partition)
	}
	return runs
}
