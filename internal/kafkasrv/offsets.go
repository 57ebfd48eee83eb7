package kafkasrv

import (
	"context"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg/internal/store"
)

// ListOffsets' special timestamps.
const (
	listLatest       = -1
	listEarliest     = -2
	listMaxTimestamp = -3
)

// listOffsets answers earliest (the log start offset), latest (the high
// watermark), max timestamp (the last record: pgmsg's timestamps are the
// producers' and need not grow, so this is the newest record, not the
// largest timestamp) and a time, through the time index (OffsetForTime):
// the first record at or after it, or offset -1 when none is. Each comes
// with the leader epoch of the offset answered (the current one for
// latest), after the check of the current leader epoch the client names.
func (s *Server) listOffsets(ctx context.Context, req *kmsg.ListOffsetsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		allowed := s.authorizeCtx(ctx, "topic", rt.Topic, "describe") == 0
		var parts []store.KafkaPartition
		var err error
		if allowed {
			if parts, err = s.store.KafkaPartitions(ctx, s.client.Pool(), rt.Topic); err != nil {
				return nil, err
			}
		}
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset = -1, -1
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
				if err := s.listOffset(ctx, rt.Topic, p, rp.Timestamp, &sp); err != nil {
					return nil, err
				}
				if sp.ErrorCode == 0 && sp.Offset >= 0 {
					h, err := s.epochHistory(ctx, rt.Topic, p)
					if err != nil {
						return nil, err
					}
					sp.LeaderEpoch, _ = h.epochOf(sp.Offset)
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

func (s *Server) listOffset(ctx context.Context, topic string, p store.KafkaPartition, ts int64, sp *kmsg.ListOffsetsResponseTopicPartition) error {
	switch {
	case ts == listLatest:
		sp.Offset = p.NextOffset
	case ts == listEarliest:
		sp.Offset = p.StartOffset
	case ts == listMaxTimestamp:
		if p.NextOffset > p.StartOffset {
			recs, err := s.store.KafkaRecords(ctx, s.client.Pool(), p.TopicID, p.Partition, p.NextOffset-1, p.NextOffset, 1)
			if err != nil {
				return err
			}
			if len(recs) == 1 {
				sp.Offset, sp.Timestamp = recs[0].Offset, recs[0].Timestamp.UnixMilli()
			}
		}
	case ts >= 0:
		t := time.UnixMilli(min(ts, math.MaxInt64/1000))
		off, err := s.client.OffsetForTime(ctx, topic, p.Partition, t)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			code, _ := errorCode(err)
			sp.ErrorCode = code
			return nil
		}
		if off >= p.NextOffset {
			return nil // no record at or after ts: -1, as Kafka answers
		}
		recs, err := s.store.KafkaRecords(ctx, s.client.Pool(), p.TopicID, p.Partition, off, p.NextOffset, 1)
		if err != nil {
			return err
		}
		if len(recs) == 1 {
			sp.Offset, sp.Timestamp = recs[0].Offset, recs[0].Timestamp.UnixMilli()
		}
	default: // -4 (earliest local) and -5 (earliest tiered) are not served
		sp.ErrorCode = kerr.InvalidRequest.Code
	}
	return nil
}

// initProducerID hands an idempotent producer a new producer id, or the
// next epoch of its own id when it asks to bump it (KIP-360). Transactional
// producers are refused: transactions are not supported.
func (s *Server) initProducerID(ctx context.Context, req *kmsg.InitProducerIDRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil
	}
	if req.ProducerID >= 0 && req.ProducerEpoch >= 0 && req.ProducerEpoch < math.MaxInt16-1 {
		resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
		return resp, nil
	}
	id, err := s.store.KafkaProducerID(ctx, s.client.Pool())
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp, nil
}
