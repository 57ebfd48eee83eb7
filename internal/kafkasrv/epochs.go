package kafkasrv

import (
	"context"
	"math"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg/internal/store"
)

// Leader epochs. A Kafka partition's leader epoch is the pgmsg
// partition's log epoch, as an int32 (log epochs are non-negative
// integers): 0 until the log's history changes, then, on a promoted
// standby, a new epoch numbered at least the PostgreSQL timeline it began
// on (store.KafkaPartition.LogEpoch, log_epoch_next.sql). The listener
// answers the new epoch as soon as the server writes another timeline
// than the partition's last publish, as a Kafka broker bumps its leader
// epoch when it becomes the leader.
//
// With it the listener speaks KIP-320 as a broker does: Metadata answers
// each partition's epoch; Fetch, ListOffsets and OffsetForLeaderEpoch
// check the current leader epoch a client names (-1: not checked) and
// answer FENCED_LEADER_EPOCH when it is older, UNKNOWN_LEADER_EPOCH when
// it is newer; record batches carry the epoch their records were
// published in; and OffsetForLeaderEpoch answers where an epoch ends on
// this server. A client fenced after a failover asks it where the epoch
// of its position ends: if it had read past that end, the offsets it read
// there now name other records, and it reports the loss (franz-go's
// ErrDataLoss, librdkafka's log truncation) and goes on from the end
// instead of reading on as if nothing happened.

// checkLeaderEpoch is a broker's check of the current leader epoch a
// request names against the partition's epoch: 0 when they agree or the
// request names none (-1).
func checkLeaderEpoch(requested, epoch int32) int16 {
	switch {
	case requested == -1 || requested == epoch:
		return 0
	case requested < epoch:
		return kerr.FencedLeaderEpoch.Code
	default:
		return kerr.UnknownLeaderEpoch.Code
	}
}

// epochHistory is one partition's log epochs as of one read, up to its
// current epoch: epoch 0 from the log's beginning, then each later one
// from its start offset (store.KafkaEpochs), in epoch order.
type epochHistory struct {
	topicID int32
	current int32
	epochs  []store.KafkaEpoch
}

// newEpochHistory is p's history from the epochs read of it after p was
// read: the ones past p's epoch (published since) are left out.
func newEpochHistory(p store.KafkaPartition, read []store.KafkaEpoch) *epochHistory {
	h := &epochHistory{topicID: p.TopicID, current: p.LogEpoch, epochs: []store.KafkaEpoch{{Epoch: 0, Start: 0}}}
	for _, e := range read {
		if e.Epoch > 0 && e.Epoch <= p.LogEpoch {
			h.epochs = append(h.epochs, e)
		}
	}
	return h
}

// epochOf returns the epoch offset was published in and where the next
// epoch begins (math.MaxInt64 for the current one).
func (h *epochHistory) epochOf(offset int64) (epoch int32, next int64) {
	// The last epoch that began at or before offset; of epochs that
	// began at the same offset (an epoch with no record), the later.
	i := sort.Search(len(h.epochs), func(i int) bool { return h.epochs[i].Start > offset })
	next = math.MaxInt64
	if i < len(h.epochs) {
		next = h.epochs[i].Start
	}
	if i == 0 {
		return h.epochs[0].Epoch, next
	}
	return h.epochs[i-1].Epoch, next
}

// endOf is Kafka's end offset of a leader epoch (OffsetForLeaderEpoch):
// for the current epoch, the log end; for an earlier one, the start of
// the first epoch after it, with the last epoch at or before it that this
// server knows (an epoch of another history, which this server never had,
// answers the one it branched from); -1, -1 for an epoch after the
// current one or none (-1).
func (h *epochHistory) endOf(requested int32, logEnd int64) (int32, int64) {
	if requested == h.current {
		return requested, logEnd
	}
	if requested < 0 || requested > h.current {
		return -1, -1
	}
	i := sort.Search(len(h.epochs), func(i int) bool { return h.epochs[i].Epoch > requested })
	if i == len(h.epochs) {
		return -1, -1
	}
	return h.epochs[i-1].Epoch, h.epochs[i].Start
}

// epochCache keeps each partition's epoch history, read once per epoch:
// the epochs up to the current one never change. It keeps at most max
// histories (epochCacheMax when 0): a topic deleted, or deleted and made
// again, by another process leaves its partitions' entries behind (an
// entry of a topic made again is replaced at its first use, as its topic
// id differs), so past the bound a new entry takes the place of an
// arbitrary one, which costs at most one read of its history again.
type epochCache struct {
	mu  sync.Mutex
	m   map[tp]*epochHistory
	max int
}

// epochCacheMax is how many partitions' histories the epoch cache keeps
// by default. Only partitions past epoch 0 (after a failover) have one.
const epochCacheMax = 10000

// put keeps h as key's history, in place of an arbitrary other entry
// when the cache is full.
func (c *epochCache) put(key tp, h *epochHistory) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[tp]*epochHistory{}
	}
	limit := c.max
	if limit <= 0 {
		limit = epochCacheMax
	}
	if _, ok := c.m[key]; !ok && len(c.m) >= limit {
		for k := range c.m { // map order: an arbitrary entry
			delete(c.m, k)
			if len(c.m) < limit {
				break
			}
		}
	}
	c.m[key] = h
}

// epochHistory returns p's epoch history, read when p is past its first
// epoch (a partition in epoch 0 has no other) and not read before for
// p's epoch.
func (s *Server) epochHistory(ctx context.Context, topic string, p store.KafkaPartition) (*epochHistory, error) {
	if p.LogEpoch == 0 {
		return newEpochHistory(p, nil), nil
	}
	c := &s.epochs
	key := tp{topic, p.Partition}
	c.mu.Lock()
	h := c.m[key]
	c.mu.Unlock()
	if h != nil && h.topicID == p.TopicID && h.current == p.LogEpoch {
		return h, nil
	}
	read, err := s.store.KafkaEpochs(ctx, s.client.Pool(), p.TopicID, p.Partition)
	if err != nil {
		return nil, err
	}
	h = newEpochHistory(p, read)
	c.put(key, h)
	return h, nil
}

// offsetForLeaderEpoch answers, per partition, where the leader epoch
// asked about ends on this server (epochHistory.endOf), after the current
// leader epoch check. Consumers ask it to validate their position after
// being fenced, and a committed offset before they read from it.
func (s *Server) offsetForLeaderEpoch(ctx context.Context, req *kmsg.OffsetForLeaderEpochRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		allowed := s.authorizeCtx(ctx, "topic", rt.Topic, "describe") == 0
		var parts []store.KafkaPartition
		if allowed {
			var err error
			if parts, err = s.store.KafkaPartitions(ctx, s.client.Pool(), rt.Topic); err != nil {
				return nil, err
			}
		}
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition = rp.Partition
			switch {
			case !allowed:
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case rp.Partition < 0 || int(rp.Partition) >= len(parts):
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			default:
				p := parts[rp.Partition]
				if sp.ErrorCode = checkLeaderEpoch(rp.CurrentLeaderEpoch, p.LogEpoch); sp.ErrorCode != 0 {
					break
				}
				h, err := s.epochHistory(ctx, rt.Topic, p)
				if err != nil {
					return nil, err
				}
				sp.LeaderEpoch, sp.EndOffset = h.endOf(rp.LeaderEpoch, p.NextOffset)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
