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
// gaps in pgmsg, a restart may have written records twice, producers may
// write to the Kafka topic too), so each partition is read once from its
// start, matching OffsetHeader values with the positions of all groups at
// once: the time this takes grows with the size of the Kafka topic.
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
	// found[k] is how many of targets[k] (in order) have their offset;
	// after[k] is the Kafka offset after the last mirrored record, where
	// positions past every mirrored record start.
	found := map[partKey]int{}
	after := map[partKey]int64{}
	todo := map[string]map[int32]span{}
	for k := range targets {
		s, ok := spans[k.topic][k.partition]
		if !ok {
			return nil, newError(ErrKafkaPartitions, fmt.Sprintf("kafka topic %q has no partition %d", k.topic, k.partition))
		}
		after[k] = s.From
		if todo[k.topic] == nil {
			todo[k.topic] = map[int32]span{}
		}
		todo[k.topic][k.partition] = s
	}
	err = scan(ctx, cfg.Kafka, todo, func(r *kgo.Record) error {
		o, ok, err := pgmsgOffset(r)
		if err != nil || !ok {
			return err
		}
		k := partKey{r.Topic, r.Partition}
		after[k] = r.Offset + 1
		ts := targets[k]
		for found[k] < len(ts) && ts[found[k]].c <= o {
			out[ts[found[k]].i].KafkaOffset = r.Offset
			found[k]++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for k, ts := range targets {
		for _, t := range ts[found[k]:] {
			out[t.i].KafkaOffset = after[k]
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
