package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// The same idempotent body sent twice stores its records once and answers
// with the same positions (item 1).
func TestPublishIdempotentHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "idem", 3)
	body := map[string]any{
		"topic": "idem", "producer_id": "http-1", "sequence": 10,
		"records": []map[string]any{{"key": "a", "value": 1}, {"value": 2}, {"key": "b", "value": 3}, {"key": "c", "value": 4}},
	}
	var first, again PublishResponse
	r := tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, body)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	r.json(t, &first)
	require.False(t, first.Duplicate)
	r = tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, body)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	r.json(t, &again)
	require.True(t, again.Duplicate)
	require.Equal(t, first.Records, again.Records)

	d, err := tb.client.DescribeTopic(tb.ctx, "idem")
	require.NoError(t, err)
	var n int64
	for _, p := range d.PartitionInfo {
		n += p.NextOffset
	}
	require.Equal(t, int64(4), n, "stored once")

	// An earlier sequence is refused; the fields go together.
	body["sequence"] = 5
	r = tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, body)
	require.Equal(t, http.StatusConflict, r.status, string(r.body))
	require.Equal(t, "out_of_order_sequence", r.errorCode(t))
	delete(body, "sequence")
	r = tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, body)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "invalid_parameter", r.errorCode(t))
	body["sequence"] = -1
	r = tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, body)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "invalid_argument", r.errorCode(t))
}
