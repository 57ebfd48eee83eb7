package mirror_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/mirror"
)

// TestMirrorThroughput measures what docs/scale-out.md reports: the time
// to mirror PGMSG_MIRROR_BENCH_RECORDS records of 1 KiB (8 partitions,
// default settings) to the in-process Kafka, and the time of the switch's
// `mirror groups` step over them. It checks the copy like the other tests
// and only logs the figures (make mirror-bench); without the variable it
// does not run.
func TestMirrorThroughput(t *testing.T) {
	v := os.Getenv("PGMSG_MIRROR_BENCH_RECORDS")
	if v == "" {
		t.Skip("measurement: set PGMSG_MIRROR_BENCH_RECORDS (make mirror-bench)")
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err)
	b := setup(t)
	ctx := context.Background()
	createTopic(t, b, "bench", 8)
	publish(t, b.client, "bench", 0, n, 1024)
	_, err = b.client.CreateGroup(ctx, "bench", "app", "latest")
	require.NoError(t, err)

	start := time.Now()
	s := run(t, mirror.Config{Client: b.client, Kafka: b.kafka, Topics: []string{"bench"}, CreateTopics: true})
	took := time.Since(start)
	require.Equal(t, int64(n), s.Mirrored)
	t.Logf("mirrored %d records of 1 KiB in %s: %.0f records/s, %.1f MiB/s", n, took.Round(time.Millisecond),
		float64(n)/took.Seconds(), float64(n)*1024/took.Seconds()/(1<<20))

	start = time.Now()
	offs, err := mirror.TranslateGroups(ctx, mirror.GroupsConfig{Client: b.client, Kafka: b.kafka,
		Groups: []string{"app"}, Topics: []string{"bench"}})
	require.NoError(t, err)
	t.Logf("mirror groups over %d records: %s", n, time.Since(start).Round(time.Millisecond))
	require.Len(t, offs, 8)
	requireMirrored(t, b, "bench")
}
