package mirror

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
)

// GroupOffset is one partition of a translated group: the pgmsg group's
// next offset and the Kafka offset committed for the Kafka group of the
// same name.
type GroupOffset struct {
	Group       string `json:"group"`
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	PgmsgOffset int64  `json:"pgmsg_offset"`
	KafkaOffset int64  `json:"kafka_offset"`
	// InFlight is set when the pgmsg group had a live claim on the
	// partition: its records are not committed, so the Kafka group reads
	// them again.
	InFlight bool `json:"in_flight,omitempty"`
}

// GroupsConfig configures TranslateGroups.
type GroupsConfig struct {
	Client *pgmsg.Client
	// Kafka are the Kafka clients' options (kgo.SeedBrokers at least).
	Kafka []kgo.Opt
	// Groups are the pgmsg groups to translate, each into the Kafka group
	// of the same name.
	Groups []string
	Topics []string
	// MirrorGroup is the mirror's pgmsg group: a position is only
	// translated once the mirror has copied every record before it.
	// Default GroupDefault.
	MirrorGroup string
	// DryRun computes the offsets without committing them.
	DryRun bool
}

// TranslateGroups commits, for every group and topic, the Kafka offset of
// the first mirrored record at or after the pgmsg group's position, so
// that a Kafka consumer of that group starts where the pgmsg group stood.
// It refuses (ErrNotMirrored) a position past the mirror group's: the
// records before it may not be in Kafka yet. Kafka refuses the commit
// while the Kafka group has live members.
//
// Kafka offsets cannot be computed from pgmsg offsets (compaction leaves
// gaps in pgmsg, the mirror may have started past offset 0, producers may
// write to the Kafka topic too): they are found by the records'
// OffsetHeader, see kafkaOffsets.
func TranslateGroups(ctx context.Context, cfg GroupsConfig) ([]GroupOffset, error) {
	if cfg.MirrorGroup == "" {
		cfg.MirrorGroup = GroupDefault
	}
	type target struct {
		i int // index in out
		c int64
	}
	var out []GroupOffset
	targets := map[partKey][]target{}
	for _, t := range cfg.Topics {
		mirror, err := cfg.Client.DescribeGroup(ctx, t, cfg.MirrorGroup)
		if errors.Is(err, pgmsg.ErrUnknownGroup) {
			return nil, newError(ErrNotMirrored, fmt.Sprintf("the mirror (group %q) has not copied topic %q yet: run pgmsg mirror first", cfg.MirrorGroup, t))
		}
		if err != nil {
			return nil, err
		}
		copied := map[int32]int64{}
		for _, p := range mirror.Partitions {
			copied[p.Partition] = p.NextOffset
		}
		for _, g := range cfg.Groups {
			d, err := cfg.Client.DescribeGroup(ctx, t, g)
			if err != nil {
				return nil, err
			}
			for _, p := range d.Partitions {
				if p.NextOffset > copied[p.Partition] {
					return nil, newError(ErrNotMirrored, fmt.Sprintf(
						"group %q stands at offset %d of %s/%d, the mirror (group %q) only at %d: let the mirror catch up (pgmsg mirror --drain), then translate",
						g, p.NextOffset, t, p.Partition, cfg.MirrorGroup, copied[p.Partition]))
				}
				inFlight := p.ClaimExpiresAt != nil && p.ClaimExpiresAt.After(time.Now())
				k := partKey{t, p.Partition}
				targets[k] = append(targets[k], target{len(out), p.NextOffset})
				out = append(out, GroupOffset{Group: g, Topic: t, Partition: p.Partition, PgmsgOffset: p.NextOffset, InFlight: inFlight})
			}
		}
	}
	for k := range targets {
		sort.Slice(targets[k], func(i, j int) bool { return targets[k][i].c < targets[k][j].c })
	}

	cl, err := kgo.NewClient(cfg.Kafka...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	spans, err := partitionOffsets(ctx, adm, cfg.Topics...)
	if err != nil {
		return nil, err
	}
	for k, ts := range targets {
		s, ok := spans[k.topic][k.partition]
		if !ok {
			return nil, newError(ErrKafkaPartitions, fmt.Sprintf("kafka topic %q has no partition %d", k.topic, k.partition))
		}
		cs := make([]int64, len(ts))
		for i, t := range ts {
			cs[i] = t.c
		}
		kafka, err := kafkaOffsets(ctx, cfg.Kafka, k, s, cs)
		if err != nil {
			return nil, err
		}
		for i, t := range ts {
			out[t.i].KafkaOffset = kafka[i]
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	if cfg.DryRun {
		return out, nil
	}
	byGroup := map[string]*kadm.Offsets{}
	for _, o := range out {
		if byGroup[o.Group] == nil {
			byGroup[o.Group] = &kadm.Offsets{}
		}
		byGroup[o.Group].AddOffset(o.Topic, o.Partition, o.KafkaOffset, -1)
	}
	for _, g := range cfg.Groups {
		resp, err := adm.CommitOffsets(ctx, g, *byGroup[g])
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("kafka: commit offsets of group %q: %w", g, err)
		}
	}
	return out, nil
}

// mirrored is a Kafka record's offset and its OffsetHeader.
type mirrored struct{ kafka, pgmsg int64 }

// kafkaOffsets returns, for each pgmsg position of cs (ascending), the
// offset of the first record of Kafka partition k (span s) mirrored from
// that position or a later one, or the offset after the last mirrored
// record when there is none (the position is past every record copied).
//
// It reads the partition's tail first, tailWindow records and eight times
// more each round: the positions of groups that switch over are usually
// near the end. A window answers when its mirrored records' pgmsg offsets
// increase strictly and its first one is below every position: the mirror
// writes a partition in order and resumes after the last record Kafka
// holds, so no record before the window can come from a position at or
// past it. Otherwise (records written twice by a crash the mirror did not
// see) it widens the window, up to the whole partition, where the first
// record at or past a position is the answer whatever the order: every
// record from that position on lies after it.
func kafkaOffsets(ctx context.Context, opts []kgo.Opt, k partKey, s span, cs []int64) ([]int64, error) {
	for w := int64(tailWindow); ; w *= 8 {
		from := max(s.From, s.To-w)
		var recs []mirrored
		increasing := true
		err := scan(ctx, opts, map[string]map[int32]span{k.topic: {k.partition: {from, s.To}}}, func(r *kgo.Record) error {
			o, ok, err := pgmsgOffset(r)
			if err != nil || !ok {
				return err
			}
			if n := len(recs); n > 0 && o <= recs[n-1].pgmsg {
				increasing = false
			}
			recs = append(recs, mirrored{r.Offset, o})
			return nil
		})
		if err != nil {
			return nil, err
		}
		whole := from == s.From
		if !whole && (!increasing || len(recs) == 0 || recs[0].pgmsg >= cs[0]) {
			continue
		}
		after := s.From
		if len(recs) > 0 {
			after = recs[len(recs)-1].kafka + 1
		}
		out := make([]int64, len(cs))
		j := 0
		for i, c := range cs {
			for j < len(recs) && recs[j].pgmsg < c {
				j++
			}
			out[i] = after
			if j < len(recs) {
				out[i] = recs[j].kafka
			}
		}
		return out, nil
	}
}
