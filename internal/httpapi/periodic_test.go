package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// Periodic jobs over HTTP: add, replace, list, remove, and the errors
// (item 1).
func TestPeriodicJobsHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateQueue(tb.ctx, "pq", pgmsg.QueueConfig{})
	require.NoError(t, err)
	claimer := tb.token(t, "claimer", "claim:pq")
	body := map[string]any{"schedule": "0 7 * * MON-FRI", "time_zone": "Europe/Paris", "payload": map[string]any{"r": 1},
		"kind": "report", "timeout": "1m", "tags": []string{"daily"}, "metadata": map[string]any{"team": "ops"}}
	require.Equal(t, http.StatusForbidden, tb.do(t, http.MethodPut, "/v1/queues/pq/periodic/report", claimer, body).status)

	r := tb.do(t, http.MethodPut, "/v1/queues/pq/periodic/report", tb.admin, body)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var p wire.PeriodicJobJSON
	r.json(t, &p)
	require.Equal(t, "report", p.Name)
	require.Equal(t, "0 7 * * MON-FRI", p.Schedule)
	require.Equal(t, "Europe/Paris", p.TimeZone)
	require.JSONEq(t, `{"r":1}`, string(p.Payload))
	require.Equal(t, "json", p.PayloadEncoding)
	require.Equal(t, "1m0s", p.Timeout)
	require.Equal(t, []string{"daily"}, p.Tags)
	require.False(t, p.NextRunAt.IsZero())
	require.Nil(t, p.LastRunAt)

	var list struct {
		Queue        string                 `json:"queue"`
		PeriodicJobs []wire.PeriodicJobJSON `json:"periodic_jobs"`
	}
	tb.do(t, http.MethodGet, "/v1/queues/pq/periodic?encoding=base64", tb.admin, nil).json(t, &list)
	require.Len(t, list.PeriodicJobs, 1)
	require.Equal(t, "base64", list.PeriodicJobs[0].PayloadEncoding)

	for _, tc := range []struct {
		path   string
		body   map[string]any
		status int
		code   string
	}{
		{"/v1/queues/pq/periodic/x", map[string]any{}, http.StatusBadRequest, "invalid_parameter"},
		{"/v1/queues/pq/periodic/x", map[string]any{"schedule": "every day"}, http.StatusBadRequest, "invalid_schedule"},
		{"/v1/queues/pq/periodic/x", map[string]any{"schedule": "@daily", "time_zone": "Mars/Olympus"}, http.StatusBadRequest, "invalid_schedule"},
		{"/v1/queues/pq/periodic/x", map[string]any{"schedule": "@daily", "priority": 99999}, http.StatusBadRequest, "invalid_argument"},
		{"/v1/queues/pq/periodic/x", map[string]any{"schedule": "@daily", "timeout": "-1s"}, http.StatusBadRequest, "malformed_json"},
		{"/v1/queues/pq/periodic/x", map[string]any{"schedule": "@daily", "extra": 1}, http.StatusBadRequest, "malformed_json"},
		{"/v1/queues/pq/periodic/bad%20name", map[string]any{"schedule": "@daily"}, http.StatusBadRequest, "invalid_name"},
		{"/v1/queues/nope/periodic/x", map[string]any{"schedule": "@daily"}, http.StatusNotFound, "unknown_queue"},
	} {
		r := tb.do(t, http.MethodPut, tc.path, tb.admin, tc.body)
		require.Equal(t, tc.status, r.status, "%s %v: %s", tc.path, tc.body, r.body)
		require.Equal(t, tc.code, r.errorCode(t), "%s %v", tc.path, tc.body)
	}
	tb.do(t, http.MethodGet, "/v1/queues/pq/periodic", tb.admin, nil).json(t, &list)
	require.Len(t, list.PeriodicJobs, 1, "nothing refused was stored")

	r = tb.do(t, http.MethodDelete, "/v1/queues/pq/periodic/report", tb.admin, nil)
	require.Equal(t, http.StatusNoContent, r.status, string(r.body))
	r = tb.do(t, http.MethodDelete, "/v1/queues/pq/periodic/report", tb.admin, nil)
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "unknown_periodic_job", r.errorCode(t))
	r = tb.do(t, http.MethodGet, "/v1/queues/nope/periodic", tb.admin, nil)
	require.Equal(t, http.StatusNotFound, r.status)
}
