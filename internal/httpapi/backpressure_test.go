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
