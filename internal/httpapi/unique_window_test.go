package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// unique_for on POST /v1/queue/enqueue (item 7).
func TestUniqueWindowHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	type result struct {
		Jobs []struct {
			ID        int64  `json:"id"`
			Duplicate bool   `json:"duplicate"`
			State     string `json:"state"`
		} `json:"jobs"`
	}
	body := map[string]any{"queue": "uw", "jobs": []map[string]any{{"payload": 1, "unique_key": "sync-42", "unique_for": "8784h"}}}
	var first, second result
	tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, body).json(t, &first)
	require.False(t, first.Jobs[0].Duplicate)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "uw", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.True(t, strings.HasPrefix(jobs[0].UniqueKey, "sync-42@"), jobs[0].UniqueKey)
	require.NoError(t, tb.client.Complete(tb.ctx, jobs[0]))
	tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, body).json(t, &second)
	require.True(t, second.Jobs[0].Duplicate, "the window's completed job")
	require.Equal(t, first.Jobs[0].ID, second.Jobs[0].ID)
	require.Equal(t, "completed", second.Jobs[0].State)

	for _, j := range []map[string]any{
		{"payload": 1, "unique_for": "1h"},
		{"payload": 1, "unique_key": "k", "unique_for": "0s"},
		{"payload": 1, "unique_key": "k", "unique_for": "100ms"},
	} {
		r := tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, map[string]any{"queue": "uw", "jobs": []map[string]any{j}})
		require.Equal(t, http.StatusBadRequest, r.status, "%v: %s", j, r.body)
	}
}

// rate_limit and max_running in the queue settings (item 8).
func TestQueueLimitsHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	var q QueueSettings
	r := tb.do(t, http.MethodPost, "/v1/queues", tb.admin, map[string]any{"name": "lim", "rate_limit": 2.5, "max_running": 3})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	r.json(t, &q)
	require.Equal(t, 2.5, *q.RateLimit)
	require.Equal(t, 3, *q.MaxRunning)
	q = QueueSettings{}
	tb.do(t, http.MethodPatch, "/v1/queues/lim", tb.admin, map[string]any{"rate_limit": 0}).json(t, &q)
	require.Zero(t, *q.RateLimit, "0 removes it")
	require.Equal(t, 3, *q.MaxRunning)
	q = QueueSettings{}
	tb.do(t, http.MethodPatch, "/v1/queues/lim", tb.admin, map[string]any{"max_running": 0}).json(t, &q)
	require.Zero(t, *q.MaxRunning)
	for _, body := range []map[string]any{{"rate_limit": -1}, {"rate_limit": 2e6}, {"max_running": -1}, {"max_running": -2}, {"max_depth": -1}} {
		r := tb.do(t, http.MethodPatch, "/v1/queues/lim", tb.admin, body)
		require.Equal(t, http.StatusBadRequest, r.status, "%v: %s", body, r.body)
	}
}

// GET /v1/topics/{topic}/offsets?time= (item 5).
func TestOffsetsForTimeHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "ot", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var recs []*pgmsg.Record
	for i := range 10 {
		recs = append(recs, &pgmsg.Record{Topic: "ot", Partition: int32(i % 2), Value: []byte("x"), Timestamp: base.Add(time.Duration(i) * time.Minute)})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	var resp struct {
		Topic   string                  `json:"topic"`
		Offsets []pgmsg.PartitionOffset `json:"offsets"`
	}
	r := tb.do(t, http.MethodGet, "/v1/topics/ot/offsets?time=2026-11-30T10:03:30Z", tb.admin, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	r.json(t, &resp)
	// Partition 0 holds minutes 0, 2, 4, 6, 8; partition 1 minutes 1, 3, 5, 7, 9.
	require.Equal(t, []pgmsg.PartitionOffset{{Partition: 0, Offset: 2}, {Partition: 1, Offset: 2}}, resp.Offsets)
	tb.do(t, http.MethodGet, "/v1/topics/ot/offsets?time=2030-01-01T00:00:00Z", tb.admin, nil).json(t, &resp)
	require.Equal(t, []pgmsg.PartitionOffset{{Partition: 0, Offset: 5}, {Partition: 1, Offset: 5}}, resp.Offsets, "past the end")
	require.Equal(t, http.StatusBadRequest, tb.do(t, http.MethodGet, "/v1/topics/ot/offsets", tb.admin, nil).status)
	require.Equal(t, http.StatusBadRequest, tb.do(t, http.MethodGet, "/v1/topics/ot/offsets?time=yesterday", tb.admin, nil).status)
	require.Equal(t, http.StatusNotFound, tb.do(t, http.MethodGet, "/v1/topics/nope/offsets?time=2026-11-30T10:03:30Z", tb.admin, nil).status)
}
