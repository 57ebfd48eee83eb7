package kafkacompat

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clientEvent is a JSON line of the client scripts (python/, node/).
type clientEvent struct {
	Event      string  `json:"event"`
	Record     *rec    `json:"record"`
	Member     string  `json:"member"`
	Partitions []int32 `json:"partitions"`
	Partition  int32   `json:"partition"`
	Offset     int64   `json:"offset"`
	Records    int     `json:"records"`
	Duplicates int     `json:"duplicates"`
	Members    int     `json:"members"`
}

func records(evs []clientEvent, kind string) []rec {
	var out []rec
	for _, e := range evs {
		if e.Event == kind && e.Record != nil {
			r := *e.Record
			r.Headers = sortHeaders(r.Headers)
			out = append(out, r)
		}
	}
	return out
}

// requireDelivered checks a producer's delivery reports against the
// records as stored: each report's partition and offset hold the record
// the client sent, once.
func requireDelivered(t *testing.T, tg *target, topic string, partitions int32, delivered []rec) {
	t.Helper()
	seen := map[[2]int64]bool{}
	for _, r := range delivered {
		k := [2]int64{int64(r.Partition), r.Offset}
		require.False(t, seen[k], "%d/%d reported twice", r.Partition, r.Offset)
		seen[k] = true
	}
	requireSameAsNative(t, tg, topic, partitions, delivered)
}

// requireCommittedAtEnd checks that group committed the end of every
// partition of topic: as pgmsg reports its group cursors on pgmsg.
func requireCommittedAtEnd(t *testing.T, tg *target, topic, group string, partitions int32) {
	t.Helper()
	ends, err := tg.adm.ListEndOffsets(context.Background(), topic)
	require.NoError(t, err)
	want := map[int32]int64{}
	for p := int32(0); p < partitions; p++ {
		o, ok := ends.Lookup(topic, p)
		require.True(t, ok)
		want[p] = o.Offset
	}
	require.Equal(t, want, tg.committed(t, topic, group), "group %s committed the end of every partition", group)
}

// firstAtOrAfter is the offset of the first record of a partition whose
// timestamp is at or after ts, or -1 (Kafka's ListOffsets answer).
func firstAtOrAfter(recs []rec, ts int64) int64 {
	for _, r := range recs {
		if r.Timestamp >= ts {
			return r.Offset
		}
	}
	return -1
}

// TestConfluentKafkaPython drives librdkafka through Debian's
// python3-confluent-kafka: an idempotent producer (zstd, keys, headers,
// explicit timestamps, a null value), a group of three consumers that join
// one after another while the group consumes (each join a rebalance;
// commits after every record), and a seek by timestamp
// (offsets_for_times).
func TestConfluentKafkaPython(t *testing.T) {
	py := python3(t, "confluent_kafka")
	forEachTarget(t, func(t *testing.T, tg *target) {
		const topic, partitions, n = "ck-events", 3, 300
		const baseTS = int64(1764979200000) // 2025-12-06T00:00:00Z
		tg.createTopic(t, topic, partitions)
		seeds := strings.Join(tg.seeds, ",")
		script := "python/ck_client.py"

		out := runTool(t, 2*time.Minute, "", py, script, "produce", "--bootstrap", seeds, "--topic", topic,
			"--count", strconv.Itoa(n), "--base-ts", strconv.FormatInt(baseTS, 10))
		delivered := records(jsonLines[clientEvent](t, out), "delivered")
		require.Len(t, delivered, n)
		requireDelivered(t, tg, topic, partitions, delivered)
		for _, r := range delivered {
			i, err := strconv.Atoi(r.Headers[1].Value) // headers sorted: client, n
			require.NoError(t, err)
			require.Equal(t, baseTS+int64(i), r.Timestamp, "the producer's timestamp is kept")
			require.Equal(t, fmt.Sprintf("ck-key-%d", i%13), *r.Key)
			if i == 7 {
				require.Nil(t, r.Value)
			}
		}

		out = runTool(t, 3*time.Minute, "", py, script, "group", "--bootstrap", seeds, "--topic", topic,
			"--group", "ck-group", "--expect", strconv.Itoa(n))
		evs := jsonLines[clientEvent](t, out)
		consumed := records(evs, "record")
		require.Len(t, consumed, n)
		requireSameAsNative(t, tg, topic, partitions, consumed)
		assigned := map[string]int{}
		var joins, dups int
		for _, e := range evs {
			switch e.Event {
			case "assign":
				assigned[e.Member]++
			case "join":
				joins++
			case "done":
				dups = e.Duplicates
			}
		}
		require.Equal(t, 2, joins)
		require.Len(t, assigned, 3, "every member got an assignment: %v", assigned)
		require.GreaterOrEqual(t, assigned["member-0"], 3, "the first member was assigned anew at each join")
		t.Logf("confluent-kafka group: assignments per member %v, %d records read twice across rebalances", assigned, dups)
		requireCommittedAtEnd(t, tg, topic, "ck-group", partitions)

		ts := baseTS + n/2
		out = runTool(t, time.Minute, "", py, script, "seekts", "--bootstrap", seeds, "--topic", topic,
			"--ts", strconv.FormatInt(ts, 10), "--partitions", strconv.Itoa(partitions))
		evs = jsonLines[clientEvent](t, out)
		got := map[int32]int64{}
		for _, e := range evs {
			if e.Event == "offset" {
				got[e.Partition] = e.Offset
			}
		}
		want := map[int32]int64{}
		firsts := records(evs, "first")
		for p := int32(0); p < partitions; p++ {
			want[p] = firstAtOrAfter(tg.native(t, topic, p), ts)
		}
		require.Equal(t, want, got, "offsets_for_times(%d)", ts)
		sort.Slice(firsts, func(i, j int) bool { return firsts[i].Partition < firsts[j].Partition })
		for _, r := range firsts {
			require.Equal(t, want[r.Partition], r.Offset, "the read after the seek starts at the offset found")
			require.GreaterOrEqual(t, r.Timestamp, ts)
		}
	})
}
