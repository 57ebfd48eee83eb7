package mirror

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// OffsetHeader names the header every mirrored record carries: the
// record's pgmsg offset, in decimal. It is what makes the mirror exact
// across restarts (the last one in a Kafka partition says where the copy
// stands) and what translates a pgmsg group's position into a Kafka
// offset (pgmsg offsets have gaps after compaction, and a Kafka topic may
// hold other records, so the two offsets differ in general).
const OffsetHeader = "pgmsg-offset"

// LogEpochHeader names the header that carries the pgmsg partition's log
// epoch the record was read in, in decimal, when it is not 0 (no failover
// has changed the partition's history): a mirror that starts after a
// failover tells records of a lost history from new records at the same
// offsets by it (checkTailEpoch).
const LogEpochHeader = "pgmsg-log-epoch"

// pgmsgLogEpoch returns the record's LogEpochHeader value (0: none).
func pgmsgLogEpoch(r *kgo.Record) int32 {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == LogEpochHeader {
			e, err := strconv.ParseInt(string(r.Headers[i].Value), 10, 32)
			if err == nil && e > 0 {
				return int32(e)
			}
			return 0
		}
	}
	return 0
}

// pgmsgOffset returns the record's OffsetHeader value; ok is false when
// it has none (a record the mirror did not write). A source record with a
// header of that name keeps it; the mirror's comes last and wins.
func pgmsgOffset(r *kgo.Record) (offset int64, ok bool, err error) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		h := r.Headers[i]
		if h.Key != OffsetHeader {
			continue
		}
		o, err := strconv.ParseInt(string(h.Value), 10, 64)
		if err != nil || o < 0 {
			return 0, false, newError(ErrBadMirrorHeader, fmt.Sprintf("kafka record %s/%d@%d has %s %q, not an offset",
				r.Topic, r.Partition, r.Offset, OffsetHeader, h.Value))
		}
		return o, true, nil
	}
	return 0, false, nil
}

// ensureTopics checks that every topic exists in Kafka with at least
// partitions[topic] partitions, creating the missing ones when create is
// set (with the broker's default replication factor). More partitions in
// Kafka are allowed (the extra ones get nothing from the mirror); fewer
// are refused, since partition numbers must be kept.
func ensureTopics(ctx context.Context, adm *kadm.Client, partitions map[string]int32, create bool, logger *slog.Logger) error {
	names := make([]string, 0, len(partitions))
	for t := range partitions {
		names = append(names, t)
	}
	sort.Strings(names)
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("kafka: list topics: %w", err)
	}
	for _, t := range names {
		want := partitions[t]
		d, ok := details[t]
		if !ok || d.Err != nil {
			if !create {
				return newError(ErrKafkaTopicMissing, fmt.Sprintf("kafka topic %q does not exist: create it with %d partitions, or pass --create-topics", t, want))
			}
			resp, err := adm.CreateTopics(ctx, want, -1, nil, t)
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				return fmt.Errorf("kafka: create topic %q with %d partitions: %w", t, want, err)
			}
			continue
		}
		got := int32(len(d.Partitions))
		if got < want {
			return newError(ErrKafkaPartitions, fmt.Sprintf("kafka topic %q has %d partitions, pgmsg topic has %d: add partitions in Kafka first (partition numbers are kept)", t, got, want))
		}
		if got > want {
			logger.Warn("pgmsg mirror: the Kafka topic has more partitions than the pgmsg topic: the extra ones get nothing from the mirror, and Kafka producers' default partitioner will send keys elsewhere than pgmsg did",
				"topic", t, "kafka_partitions", got, "pgmsg_partitions", want)
		}
	}
	// A new topic's metadata may take a moment to reach every broker:
	// wait until the topics list their partitions.
	for {
		details, err := adm.ListTopics(ctx, names...)
		if err == nil && details.Error() == nil {
			ready := true
			for _, t := range names {
				if int32(len(details[t].Partitions)) < partitions[t] {
					ready = false
				}
			}
			if ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// span is a range of offsets [From, To) of one Kafka partition.
type span struct{ From, To int64 }

// scan reads each partition's span with a consumer of its own and calls fn
// with every record, in offset order within a partition. It returns once
// each partition delivered its span's last offset (records a transaction
// aborted, or compaction removed, would make it wait: the mirror writes
// neither; ctx bounds it).
func scan(ctx context.Context, opts []kgo.Opt, spans map[string]map[int32]span, fn func(*kgo.Record) error) error {
	from := map[string]map[int32]kgo.Offset{}
	left := 0
	for t, ps := range spans {
		for p, s := range ps {
			if s.From >= s.To {
				continue
			}
			if from[t] == nil {
				from[t] = map[int32]kgo.Offset{}
			}
			from[t][p] = kgo.NewOffset().At(s.From)
			left++
		}
	}
	if left == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...), kgo.ConsumePartitions(from),
		kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	done := map[string]map[int32]bool{}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, fe := range fs.Errors() {
			return fmt.Errorf("kafka: read %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			s := spans[r.Topic][r.Partition]
			if ferr != nil || r.Offset >= s.To || done[r.Topic][r.Partition] {
				return
			}
			if ferr = fn(r); ferr != nil {
				return
			}
			if r.Offset+1 >= s.To {
				if done[r.Topic] == nil {
					done[r.Topic] = map[int32]bool{}
				}
				done[r.Topic][r.Partition] = true
				left--
			}
		})
		if ferr != nil {
			return ferr
		}
	}
	return nil
}

// partitionOffsets lists the start and end offsets of topic's partitions.
func partitionOffsets(ctx context.Context, adm *kadm.Client, topics ...string) (map[string]map[int32]span, error) {
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: list start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: list end offsets: %w", err)
	}
	out := map[string]map[int32]span{}
	ends.Each(func(o kadm.ListedOffset) {
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]span{}
		}
		s := span{To: o.Offset}
		if st, ok := starts.Lookup(o.Topic, o.Partition); ok {
			s.From = st.Offset
		}
		out[o.Topic][o.Partition] = s
	})
	return out, nil
}

// tailWindow is how many records from a partition's end readTail reads at
// least; it grows eightfold while the window holds no mirrored record
// (records that producers wrote to Kafka directly after a cut-over).
const tailWindow = 1000

// kafkaTail is what a Kafka partition holds of a pgmsg partition, as far
// as the mirror needs to know: every pgmsg offset up to upTo, and those in
// have.
//
// The mirror writes a partition in pgmsg order, one claim at a time, with
// one exception: a produce request that Kafka refused may be followed by
// one of the same claim that Kafka accepted (the producer splits a claim
// into several requests, and Kafka accepts the first sequence of a
// producer it does not know). The claim's tail is then in Kafka and its
// head is not, until the retry writes it after the tail. A partition's
// highest pgmsg offset does not say where the copy stands then; the set
// of offsets in its last records does.
type kafkaTail struct {
	upTo int64
	have map[int64]struct{}
	// high is the highest pgmsg offset read from Kafka (-1: none), and
	// epoch the highest log epoch among the records read.
	high  int64
	epoch int32
}

// holds reports whether Kafka holds the record of pgmsg offset o.
func (t *kafkaTail) holds(o int64) bool {
	if o <= t.upTo {
		return true
	}
	_, ok := t.have[o]
	return ok
}

// wrote records that Kafka acknowledged every record of a claim up to
// pgmsg offset last.
func (t *kafkaTail) wrote(last int64) {
	t.upTo = max(t.upTo, last)
	for o := range t.have {
		if o <= t.upTo {
			delete(t.have, o)
		}
	}
}

// readTail reads what a Kafka partition holds of the pgmsg partition from
// the pgmsg offsets of its last records: at least window of them, so that
// the window reaches past the one claim that may have been written in
// part (window must exceed the mirror's claim size). The pgmsg offsets
// below the lowest one in the window are in Kafka, unless the window
// starts at the partition's start.
func readTail(ctx context.Context, adm *kadm.Client, opts []kgo.Opt, topic string, partition int32, window int64) (kafkaTail, error) {
	all, err := partitionOffsets(ctx, adm, topic)
	if err != nil {
		return kafkaTail{}, err
	}
	s, ok := all[topic][partition]
	if !ok {
		return kafkaTail{}, fmt.Errorf("kafka: topic %q has no partition %d", topic, partition)
	}
	for w := max(window, tailWindow); ; w *= 8 {
		from := max(s.From, s.To-w)
		have := map[int64]struct{}{}
		lowest, high, epoch := int64(-1), int64(-1), int32(0)
		err := scan(ctx, opts, map[string]map[int32]span{topic: {partition: {from, s.To}}}, func(r *kgo.Record) error {
			o, ok, err := pgmsgOffset(r)
			if ok {
				have[o] = struct{}{}
				if lowest < 0 || o < lowest {
					lowest = o
				}
				high = max(high, o)
				epoch = max(epoch, pgmsgLogEpoch(r))
			}
			return err
		})
		if err != nil {
			return kafkaTail{}, err
		}
		if from == s.From {
			return kafkaTail{upTo: -1, have: have, high: high, epoch: epoch}, nil
		}
		if lowest >= 0 {
			return kafkaTail{upTo: lowest - 1, have: have, high: high, epoch: epoch}, nil
		}
	}
}
