package kafkasrv

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

// topicCache keeps the topic list for a moment, so that a burst of
// Metadata requests (every client asks on connect) costs one read.
type topicCache struct {
	s      *Server
	mu     sync.Mutex
	at     time.Time
	topics []*pgmsg.Topic
}

const topicCacheTTL = time.Second

func (tc *topicCache) list(ctx context.Context, fresh bool) ([]*pgmsg.Topic, error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if !fresh && tc.topics != nil && time.Since(tc.at) < topicCacheTTL {
		return tc.topics, nil
	}
	ts, err := tc.s.client.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	tc.topics, tc.at = ts, time.Now()
	return ts, nil
}

func (tc *topicCache) invalidate() {
	tc.mu.Lock()
	tc.topics = nil
	tc.mu.Unlock()
	tc.s.forgetPartitions()
}

// topicID is the Kafka topic id (a UUID) of a pgmsg topic: derived from
// the schema, its name and its creation time, so that it is the same on
// every listener and differs for a topic deleted and created again.
func (s *Server) topicID(t *pgmsg.Topic) [16]byte {
	h := sha256.New()
	h.Write([]byte("pgmsg-topic\x00"))
	h.Write([]byte(s.client.Schema()))
	h.Write([]byte{0})
	h.Write([]byte(t.Name))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.CreatedAt.UnixMicro()))
	h.Write(b[:])
	var id [16]byte
	copy(id[:], h.Sum(nil))
	id[6] = id[6]&0x0f | 0x40 // a version 4 UUID's bits
	id[8] = id[8]&0x3f | 0x80
	return id
}

func (s *Server) metadata(ctx context.Context, req *kmsg.MetadataRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	cluster := s.cluster()
	for _, b := range cluster.brokers {
		resp.Brokers = append(resp.Brokers, kmsg.MetadataResponseBroker{NodeID: b.id, Host: b.host, Port: b.port})
	}
	resp.ClusterID = &s.cfg.ClusterID
	resp.ControllerID = cluster.controller()
	topics, err := s.topics.list(ctx, false)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*pgmsg.Topic, len(topics))
	for _, t := range topics {
		byName[t.Name] = t
	}
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	var want []*pgmsg.Topic
	if all {
		for _, t := range topics {
			if s.authorizeCtx(ctx, "topic", t.Name, "describe") == 0 {
				want = append(want, t)
			}
		}
	} else {
		autoCreate := s.cfg.AutoCreateTopics && (req.Version < 4 || req.AllowAutoTopicCreation)
		created := false
		for _, rt := range req.Topics {
			if rt.Topic == nil { // asked by id
				st := kmsg.NewMetadataResponseTopic()
				st.TopicID = rt.TopicID
				st.ErrorCode = kerr.UnknownTopicID.Code
				for _, t := range topics {
					if s.topicID(t) == rt.TopicID {
						name := t.Name
						st.Topic, st.ErrorCode = &name, 0
						want = append(want, t)
						break
					}
				}
				if st.ErrorCode != 0 {
					resp.Topics = append(resp.Topics, st)
				}
				continue
			}
			name := *rt.Topic
			st := kmsg.NewMetadataResponseTopic()
			st.Topic = &name
			if s.authorizeCtx(ctx, "topic", name, "describe") != 0 {
				st.ErrorCode = kerr.TopicAuthorizationFailed.Code
				resp.Topics = append(resp.Topics, st)
				continue
			}
			if t, ok := byName[name]; ok {
				want = append(want, t)
				continue
			}
			st.ErrorCode = kerr.UnknownTopicOrPartition.Code
			if pgmsg.ValidateName("topic", name) != nil {
				st.ErrorCode = kerr.InvalidTopicException.Code
			} else if autoCreate && s.authorizeCtx(ctx, "topic", name, "create") == 0 {
				t, err := s.autoCreate(ctx, name)
				if err == nil {
					want = append(want, t)
					created = true
					continue
				}
				if !errors.Is(err, pgmsg.ErrInvalidName) {
					s.logger.Warn("kafka: auto-creating topic", "topic", name, "err", err)
				}
			}
			resp.Topics = append(resp.Topics, st)
		}
		if created {
			s.topics.invalidate()
		}
	}
	// Each partition's leader epoch is its log epoch (epochs.go).
	var epochs map[string][]int32
	if len(want) > 0 {
		names := make([]string, len(want))
		for i, t := range want {
			names[i] = t.Name
		}
		if epochs, err = s.store.KafkaLogEpochs(ctx, s.client.Pool(), names); err != nil {
			return nil, err
		}
	}
	for _, t := range want {
		name := t.Name
		st := kmsg.NewMetadataResponseTopic()
		st.Topic = &name
		st.TopicID = s.topicID(t)
		for p := int32(0); p < int32(t.Partitions); p++ {
			sp := kmsg.NewMetadataResponseTopicPartition()
			sp.Partition = p
			leader := cluster.leader(t.Name, p)
			sp.Leader = leader
			// A partition the read did not find (the topic deleted
			// and created again since the topic list was read): no
			// leader epoch, which clients take for a leader being
			// elected, and ask again.
			sp.LeaderEpoch = -1
			if e := epochs[t.Name]; int(p) < len(e) {
				sp.LeaderEpoch = e[p]
			}
			sp.Replicas = []int32{leader}
			sp.ISR = []int32{leader}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// autoCreate creates topic name for a client that named it (Kafka's
// auto.create.topics.enable); a topic created meanwhile is returned.
func (s *Server) autoCreate(ctx context.Context, name string) (*pgmsg.Topic, error) {
	t, err := s.client.CreateTopic(ctx, name, pgmsg.TopicConfig{Partitions: s.cfg.AutoCreatePartitions})
	if errors.Is(err, pgmsg.ErrTopicExists) {
		d, err := s.client.DescribeTopic(ctx, name)
		if err != nil {
			return nil, err
		}
		return &d.Topic, nil
	}
	return t, err
}

// find returns topic name, fresh from the database.
func (tc *topicCache) find(ctx context.Context, name string) (*pgmsg.Topic, error) {
	d, err := tc.s.client.DescribeTopic(ctx, name)
	if err != nil {
		return nil, err
	}
	return &d.Topic, nil
}

// findID returns the topic whose Kafka id is id, nil if none is.
func (tc *topicCache) findID(ctx context.Context, id [16]byte) (*pgmsg.Topic, error) {
	ts, err := tc.list(ctx, true)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		if tc.s.topicID(t) == id {
			return t, nil
		}
	}
	return nil, nil
}
