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
	// app, the application's group, has read everything published before
	// the last burst.
	_, err = b.client.CreateGroup(ctx, "bench", "app", "latest")
	require.NoError(t, err)

	cfg := mirror.Config{Client: b.client, Kafka: b.kafka, Topics: []string{"bench"}, CreateTopics: true,
		Workers: envInt(t, "PGMSG_MIRROR_BENCH_WORKERS"), Batch: envInt(t, "PGMSG_MIRROR_BENCH_BATCH")}
	start := time.Now()
	s := run(t, cfg)
	took := time.Since(start)
	require.Equal(t, int64(n), s.Mirrored)
	t.Logf("mirrored %d records of 1 KiB (workers %d, batch %d; 0: default) in %s: %.0f records/s, %.1f MiB/s", n,
		cfg.Workers, cfg.Batch, took.Round(time.Millisecond), float64(n)/took.Seconds(), float64(n)*1024/took.Seconds()/(1<<20))

	// The switch-over: producers stopped after a last burst; the mirror
	// copies it (--drain), mirror groups translates app, and app's Kafka
	// consumer joins and reads its first record of every partition.
	publish(t, b.client, "bench", n, 1000, 1024)
	start = time.Now()
	s = run(t, mirror.Config{Client: b.client, Kafka: b.kafka, Topics: []string{"bench"}})
	drained := time.Since(start)
	require.Equal(t, int64(1000), s.Mirrored)
	start = time.Now()
	offs, err := mirror.TranslateGroups(ctx, mirror.GroupsConfig{Client: b.client, Kafka: b.kafka,
		Groups: []string{"app"}, Topics: []string{"bench"}})
	require.NoError(t, err)
	translated := time.Since(start)
	require.Len(t, offs, 8)
	want := map[int32]int64{}
	for _, o := range offs {
		want[o.Partition] = o.PgmsgOffset
	}
	start = time.Now()
	requireGroupStartsAt(t, b, "bench", "app", want)
	t.Logf("switch-over over %d records: drain of the last 1000 %s, mirror groups %s, Kafka consumer's first records %s",
		n+1000, drained.Round(time.Millisecond), translated.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	requireMirrored(t, b, "bench")
}

// envInt reads an optional integer setting of the measurement (0 if unset).
func envInt(t *testing.T, name string) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	return n
}
