package kafkacompat

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// kcatRecord is a record as kcat -J prints it.
type kcatRecord struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	TsType    string   `json:"tstype"`
	Ts        int64    `json:"ts"`
	Headers   []string `json:"headers"` // key, value, key, value ...
	Key       *string  `json:"key"`
	Payload   *string  `json:"payload"`
	Broker    int32    `json:"broker"`
}

func (k kcatRecord) rec() rec {
	r := rec{Topic: k.Topic, Partition: k.Partition, Offset: k.Offset, Key: k.Key, Value: k.Payload, Timestamp: k.Ts}
	for i := 0; i+1 < len(k.Headers); i += 2 {
		r.Headers = append(r.Headers, header{k.Headers[i], k.Headers[i+1]})
	}
	r.Headers = sortHeaders(r.Headers)
	return r
}

// kcatMetadata is what kcat -L -J prints.
type kcatMetadata struct {
	Brokers []struct {
		ID   int32  `json:"id"`
		Name string `json:"name"`
	} `json:"brokers"`
	Topics []struct {
		Topic      string `json:"topic"`
		Partitions []struct {
			Partition int32 `json:"partition"`
			Leader    int32 `json:"leader"`
		} `json:"partitions"`
	} `json:"topics"`
}

// requireSameAsNative checks that what a client read of topic is what the
// cluster holds, read without the Kafka protocol (pgmsg: Client.Fetch):
// every record, at its partition and offset, with its key, value, headers
// and timestamp, once.
func requireSameAsNative(t *testing.T, tg *target, topic string, partitions int32, got []rec) {
	t.Helper()
	byPartition := map[int32][]rec{}
	for _, r := range got {
		require.Equal(t, topic, r.Topic)
		byPartition[r.Partition] = append(byPartition[r.Partition], r)
	}
	total := 0
	for p := int32(0); p < partitions; p++ {
		rs := byPartition[p]
		sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
		native := tg.native(t, topic, p)
		require.Equal(t, native, rs, "partition %d: the client read what the cluster holds", p)
		total += len(rs)
	}
	require.Len(t, got, total, "records outside the topic's partitions")
}

// TestKcat drives librdkafka through Debian's kcat: produce (every
// compression codec, keys with librdkafka's murmur2 partitioner, headers,
// a null value), consume (-C), metadata (-L), offsets by timestamp (-Q)
// and a balanced group (-G), each checked against the records as pgmsg
// stores them.
func TestKcat(t *testing.T) {
	kcat := needTool(t, "kcat", "-V")
	forEachTarget(t, func(t *testing.T, tg *target) {
		const topic, partitions = "kcat-events", 3
		tg.createTopic(t, topic, partitions)
		seeds := strings.Join(tg.seeds, ",")
		common := []string{"-b", seeds, "-m", "30", "-q"}

		// Produce: one kcat per codec, 25 records each, the last of
		// the first batch a null value (-Z).
		type written struct{ key, value, codec string }
		var wrote []written
		for i, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
			var in strings.Builder
			for j := 0; j < 25; j++ {
				n := i*25 + j
				value := fmt.Sprintf("value-%03d", n)
				if n == 24 {
					value = ""
				}
				fmt.Fprintf(&in, "key-%d:%s\n", n%11, value)
				wrote = append(wrote, written{fmt.Sprintf("key-%d", n%11), value, codec})
			}
			args := append([]string{"-P", "-t", topic, "-K", ":", "-Z", "-H", "codec=" + codec, "-H", "run=kcat",
				"-X", "partitioner=murmur2_random", "-X", "compression.codec=" + codec, "-X", "acks=all",
				"-X", "linger.ms=20"}, common...)
			runTool(t, time.Minute, in.String(), kcat, args...)
		}

		// Consume everything back.
		out := runTool(t, time.Minute, "", kcat, append([]string{"-C", "-t", topic, "-o", "beginning", "-e", "-J"}, common...)...)
		var got []rec
		for _, k := range jsonLines[kcatRecord](t, out) {
			require.Equal(t, "create", k.TsType)
			got = append(got, k.rec())
		}
		require.Len(t, got, len(wrote))
		requireSameAsNative(t, tg, topic, partitions, got)
		// What was written, in each partition in the order written, at
		// the partition pgmsg's own partitioner picks for the key.
		next := map[int32]int{}
		byPartition := map[int32][]rec{}
		for _, r := range got {
			byPartition[r.Partition] = append(byPartition[r.Partition], r)
		}
		for p := range byPartition {
			sort.Slice(byPartition[p], func(i, j int) bool { return byPartition[p][i].Offset < byPartition[p][j].Offset })
		}
		for _, w := range wrote {
			p := pgmsg.PartitionForKey([]byte(w.key), partitions)
			require.Less(t, next[p], len(byPartition[p]), "key %s: partition %d is short", w.key, p)
			r := byPartition[p][next[p]]
			next[p]++
			require.Equal(t, w.key, *r.Key)
			if w.value == "" {
				require.Nil(t, r.Value, "-Z: an empty value is a null one")
			} else {
				require.Equal(t, w.value, *r.Value)
			}
			require.Equal(t, []header{{"codec", w.codec}, {"run", "kcat"}}, r.Headers)
			require.InDelta(t, time.Now().UnixMilli(), r.Timestamp, float64(10*time.Minute/time.Millisecond), "CreateTime set by librdkafka")
		}

		// Metadata.
		out = runTool(t, time.Minute, "", kcat, append([]string{"-L", "-J", "-t", topic}, common...)...)
		md := jsonLines[kcatMetadata](t, out)
		require.Len(t, md, 1)
		require.NotEmpty(t, md[0].Brokers)
		brokers := map[int32]bool{}
		for _, b := range md[0].Brokers {
			brokers[b.ID] = true
		}
		require.Len(t, md[0].Topics, 1)
		require.Equal(t, topic, md[0].Topics[0].Topic)
		require.Len(t, md[0].Topics[0].Partitions, partitions)
		for _, p := range md[0].Topics[0].Partitions {
			require.True(t, brokers[p.Leader], "partition %d's leader %d is a listed broker", p.Partition, p.Leader)
		}

		// Offsets by timestamp (ListOffsets): the first offset at or
		// after a record's timestamp, and the end for a later one.
		native := tg.native(t, topic, 0)
		require.NotEmpty(t, native)
		probe := native[len(native)/2]
		want := probe.Offset
		for _, r := range native {
			if r.Timestamp >= probe.Timestamp {
				want = r.Offset
				break
			}
		}
		out = runTool(t, time.Minute, "", kcat, append([]string{"-Q", "-t", fmt.Sprintf("%s:0:%d", topic, probe.Timestamp),
			"-t", fmt.Sprintf("%s:1:%d", topic, time.Now().Add(time.Hour).UnixMilli())}, common...)...)
		require.Equal(t, want, kcatQueryOffset(t, out, topic, 0), out)
		require.Equal(t, int64(-1), kcatQueryOffset(t, out, topic, 1), "a timestamp past every record: no offset (-1, Kafka's answer)\n%s", out)

		// A balanced group (-G): reads everything once and commits.
		out = runTool(t, 2*time.Minute, "", kcat, append([]string{"-G", "kcat-group", "-X", "auto.offset.reset=earliest",
			"-e", "-J", topic}, common...)...)
		var grouped []rec
		for _, k := range jsonLines[kcatRecord](t, out) {
			grouped = append(grouped, k.rec())
		}
		requireSameAsNative(t, tg, topic, partitions, grouped)
		ends, err := tg.adm.ListEndOffsets(context.Background(), topic)
		require.NoError(t, err)
		wantCommitted := map[int32]int64{}
		for p := int32(0); p < partitions; p++ {
			o, _ := ends.Lookup(topic, p)
			wantCommitted[p] = o.Offset
		}
		require.Equal(t, wantCommitted, tg.committed(t, topic, "kcat-group"), "the group committed the end of every partition")
	})
}

var kcatQueryLine = regexp.MustCompile(`(?m)^(\S+) \[(\d+)\] offset (-?\d+)$`)

// kcatQueryOffset returns the offset kcat -Q printed for a partition.
func kcatQueryOffset(t *testing.T, out, topic string, partition int32) int64 {
	t.Helper()
	for _, m := range kcatQueryLine.FindAllStringSubmatch(out, -1) {
		if m[1] == topic && m[2] == strconv.Itoa(int(partition)) {
			o, err := strconv.ParseInt(m[3], 10, 64)
			require.NoError(t, err)
			return o
		}
	}
	t.Fatalf("kcat -Q printed no offset for %s/%d:\n%s", topic, partition, out)
	return 0
}
