package kafkacompat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// produceAndGroup runs a client's produce mode and its group mode (the
// command line given by cmd) and checks both against the records as
// stored: the delivery reports point at the records sent (key, value,
// headers, timestamp), the group reads every record once and commits the
// end of every partition.
func produceAndGroup(t *testing.T, tg *target, topic, group, keyPrefix, client string, nullAt int, cmd func(args ...string) []string) {
	t.Helper()
	const partitions, n = 3, 200
	const baseTS = int64(1764979200000)
	tg.createTopic(t, topic, partitions)
	seeds := strings.Join(tg.seeds, ",")
	c := cmd("produce", "--bootstrap", seeds, "--topic", topic, "--count", strconv.Itoa(n), "--base-ts", strconv.FormatInt(baseTS, 10))
	out := runTool(t, 2*time.Minute, "", c[0], c[1:]...)
	delivered := records(jsonLines[clientEvent](t, out), "delivered")
	require.Len(t, delivered, n)
	requireDelivered(t, tg, topic, partitions, delivered)
	for _, r := range delivered {
		require.Len(t, r.Headers, 2)
		require.Equal(t, header{"client", client}, r.Headers[0])
		i, err := strconv.Atoi(r.Headers[1].Value)
		require.NoError(t, err)
		require.Equal(t, baseTS+int64(i), r.Timestamp)
		require.True(t, strings.HasPrefix(*r.Key, keyPrefix))
		if i == nullAt {
			require.Nil(t, r.Value)
		} else {
			require.Equal(t, fmt.Sprintf("%s-value-%d", strings.TrimSuffix(keyPrefix, "-key-"), i), *r.Value)
		}
	}
	c = cmd("group", "--bootstrap", seeds, "--topic", topic, "--group", group, "--expect", strconv.Itoa(n))
	out = runTool(t, 3*time.Minute, "", c[0], c[1:]...)
	consumed := records(jsonLines[clientEvent](t, out), "record")
	require.Len(t, consumed, n)
	requireSameAsNative(t, tg, topic, partitions, consumed)
	requireCommittedAtEnd(t, tg, topic, group, partitions)
}

// TestKafkaPython: Debian's python3-kafka (kafka-python) produces (gzip,
// keys, headers, timestamps, a null value) and consumes as a group.
func TestKafkaPython(t *testing.T) {
	py := python3(t, "kafka")
	forEachTarget(t, func(t *testing.T, tg *target) {
		produceAndGroup(t, tg, "kp-events", "kp-group", "kp-key-", "kafka-python", 3, func(args ...string) []string {
			return append([]string{py, "python/kp_client.py"}, args...)
		})
	})
}

// TestKafkaJS: kafkajs from npm (node/, installed by npm ci) produces
// (idempotent, gzip, headers, timestamps, a null value) and consumes as a
// group.
func TestKafkaJS(t *testing.T) {
	node := needTool(t, "node", "--version")
	if _, err := os.Stat("node/node_modules/kafkajs/package.json"); err != nil {
		msg := "kafkajs is not installed: npm ci in internal/kafkacompat/node (.ci/run does it)"
		if os.Getenv(requireKafkaClientsEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	forEachTarget(t, func(t *testing.T, tg *target) {
		produceAndGroup(t, tg, "kjs-events", "kjs-group", "kjs-key-", "kafkajs", 11, func(args ...string) []string {
			return append([]string{node, "node/client.js"}, args...)
		})
	})
}
