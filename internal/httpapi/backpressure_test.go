package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// A publish to a topic whose slowest group is too far behind gets 429 with
// Retry-After and the stable error body, and writes nothing.
func TestPublishBackpressure429(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "bp", pgmsg.TopicConfig{Partitions: 1,
		Settings: map[string]any{"max_lag_records": 2, "backpressure_timeout_ms": 0}})
	require.NoError(t, err)
	_, err = tb.client.CreateGroup(tb.ctx, "bp", "slow", pgmsg.PositionEarliest)
	require.NoError(t, err)
	body := map[string]any{"topic": "bp", "records": []map[string]any{{"value": "a"}, {"value": "b"}}}
	res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, body)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res = tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, map[string]any{"topic": "bp", "records": []map[string]any{{"value": "c"}}})
	require.Equal(t, http.StatusTooManyRequests, res.status, "%s", res.body)
	require.Equal(t, "backpressure", res.errorCode(t))
	require.NotEmpty(t, res.header.Get("Retry-After"))
	d, err := tb.client.DescribeTopic(tb.ctx, "bp")
	require.NoError(t, err)
	require.Equal(t, int64(2), d.PartitionInfo[0].NextOffset)
}

// The same for a topic whose limit is in bytes (max_lag_bytes).
func TestPublishByteBackpressure429(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "bpb", pgmsg.TopicConfig{Partitions: 1,
		Settings: map[string]any{"max_lag_bytes": 8, "backpressure_timeout_ms": 0}})
	require.NoError(t, err)
	_, err = tb.client.CreateGroup(tb.ctx, "bpb", "slow", pgmsg.PositionEarliest)
	require.NoError(t, err)
	body := map[string]any{"topic": "bpb", "encoding": "text", "records": []map[string]any{{"key": "k", "value": "1234567"}}}
	res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, body)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res = tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, map[string]any{"topic": "bpb", "encoding": "text",
		"records": []map[string]any{{"value": "x"}}})
	require.Equal(t, http.StatusTooManyRequests, res.status, "%s", res.body)
	require.Equal(t, "backpressure", res.errorCode(t))
	require.Contains(t, string(res.body), "max_lag_bytes 8")
	require.NotEmpty(t, res.header.Get("Retry-After"))
}

// An enqueue to a queue at its max_depth gets 429 with Retry-After and
// the stable error body, and writes nothing.
func TestEnqueueQueueFull429(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateQueue(tb.ctx, "capped", pgmsg.QueueConfig{MaxDepth: 2, BackpressureTimeout: pgmsg.QueueBackpressureNoWait})
	require.NoError(t, err)
	body := map[string]any{"queue": "capped", "jobs": []map[string]any{{"payload": map[string]any{"n": 1}}, {"payload": map[string]any{"n": 2}}}}
	res := tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, body)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res = tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, map[string]any{"queue": "capped",
		"jobs": []map[string]any{{"payload": map[string]any{"n": 3}}}})
	require.Equal(t, http.StatusTooManyRequests, res.status, "%s", res.body)
	require.Equal(t, "queue_full", res.errorCode(t))
	require.NotEmpty(t, res.header.Get("Retry-After"))
	st, err := tb.client.QueueStats(tb.ctx, "capped")
	require.NoError(t, err)
	require.Equal(t, int64(2), st.Available)
}
