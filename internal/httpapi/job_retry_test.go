package httpapi

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

func TestRetryJobHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res, err := tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Payload: []byte(`{}`), Delay: time.Hour}, nil)
	require.NoError(t, err)
	path := "/v1/jobs/" + strconv.FormatInt(res.ID, 10) + "/retry"
	claimer := tb.token(t, "claimer", "claim:q")
	require.Equal(t, http.StatusForbidden, tb.do(t, http.MethodPost, path, claimer, nil).status)

	r := tb.do(t, http.MethodPost, path, tb.admin, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var body struct {
		ID    int64  `json:"id"`
		State string `json:"state"`
	}
	r.json(t, &body)
	require.Equal(t, res.ID, body.ID)
	require.Equal(t, "available", body.State)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "q", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)

	r = tb.do(t, http.MethodPost, path, tb.admin, nil)
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, "job_not_waiting", r.errorCode(t))
	r = tb.do(t, http.MethodPost, "/v1/jobs/999999999/retry", tb.admin, nil)
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "unknown_job", r.errorCode(t))
	for _, bad := range []string{"abc", "0", "-1", "99999999999999999999"} {
		r = tb.do(t, http.MethodPost, "/v1/jobs/"+bad+"/retry", tb.admin, nil)
		require.Equal(t, http.StatusBadRequest, r.status, bad)
		require.Equal(t, "invalid_parameter", r.errorCode(t))
	}
}
