package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// unique_for on POST /v1/queue/enqueue (issue 19, item 7).
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
