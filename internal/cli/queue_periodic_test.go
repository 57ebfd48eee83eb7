package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// queue periodic list|add|remove (item 1).
func TestQueuePeriodicCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "queue", "create", "reports")
	require.Contains(t, s.ok("", "queue", "periodic", "list"), "(no periodic jobs)")

	out := s.ok("", "queue", "periodic", "add", "reports", "nightly", "0 2 * * *", "--payload", `{"report":"daily"}`,
		"--kind", "report", "--time-zone", "Europe/Paris", "--tag", "nightly", "--metadata", `{"by":"ops"}`, "--preview", "3")
	require.Contains(t, out, `periodic job "nightly" on "reports": 0 2 * * * (Europe/Paris)`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	for _, l := range lines[1:] {
		ts, err := time.Parse(time.RFC3339, strings.TrimSpace(l))
		require.NoError(t, err, l)
		paris, err := time.LoadLocation("Europe/Paris")
		require.NoError(t, err)
		require.Equal(t, 2, ts.In(paris).Hour(), l)
	}

	var added struct {
		PeriodicJob wire.PeriodicJobJSON `json:"periodic_job"`
		NextTicks   []time.Time          `json:"next_ticks"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "periodic", "add", "reports", "ping", "@every 30s",
		"--run-on-start", "--preview", "2", "-o", "json")), &added))
	require.True(t, added.PeriodicJob.RunOnStart)
	require.Len(t, added.NextTicks, 2)
	require.Equal(t, 30*time.Second, added.NextTicks[1].Sub(added.NextTicks[0]))

	list := s.ok("", "queue", "periodic", "list", "reports")
	require.Contains(t, list, "nightly")
	require.Contains(t, list, "0 2 * * *")
	require.Contains(t, list, "Europe/Paris")
	require.Contains(t, list, "ping")
	var all []wire.PeriodicJobJSON
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "periodic", "list", "-o", "json")), &all))
	require.Len(t, all, 2)
	require.Equal(t, "nightly", all[0].Name)
	require.JSONEq(t, `{"report":"daily"}`, string(all[0].Payload))
	require.Equal(t, []string{"nightly"}, all[0].Tags)

	// The leader's pass enqueues the run-on-start job; list shows it.
	c, err := pgmsg.NewClient(s.b.Pool, &pgmsg.Config{Schema: s.b.Schema})
	require.NoError(t, err)
	defer c.Close()
	ticks, err := c.EnqueueDuePeriodicJobs(context.Background())
	require.NoError(t, err)
	require.Len(t, ticks, 1)
	var after []wire.PeriodicJobJSON
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "periodic", "list", "reports", "-o", "json")), &after))
	require.Equal(t, "ping", after[1].Name)
	require.Equal(t, ticks[0].JobID, after[1].LastJobID, "list shows the tick's job")
	require.NotNil(t, after[1].LastRunAt)
	j, err := c.GetJob(context.Background(), ticks[0].JobID)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(j.UniqueKey, "periodic:ping@"), j.UniqueKey)

	require.Contains(t, s.fail("", "queue", "periodic", "add", "reports", "x", "every day"), "invalid schedule")
	require.Contains(t, s.fail("", "queue", "periodic", "add", "reports", "x", "@daily", "--time-zone", "Mars/Olympus"), "unknown time zone")
	require.Contains(t, s.fail("", "queue", "periodic", "add", "nope", "x", "@daily"), "unknown queue")
	require.Contains(t, s.fail("", "queue", "periodic", "remove", "reports", "nope"), "unknown periodic job")
	require.Contains(t, s.ok("", "queue", "periodic", "remove", "reports", "ping"), `removed periodic job "ping" from "reports"`)
	require.NotContains(t, s.ok("", "queue", "periodic", "list"), "ping")
}

// queue enqueue --unique-for (item 7).
func TestQueueEnqueueUniqueForCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	var first, second []pgmsg.EnqueueResult
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "enqueue", "sync", `{"user":42}`, "--unique-key", "sync-user-42",
		"--unique-for", "8784h", "-o", "json")), &first))
	require.False(t, first[0].Duplicate)
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "enqueue", "sync", `{"user":42}`, "--unique-key", "sync-user-42",
		"--unique-for", "8784h", "-o", "json")), &second))
	require.True(t, second[0].Duplicate)
	require.Equal(t, first[0].ID, second[0].ID)
	require.Contains(t, s.fail("", "queue", "enqueue", "sync", `{}`, "--unique-for", "1h"), "uniqueness window needs a unique key")
}

// queue create/config --rate-limit and --max-running (item 8).
func TestQueueLimitsCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	var q pgmsg.Queue
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "create", "lim", "--rate-limit", "2.5", "--max-running", "3", "-o", "json")), &q))
	require.Equal(t, 2.5, q.RateLimit)
	require.Equal(t, 3, q.MaxRunning)
	list := s.ok("", "queue", "list")
	require.Contains(t, list, "2.5/s")
	q = pgmsg.Queue{}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "config", "lim", "--rate-limit", "0", "-o", "json")), &q))
	require.Zero(t, q.RateLimit)
	require.Equal(t, 3, q.MaxRunning, "unchanged")
	q = pgmsg.Queue{}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "config", "lim", "--max-running", "0", "-o", "json")), &q))
	require.Zero(t, q.MaxRunning)
	require.Contains(t, s.fail("", "queue", "config", "lim", "--rate-limit", "-3"), "rate limit must be")
	require.Contains(t, s.fail("", "queue", "config", "lim", "--max-running", "-3"), "max running must be")
}

// topic offsets --time (item 5).
func TestTopicOffsetsCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "topic", "create", "ot")
	c, err := pgmsg.NewClient(s.b.Pool, &pgmsg.Config{Schema: s.b.Schema})
	require.NoError(t, err)
	defer c.Close()
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var recs []*pgmsg.Record
	for i := range 5 {
		recs = append(recs, &pgmsg.Record{Topic: "ot", Value: []byte("x"), Timestamp: base.Add(time.Duration(i) * time.Minute)})
	}
	require.NoError(t, c.Publish(context.Background(), recs, nil))
	out := s.ok("", "topic", "offsets", "ot", "--time", "2026-11-30T10:02:30Z")
	require.Contains(t, out, "PARTITION")
	require.Regexp(t, `(?m)^0\s+3$`, out)
	var js []pgmsg.PartitionOffset
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "topic", "offsets", "ot", "--time", "2026-11-30T09:00:00Z", "-o", "json")), &js))
	require.Equal(t, []pgmsg.PartitionOffset{{Partition: 0, Offset: 0}}, js)
	require.Contains(t, s.fail("", "topic", "offsets", "ot", "--time", "noon"), "RFC 3339")
	require.Contains(t, s.fail("", "topic", "offsets", "ot"), "time")
}
