package httpapi

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// The names a consume or claim gives of its claimant are bounded: a
// consume's member is a name (as in its heartbeat), a claim's worker at
// most WorkerMaxBytes of text; 300 KB of either was stored before.
func TestClaimantNamesBounded(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	_, err := tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{})
	require.NoError(t, err)
	_, err = tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Payload: []byte(`1`)}, nil)
	require.NoError(t, err)
	long := strings.Repeat("w", 100000)
	for _, c := range []struct{ path, code string }{
		{"/v1/pubsub/consume?topic=t&group=g&member=" + long, "invalid_name"},
		{"/v1/pubsub/consume?topic=t&group=g&member=" + url.QueryEscape("a b"), "invalid_name"},
		{"/v1/queue/claim?queue=q&worker=" + long, "invalid_parameter"},
		{"/v1/queue/claim?queue=q&worker=" + strings.Repeat("w", WorkerMaxBytes+1), "invalid_parameter"},
		{"/v1/queue/claim?queue=q&worker=" + url.QueryEscape("a\nb"), "invalid_parameter"},
		{"/v1/queue/claim?queue=q&worker=%ff", "invalid_parameter"},
	} {
		res := tb.do(t, http.MethodGet, c.path, tb.admin, nil)
		require.Equal(t, http.StatusBadRequest, res.status, "%.80s: %s", c.path, res.body)
		require.Equal(t, c.code, res.errorCode(t), "%.80s", c.path)
	}
	// Nothing was leased by the refused claims.
	st, err := tb.client.QueueStats(tb.ctx, "q")
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Available)
	// At the bound, and free text: served.
	worker := strings.Repeat("é", WorkerMaxBytes/2)
	res := tb.do(t, http.MethodGet, "/v1/queue/claim?queue=q&worker="+url.QueryEscape(worker), tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res = tb.do(t, http.MethodGet, "/v1/queue/claim?queue=q&worker="+url.QueryEscape("worker 7 @ host:1"), tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g&member=m-1.a_b", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
}
