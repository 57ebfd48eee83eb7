package logpublish

import (
	"context"
	"hash/fnv"
	"sort"
	"strconv"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Batch is the records of one call bound for one partition, sent in one
// statement.
type Batch struct {
	Topic     string
	Partition int32
	Records   []*pgmsgtype.Record
	// SegmentsLow is set by the publish when the partition's segments
	// ahead run low: more are created after the commit (afterCommit).
	SegmentsLow bool
	// ProducerID, when set, makes the publish idempotent: the batch's
	// records are numbered from Sequence (publish_idempotent, migration
	// 023), and Duplicate reports that the batch was stored before.
	ProducerID string
	Sequence   int64
	Duplicate  bool
}

// Idempotence names an idempotent publish: its producer and the sequence
// number of its first record. The zero value is a plain publish.
type Idempotence struct {
	ProducerID string
	Sequence   int64
}

// spread is the partition of an idempotent call's unkeyed records: a hash
// of the producer id and the sequence, the same on every retry.
func (i Idempotence) spread(partitions int) int32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(i.ProducerID))
	_, _ = h.Write([]byte{'/'})
	_, _ = h.Write(strconv.AppendInt(nil, i.Sequence, 10))
	return int32(h.Sum64() % uint64(partitions))
}

// Plan validates records and groups them by (topic, partition), in the
// lock order every publisher uses: topic name, then partition. exec runs
// the topic lookups (the caller's transaction for PublishTx). manual
// publishes each record to its Record.Partition.
//
// idem, when set, makes the plan idempotent: unkeyed records go to a
// partition drawn from the producer id and the sequence (so that a retry
// of the call lands where the first attempt did), and each batch gets the
// sequence of its first record, the records being numbered from
// idem.Sequence in the order they are stored (by partition, then in the
// order given), as publish_idempotent() numbers them.
func (p *Publisher) Plan(ctx context.Context, exec store.DBTX, records []*pgmsgtype.Record, manual bool, idem Idempotence) ([]*Batch, error) {
	if len(records) == 0 {
		return nil, errs.New(errs.EmptyBatch, "empty batch: publish needs at least one record")
	}
	type tp struct {
		topic     string
		partition int32
	}
	groups := map[tp]*Batch{}
	spread := map[string]int32{}
	for _, r := range records {
		if r == nil {
			return nil, errs.New(errs.InvalidArgument, "nil record")
		}
		meta, err := p.TopicMeta(ctx, exec, r.Topic, false) // PM003, PM001 from SQL
		if err != nil {
			return nil, err
		}
		// Only what the call needs: a timestamp pgx can send and
		// PostgreSQL can hold (publish() refuses the rest of the years
		// outside 0001..9999 with the same PM004). Record sizes are
		// publish()'s to refuse (PM006; the direct statement declines an
		// oversized record and leaves it to publish()).
		if !r.Timestamp.IsZero() {
			if err := p.cfg.CheckTime("record timestamp", r.Timestamp); err != nil {
				return nil, err
			}
		}
		part, err := choosePartition(r, meta.Partitions, manual, func() int32 {
			if s, ok := spread[r.Topic]; ok {
				return s
			}
			var s int32
			if idem.ProducerID != "" {
				s = idem.spread(meta.Partitions)
			} else {
				s = p.idlePartition(r.Topic, meta.Partitions)
			}
			spread[r.Topic] = s
			return s
		})
		if err != nil {
			return nil, err
		}
		k := tp{r.Topic, part}
		g := groups[k]
		if g == nil {
			g = &Batch{Topic: r.Topic, Partition: part}
			groups[k] = g
		}
		g.Records = append(g.Records, r)
	}
	out := make([]*Batch, 0, len(groups))
	for _, g := range groups {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	if idem.ProducerID != "" {
		seq := idem.Sequence
		for _, b := range out {
			b.ProducerID, b.Sequence = idem.ProducerID, seq
			seq += int64(len(b.Records))
		}
	}
	return out, nil
}

// CheckRecord refuses, before a round trip, a record whose timestamp is
// outside the UTC years 0001..9999 or that is larger than the topic
// allows. The Producer checks each record with it before batching, so
// that a bad record fails alone instead of the batch it would share with
// others'.
func (p *Publisher) CheckRecord(r *pgmsgtype.Record, meta TopicMeta) error {
	if !r.Timestamp.IsZero() {
		if err := p.cfg.CheckTime("record timestamp", r.Timestamp); err != nil {
			return err
		}
	}
	// A lower bound of what the SQL API measures (key + value + headers as
	// jsonb text); the SQL check stays authoritative.
	if n := len(r.Key) + len(r.Value); n > meta.MaxRecordBytes {
		return errs.New(errs.RecordTooLarge, "record of %d bytes is larger than topic %q's max_record_bytes (%d)", n, r.Topic, meta.MaxRecordBytes)
	}
	return nil
}

// Partition chooses r's partition among partitions: r.Partition when
// manual (checked against partitions), the key's hash (PartitionForKey),
// or, for a record without key, spread's choice. The Producer calls it
// with its sticky partition as spread.
func (p *Publisher) Partition(r *pgmsgtype.Record, partitions int, manual bool, spread func() int32) (int32, error) {
	return choosePartition(r, partitions, manual, spread)
}

func choosePartition(r *pgmsgtype.Record, partitions int, manual bool, spread func() int32) (int32, error) {
	switch {
	case manual:
		if r.Partition < 0 || int(r.Partition) >= partitions {
			return 0, errs.New(errs.PartitionOutOfRange, "partition %d out of range: topic %q has %d partitions", r.Partition, r.Topic, partitions)
		}
		return r.Partition, nil
	case r.Key != nil:
		return PartitionForKey(r.Key, partitions), nil
	default:
		return spread(), nil
	}
}
