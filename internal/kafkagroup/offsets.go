package kafkagroup

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg/internal/store"
)

// The offset APIs. A Kafka group's committed offset for a partition is
// the cursor of the pgmsg group of the same name on the partition's
// topic: "the next offset to read" in both. OffsetCommit moves cursors
// (creating the pgmsg group on a topic the first time), OffsetFetch reads
// them, OffsetDelete marks them as having no Kafka offset.

// fillCommit answers every partition of req with code.
func fillCommit(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, code int16) {
	resp.Topics = resp.Topics[:0]
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
}

// validateCommit is Kafka's check of who may commit to the locked group:
// a member of the current generation, or anyone with generation -1 and no
// member ID while the group has no members (a "simple" commit, as
// kadm's and consumers without group management make). It refreshes the
// member's session.
func (g *group) validateCommit(ctx context.Context, req *kmsg.OffsetCommitRequest) int16 {
	if code := g.checkInstance(req.InstanceID, req.MemberID); code != 0 {
		return code
	}
	if req.Generation < 0 && g.state == stateEmpty {
		return 0
	}
	if req.Generation >= 0 || req.MemberID != "" || req.InstanceID != nil {
		if len(g.members) == 0 && g.version == 0 {
			exists, err := g.c.store.KafkaGroupExists(ctx, g.c.pool, g.name)
			if err != nil {
				return kerr.CoordinatorNotAvailable.Code
			}
			if !exists {
				if req.Version >= 9 {
					return kerr.GroupIDNotFound.Code
				}
				return kerr.IllegalGeneration.Code
			}
		}
		m := g.members[req.MemberID]
		if m == nil {
			return kerr.UnknownMemberID.Code
		}
		if req.Generation != g.generation {
			return kerr.IllegalGeneration.Code
		}
		if g.state == stateCompleting {
			return kerr.RebalanceInProgress.Code
		}
		g.startSession(m)
		return 0
	}
	// No member and no generation: only while the group has no members.
	return kerr.UnknownMemberID.Code
}

func (c *Coordinator) offsetCommit(ctx context.Context, req *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	if code := c.checkGroup(ctx, req.Group, "read"); code != 0 {
		fillCommit(req, resp, code)
		return resp
	}
	g, code := c.lock(ctx, req.Group)
	if code != 0 {
		fillCommit(req, resp, code)
		return resp
	}
	// The group stays locked through the write, so that no rebalance
	// completes between the check and the commit.
	defer g.mu.Unlock()
	if code := g.validateCommit(ctx, req); code != 0 {
		fillCommit(req, resp, code)
		return resp
	}
	fillCommit(req, resp, 0)

	// Per partition: the topic's Read authorization, the metadata's size,
	// the offset; then the topics and partitions that exist.
	type ref struct{ t, p int }
	last := map[store.KafkaTopicPartition]int{}
	var refs []ref
	var offs []store.KafkaOffset
	var names []string
	for ti, t := range req.Topics {
		topicOK := c.allowed(ctx, "topic", t.Topic, "read")
		if topicOK {
			names = append(names, t.Topic)
		}
		for pi, p := range t.Partitions {
			rp := &resp.Topics[ti].Partitions[pi]
			switch {
			case !topicOK:
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case p.Metadata != nil && len(*p.Metadata) > c.cfg.MaxMetadataBytes:
				rp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
			case p.Offset < 0:
				rp.ErrorCode = kerr.OffsetOutOfRange.Code
			default:
				tp := store.KafkaTopicPartition{Topic: t.Topic, Partition: p.Partition}
				if i, ok := last[tp]; ok {
					// The same partition twice: the last one counts,
					// as in Kafka.
					offs[i].Offset, offs[i].Metadata, offs[i].LeaderEpoch = p.Offset, p.Metadata, p.LeaderEpoch
					refs = append(refs, ref{ti, pi})
					continue
				}
				last[tp] = len(offs)
				offs = append(offs, store.KafkaOffset{Topic: t.Topic, Partition: p.Partition, Offset: p.Offset,
					Metadata: p.Metadata, LeaderEpoch: p.LeaderEpoch})
				refs = append(refs, ref{ti, pi})
			}
		}
	}
	if len(offs) == 0 {
		return resp
	}
	dbctx, cancel := c.dbCtx(ctx)
	defer cancel()
	done := map[store.KafkaTopicPartition]bool{}
	err := pgx.BeginFunc(dbctx, c.pool, func(tx pgx.Tx) error {
		if err := c.store.KafkaGroupsEnsure(dbctx, tx, req.Group, names); err != nil {
			return err
		}
		set, err := c.store.KafkaOffsetCommit(dbctx, tx, req.Group, offs)
		for _, tp := range set {
			done[tp] = true
		}
		return err
	})
	for _, r := range refs {
		t := req.Topics[r.t]
		rp := &resp.Topics[r.t].Partitions[r.p]
		switch {
		case err != nil:
			rp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		case !done[store.KafkaTopicPartition{Topic: t.Topic, Partition: t.Partitions[r.p].Partition}]:
			rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
		}
	}
	if err != nil {
		c.log.Warn("kafka group: commit failed", "group", req.Group, "err", err)
	}
	return resp
}

func (c *Coordinator) offsetFetch(ctx context.Context, req *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	if req.Version >= 8 {
		for _, rg := range req.Groups {
			out := kmsg.NewOffsetFetchResponseGroup()
			out.Group = rg.Group
			var topics []kmsg.OffsetFetchRequestTopic
			if rg.Topics != nil {
				topics = make([]kmsg.OffsetFetchRequestTopic, len(rg.Topics))
				for i, t := range rg.Topics {
					topics[i] = kmsg.OffsetFetchRequestTopic{Topic: t.Topic, Partitions: t.Partitions}
				}
			}
			rts, code := c.fetchGroup(ctx, rg.Group, topics, rg.Topics == nil)
			out.ErrorCode = code
			for _, rt := range rts {
				ot := kmsg.NewOffsetFetchResponseGroupTopic()
				ot.Topic = rt.Topic
				for _, p := range rt.Partitions {
					op := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					op.Partition, op.Offset, op.LeaderEpoch, op.Metadata, op.ErrorCode =
						p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
					ot.Partitions = append(ot.Partitions, op)
				}
				out.Topics = append(out.Topics, ot)
			}
			resp.Groups = append(resp.Groups, out)
		}
		return resp
	}
	// v0 and v1 cannot fetch every topic; a null list is then empty.
	all := req.Topics == nil && req.Version >= 2
	rts, code := c.fetchGroup(ctx, req.Group, req.Topics, all)
	resp.Topics = rts
	resp.ErrorCode = code
	if code != 0 && req.Version < 2 {
		// No group-level error before v2: each partition carries it.
		resp.Topics = nil
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	return resp
}

// fetchGroup reads one group's offsets: of topics, or (all) of every
// topic the group has an offset on that the principal may describe. A
// partition without an offset answers -1.
func (c *Coordinator) fetchGroup(ctx context.Context, group string, topics []kmsg.OffsetFetchRequestTopic, all bool) ([]kmsg.OffsetFetchResponseTopic, int16) {
	if code := c.checkGroup(ctx, group, "describe"); code != 0 {
		return nil, code
	}
	var names []string
	if !all {
		names = make([]string, 0, len(topics))
		for _, t := range topics {
			names = append(names, t.Topic)
		}
	}
	dbctx, cancel := c.dbCtx(ctx)
	defer cancel()
	rows, err := c.store.KafkaOffsetFetch(dbctx, c.pool, group, names)
	if err != nil {
		c.log.Warn("kafka group: offset fetch failed", "group", group, "err", err)
		return nil, kerr.CoordinatorNotAvailable.Code
	}
	newPartition := func(p int32, o *store.KafkaOffset) kmsg.OffsetFetchResponseTopicPartition {
		rp := kmsg.NewOffsetFetchResponseTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p, -1, -1, kmsg.StringPtr("")
		if o != nil {
			rp.Offset, rp.LeaderEpoch = o.Offset, o.LeaderEpoch
			if o.Metadata != nil && o.Offset >= 0 {
				rp.Metadata = o.Metadata
			}
		}
		return rp
	}
	var out []kmsg.OffsetFetchResponseTopic
	if all {
		allowed := map[string]bool{}
		for i := range rows {
			o := &rows[i]
			if o.Offset < 0 {
				continue
			}
			ok, seen := allowed[o.Topic]
			if !seen {
				ok = c.allowed(ctx, "topic", o.Topic, "describe")
				allowed[o.Topic] = ok
			}
			if !ok {
				continue
			}
			if len(out) == 0 || out[len(out)-1].Topic != o.Topic {
				rt := kmsg.NewOffsetFetchResponseTopic()
				rt.Topic = o.Topic
				out = append(out, rt)
			}
			rt := &out[len(out)-1]
			rt.Partitions = append(rt.Partitions, newPartition(o.Partition, o))
		}
		return out, 0
	}
	byTP := map[store.KafkaTopicPartition]*store.KafkaOffset{}
	for i := range rows {
		byTP[store.KafkaTopicPartition{Topic: rows[i].Topic, Partition: rows[i].Partition}] = &rows[i]
	}
	for _, t := range topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		ok := c.allowed(ctx, "topic", t.Topic, "describe")
		for _, p := range t.Partitions {
			rp := newPartition(p, byTP[store.KafkaTopicPartition{Topic: t.Topic, Partition: p}])
			if !ok {
				rp = newPartition(p, nil)
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		out = append(out, rt)
	}
	return out, 0
}

func (c *Coordinator) offsetDelete(ctx context.Context, req *kmsg.OffsetDeleteRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if code := c.checkGroup(ctx, req.Group, "delete"); code != 0 {
		resp.ErrorCode = code
		return resp
	}
	g, code := c.lock(ctx, req.Group)
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	defer g.mu.Unlock()
	dbctx, cancel := c.dbCtx(ctx)
	defer cancel()
	if len(g.members) == 0 && g.version == 0 {
		exists, err := c.store.KafkaGroupExists(dbctx, c.pool, g.name)
		if err != nil {
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
			return resp
		}
		if !exists {
			resp.ErrorCode = kerr.GroupIDNotFound.Code
			return resp
		}
	}
	// A group with members may lose the offsets of topics none of them
	// subscribes to: only "consumer" groups say what they subscribe to.
	subscribed := map[string]bool{}
	if len(g.members) > 0 {
		if g.protocolType != "consumer" {
			resp.ErrorCode = kerr.NonEmptyGroup.Code
			return resp
		}
		for _, m := range g.members {
			for _, p := range m.protocols {
				var md kmsg.ConsumerMemberMetadata
				if md.ReadFrom(p.Metadata) == nil {
					for _, t := range md.Topics {
						subscribed[t] = true
					}
				}
			}
		}
	}
	names := make([]string, 0, len(req.Topics))
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	counts, err := c.store.KafkaTopicPartitions(dbctx, c.pool, names)
	if err != nil {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	var del []store.KafkaTopicPartition
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		ok := c.allowed(ctx, "topic", t.Topic, "read")
		n, exists := counts[t.Topic]
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			switch {
			case !ok:
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case subscribed[t.Topic]:
				rp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			case !exists || p.Partition < 0 || p.Partition >= n:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			default:
				del = append(del, store.KafkaTopicPartition{Topic: t.Topic, Partition: p.Partition})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(del) > 0 {
		if err := c.store.KafkaOffsetDelete(dbctx, c.pool, req.Group, del); err != nil {
			c.log.Warn("kafka group: offset delete failed", "group", req.Group, "err", err)
			resp.Topics = nil
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		}
	}
	return resp
}
