package pgmsgkafka

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pgmsg/pgmsg"
)

// mapError is the one place Kafka errors become pgmsg errors; others are
// returned unchanged.
func mapError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return pgmsg.NewError(pgmsg.ErrUnknownTopic, err, "unknown topic")
	case errors.Is(err, kerr.TopicAlreadyExists):
		return pgmsg.NewError(pgmsg.ErrTopicExists, err, "topic already exists")
	case errors.Is(err, kerr.InvalidTopicException):
		return pgmsg.NewError(pgmsg.ErrInvalidName, err, "invalid topic name")
	case errors.Is(err, kerr.InvalidPartitions), errors.Is(err, kerr.InvalidReplicationFactor),
		errors.Is(err, kerr.InvalidConfig), errors.Is(err, kerr.InvalidRequest):
		return pgmsg.NewError(pgmsg.ErrInvalidArgument, err, "%v", err)
	case errors.Is(err, kerr.GroupIDNotFound):
		return pgmsg.NewError(pgmsg.ErrUnknownGroup, err, "unknown group")
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return pgmsg.NewError(pgmsg.ErrRecordTooLarge, err, "record too large")
	}
	return err
}

// CreateTopic creates a topic with cfg.Partitions (default 1, at most
// pgmsg.PartitionsMax, as on PostgreSQL) and the broker's default
// replication factor. MaxRecordBytes becomes max.message.bytes; string
// Settings are passed as topic configs by their Kafka names
// ("retention.ms"); SegmentRecords has no equivalent and is refused.
func (b *Backend) CreateTopic(ctx context.Context, name string, cfg pgmsg.TopicConfig) (*pgmsg.Topic, error) {
	if err := pgmsg.ValidateName("topic", name); err != nil {
		return nil, err
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	if cfg.Partitions < pgmsg.PartitionsMin || cfg.Partitions > pgmsg.PartitionsMax {
		return nil, pgmsg.NewError(pgmsg.ErrInvalidArgument, nil, "partitions must be between %d and %d, got %d",
			pgmsg.PartitionsMin, pgmsg.PartitionsMax, cfg.Partitions)
	}
	if cfg.SegmentRecords != 0 {
		return nil, pgmsg.NewError(pgmsg.ErrInvalidArgument, nil, "segment_records has no Kafka equivalent (use segment.bytes in Settings)")
	}
	configs := map[string]*string{}
	for k, v := range cfg.Settings {
		s, ok := v.(string)
		if !ok {
			return nil, pgmsg.NewError(pgmsg.ErrInvalidArgument, nil, "topic setting %q: Kafka topic configs are strings, got %T", k, v)
		}
		configs[k] = &s
	}
	if cfg.MaxRecordBytes != 0 {
		s := strconv.Itoa(cfg.MaxRecordBytes)
		configs["max.message.bytes"] = &s
	}
	resp, err := b.admin.CreateTopic(ctx, int32(cfg.Partitions), -1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return nil, mapError(err)
	}
	return &pgmsg.Topic{Name: name, Partitions: cfg.Partitions, MaxRecordBytes: cfg.MaxRecordBytes,
		Settings: cfg.Settings, CreatedAt: time.Now()}, nil
}

// DescribeTopic returns the topic's partition count and each partition's
// start and end offsets. Sizes, segments and the creation time are not
// known to Kafka's metadata and stay zero; Records is the offset span.
func (b *Backend) DescribeTopic(ctx context.Context, name string) (*pgmsg.TopicDescription, error) {
	if err := pgmsg.ValidateName("topic", name); err != nil {
		return nil, err
	}
	td, err := b.topicDetail(ctx, name)
	if err != nil {
		return nil, err
	}
	starts, err := b.admin.ListStartOffsets(ctx, name)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, mapError(err)
	}
	ends, err := b.admin.ListEndOffsets(ctx, name)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, mapError(err)
	}
	d := &pgmsg.TopicDescription{Topic: pgmsg.Topic{Name: name, Partitions: len(td.Partitions)}}
	for _, p := range td.Partitions.Numbers() {
		s, _ := starts.Lookup(name, p)
		e, _ := ends.Lookup(name, p)
		d.PartitionInfo = append(d.PartitionInfo, pgmsg.PartitionInfo{Partition: p, StartOffset: s.Offset,
			NextOffset: e.Offset, Records: e.Offset - s.Offset})
	}
	return d, nil
}

// topicDetail returns the metadata of topic, or ErrUnknownTopic.
func (b *Backend) topicDetail(ctx context.Context, topic string) (kadm.TopicDetail, error) {
	tds, err := b.admin.ListTopics(ctx, topic)
	if err != nil {
		return kadm.TopicDetail{}, mapError(err)
	}
	td, ok := tds[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return kadm.TopicDetail{}, pgmsg.NewError(pgmsg.ErrUnknownTopic, td.Err, "unknown topic '%s'", topic)
	}
	if td.Err != nil {
		return kadm.TopicDetail{}, mapError(td.Err)
	}
	return td, nil
}

// DeleteTopic deletes a topic; ErrUnknownTopic if there is none.
func (b *Backend) DeleteTopic(ctx context.Context, name string) error {
	if err := pgmsg.ValidateName("topic", name); err != nil {
		return err
	}
	resp, err := b.admin.DeleteTopic(ctx, name)
	if err == nil {
		err = resp.Err
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return pgmsg.NewError(pgmsg.ErrUnknownTopic, err, "unknown topic '%s'", name)
	}
	return mapError(err)
}

// ListGroups returns each group's partitions (of topic, or of every topic
// when ""): every partition of a topic the group has committed on or is
// assigned, with the committed offset as NextOffset (-1 where the group
// has not committed: it reads from its start position there), the end
// offset, the lag (from the partition's start without a commit) and the
// assigned member as Owner.
func (b *Backend) ListGroups(ctx context.Context, topic, group string) ([]pgmsg.GroupPartition, error) {
	groups := []string{group}
	if group == "" {
		listed, err := b.admin.ListGroups(ctx)
		if err != nil {
			return nil, mapError(err)
		}
		groups = listed.Groups()
	}
	out := []pgmsg.GroupPartition{}
	for _, g := range groups {
		gps, _, err := b.groupPartitions(ctx, g, topic)
		if err != nil {
			return nil, err
		}
		out = append(out, gps...)
	}
	return out, nil
}

// groupPartitions returns group's partitions of topic ("": of all its
// topics) as ListGroups describes them, and the group's description.
func (b *Backend) groupPartitions(ctx context.Context, group, topic string) ([]pgmsg.GroupPartition, kadm.DescribedGroup, error) {
	described, err := b.admin.DescribeGroups(ctx, group)
	if err == nil {
		err = described.Error()
	}
	if err != nil {
		return nil, kadm.DescribedGroup{}, mapError(err)
	}
	dg := described[group]
	committed, err := b.admin.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, dg, mapError(err)
	}
	topics := map[string]bool{}
	owner := map[string]map[int32]string{}
	for _, m := range dg.Members {
		a, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		for _, t := range a.Topics {
			topics[t.Topic] = true
			if owner[t.Topic] == nil {
				owner[t.Topic] = map[int32]string{}
			}
			for _, p := range t.Partitions {
				owner[t.Topic][p] = m.MemberID
			}
		}
	}
	committed.Each(func(o kadm.OffsetResponse) { topics[o.Topic] = true })
	var names []string
	for t := range topics {
		if topic == "" || t == topic {
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		return nil, dg, nil
	}
	sort.Strings(names)
	starts, err := b.admin.ListStartOffsets(ctx, names...)
	if err != nil {
		return nil, dg, mapError(err)
	}
	ends, err := b.admin.ListEndOffsets(ctx, names...)
	if err != nil {
		return nil, dg, mapError(err)
	}
	var out []pgmsg.GroupPartition
	for _, t := range names {
		var parts []int32
		for p, e := range ends[t] {
			if e.Err == nil {
				parts = append(parts, p)
			}
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		for _, p := range parts {
			end := ends[t][p].Offset
			gp := pgmsg.GroupPartition{Topic: t, Group: group, Partition: p, NextOffset: -1, EndOffset: end,
				Owner: owner[t][p]}
			from := starts[t][p].Offset
			if c, ok := committed.Lookup(t, p); ok && c.Err == nil && c.At >= 0 {
				gp.NextOffset, from = c.At, c.At
			}
			gp.Lag = max(0, end-from)
			out = append(out, gp)
		}
	}
	return out, dg, nil
}

// DescribeGroup returns group's members (with their partitions of topic)
// and its partitions of topic; ErrUnknownGroup when the group has neither
// members nor commits on topic.
func (b *Backend) DescribeGroup(ctx context.Context, topic, group string) (*pgmsg.GroupDescription, error) {
	if err := pgmsg.ValidateName("group", group); err != nil {
		return nil, err
	}
	if _, err := b.topicDetail(ctx, topic); err != nil {
		return nil, err
	}
	gps, dg, err := b.groupPartitions(ctx, group, topic)
	if err != nil {
		return nil, err
	}
	if len(gps) == 0 {
		return nil, pgmsg.NewError(pgmsg.ErrUnknownGroup, nil, "unknown group %q on topic %q", group, topic)
	}
	d := &pgmsg.GroupDescription{Topic: topic, Group: group, Partitions: gps}
	for _, m := range dg.Members {
		gm := pgmsg.GroupMember{MemberID: m.MemberID, Alive: true, Partitions: []int32{}}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				if t.Topic == topic {
					gm.Partitions = append(gm.Partitions, t.Partitions...)
				}
			}
		}
		sort.Slice(gm.Partitions, func(i, j int) bool { return gm.Partitions[i] < gm.Partitions[j] })
		d.Members = append(d.Members, gm)
	}
	return d, nil
}

// ResetGroup commits new offsets for group on topic (or one partition):
// PositionEarliest, PositionLatest, an offset (kept within the partition's
// start and end, as on PostgreSQL) or an RFC 3339 timestamp (the first
// record at or after it, else the end). Kafka accepts it only while the
// group has no members; with members it fails with ErrInvalidArgument.
// A group that has never committed on topic is ErrUnknownGroup.
func (b *Backend) ResetGroup(ctx context.Context, topic, group, position string, partition *int32) ([]pgmsg.GroupPartition, error) {
	if err := pgmsg.ValidateName("group", group); err != nil {
		return nil, err
	}
	td, err := b.topicDetail(ctx, topic)
	if err != nil {
		return nil, err
	}
	if partition != nil {
		if _, ok := td.Partitions[*partition]; !ok {
			return nil, pgmsg.NewError(pgmsg.ErrPartitionOutOfRange, nil, "partition %d out of range: topic %q has %d partitions",
				*partition, topic, len(td.Partitions))
		}
	}
	committed, err := b.admin.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return nil, mapError(err)
	}
	if len(committed.Offsets()[topic]) == 0 {
		return nil, pgmsg.NewError(pgmsg.ErrUnknownGroup, nil, "unknown group %q on topic %q", group, topic)
	}
	target, err := b.resolvePosition(ctx, topic, position)
	if err != nil {
		return nil, err
	}
	offsets := kadm.Offsets{}
	var out []pgmsg.GroupPartition
	for _, p := range td.Partitions.Numbers() {
		if partition != nil && p != *partition {
			continue
		}
		o := target[p]
		offsets.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
		out = append(out, pgmsg.GroupPartition{Topic: topic, Group: group, Partition: p, NextOffset: o})
	}
	resps, err := b.admin.CommitOffsets(ctx, group, offsets)
	if err == nil {
		err = resps.Error()
	}
	switch {
	case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.IllegalGeneration), errors.Is(err, kerr.RebalanceInProgress):
		return nil, pgmsg.NewError(pgmsg.ErrInvalidArgument, err, "group %q has members: Kafka resets only a group without members", group)
	case err != nil:
		return nil, mapError(err)
	}
	return out, nil
}

// resolvePosition returns the offset of position on each partition of topic.
func (b *Backend) resolvePosition(ctx context.Context, topic, position string) (map[int32]int64, error) {
	var listed kadm.ListedOffsets
	var err error
	var offset int64 = -1
	switch position {
	case pgmsg.PositionEarliest, "":
		listed, err = b.admin.ListStartOffsets(ctx, topic)
	case pgmsg.PositionLatest:
		listed, err = b.admin.ListEndOffsets(ctx, topic)
	default:
		if o, perr := strconv.ParseInt(position, 10, 64); perr == nil {
			if o < 0 {
				return nil, pgmsg.NewError(pgmsg.ErrInvalidOffset, nil, "offset must not be negative, got %d", o)
			}
			offset = o
			break
		}
		t, perr := time.Parse(time.RFC3339Nano, position)
		if perr != nil {
			return nil, pgmsg.NewError(pgmsg.ErrInvalidOffset, nil, "invalid position %q: use earliest, latest, an offset or an RFC 3339 timestamp", truncate(position, 80))
		}
		listed, err = b.admin.ListOffsetsAfterMilli(ctx, t.UnixMilli(), topic)
	}
	if offset >= 0 {
		starts, err := b.admin.ListStartOffsets(ctx, topic)
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			return nil, mapError(err)
		}
		ends, err := b.admin.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return nil, mapError(err)
		}
		out := map[int32]int64{}
		starts.Each(func(s kadm.ListedOffset) {
			e, _ := ends.Lookup(topic, s.Partition)
			out[s.Partition] = min(max(offset, s.Offset), e.Offset)
		})
		return out, nil
	}
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, mapError(err)
	}
	out := map[int32]int64{}
	listed.Each(func(l kadm.ListedOffset) { out[l.Partition] = l.Offset })
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
