package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

func TestPauseQueueHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.Enqueue(tb.ctx, "pq", pgmsg.EnqueueParams{Payload: []byte(`{}`)}, nil)
	require.NoError(t, err)
	claimer := tb.token(t, "claimer", "claim:pq")
	require.Equal(t, http.StatusForbidden, tb.do(t, http.MethodPost, "/v1/queues/pq/pause", claimer, nil).status)

	r := tb.do(t, http.MethodPost, "/v1/queues/pq/pause", tb.admin, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var st pgmsg.QueueStats
	tb.do(t, http.MethodGet, "/v1/queues/pq", tb.admin, nil).json(t, &st)
	require.True(t, st.Paused)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "pq", nil)
	require.NoError(t, err)
	require.Empty(t, jobs)

	r = tb.do(t, http.MethodPost, "/v1/queues/pq/resume", tb.admin, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	tb.do(t, http.MethodGet, "/v1/queues/pq", tb.admin, nil).json(t, &st)
	require.False(t, st.Paused)
	jobs, err = tb.client.ClaimJobs(tb.ctx, "pq", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)

	r = tb.do(t, http.MethodPost, "/v1/queues/nope/pause", tb.admin, nil)
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "unknown_queue", r.errorCode(t))
	r = tb.do(t, http.MethodPost, "/v1/queues/bad%20name/resume", tb.admin, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
}
