package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 14: request metrics must not grow with what a client sends. Every
// label value must come from a bounded set, whatever the methods and paths.
func TestMetricsLabelsBounded(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	series := func() map[string]int {
		mfs, err := tb.server.metrics.registry.Gather()
		require.NoError(t, err)
		n := map[string]int{}
		for _, mf := range mfs {
			switch mf.GetName() {
			case "pgmsg_http_requests_total", "pgmsg_http_request_duration_seconds", "pgmsg_published_records_total",
				"pgmsg_consumed_records_total", "pgmsg_enqueued_jobs_total", "pgmsg_claimed_jobs_total":
			default:
				continue // the state metrics name what the database holds
			}
			n[mf.GetName()] = len(mf.GetMetric())
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					require.NotContains(t, l.GetValue(), "ODD", "label %s of %s", l.GetName(), mf.GetName())
					require.NotContains(t, l.GetValue(), "odd", "label %s of %s", l.GetName(), mf.GetName())
				}
			}
		}
		return n
	}
	send := func(i int) {
		method := fmt.Sprintf("ODD%dMETHOD", i)
		for _, path := range []string{
			fmt.Sprintf("/odd/%d", i),          // unmatched
			fmt.Sprintf("/v1/topics/odd%d", i), // a pattern, wrong method (405)
			fmt.Sprintf("/healthz?odd=%d", i),  // a fixed route, wrong method
			fmt.Sprintf("/v1/queue/claim?queue=odd%d", i),
		} {
			res := tb.do(t, method, path, "", nil)
			require.Contains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, res.status, "%s %s", method, path)
		}
		// Known methods on paths that name things that do not exist.
		tb.do(t, http.MethodGet, fmt.Sprintf("/odd/%d", i), "", nil)
		tb.do(t, http.MethodGet, fmt.Sprintf("/v1/queue/claim?queue=odd%d", i), tb.admin, nil)
		tb.do(t, http.MethodGet, fmt.Sprintf("/v1/pubsub/consume?topic=odd%d&group=odd%d", i, i), tb.admin, nil)
	}
	for i := 0; i < 5; i++ {
		send(i)
	}
	before := series()
	for i := 5; i < 60; i++ {
		send(i)
	}
	after := series()
	require.Equal(t, before, after, "distinct methods and paths added series")
	require.Contains(t, string(tb.do(t, http.MethodGet, "/metrics", "", nil).body),
		`pgmsg_http_requests_total{method="other",route="unmatched",status="404"}`)
}

func TestMethodLabel(t *testing.T) {
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"} {
		require.Equal(t, m, methodLabel(m))
	}
	for _, m := range []string{"get", "CONNECT", "TRACE", "PROPFIND", strings.Repeat("X", 1<<20), ""} {
		require.Equal(t, "other", methodLabel(m))
	}
}

// Issue 14: the 409 of an ack, fail or extend with a token that does not
// hold the job names no lease token, and guessed tokens are refused.
func TestJobNotHeldDoesNotRevealLeaseToken(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, `{"queue":"q","jobs":[{"payload":1}]}`).status)
	var claimed struct {
		Jobs []JobJSON `json:"jobs"`
	}
	res := tb.do(t, http.MethodGet, "/v1/queue/claim?queue=q", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	res.json(t, &claimed)
	require.Len(t, claimed.Jobs, 1)
	j := claimed.Jobs[0]
	require.Greater(t, j.LeaseToken, int64(1)<<32, "lease token %d is guessable", j.LeaseToken)
	live := fmt.Sprint(j.LeaseToken)
	for _, path := range []string{"/v1/queue/ack", "/v1/queue/fail", "/v1/queue/extend"} {
		for _, guess := range []int64{1, 2, j.LeaseToken - 1} {
			res := tb.do(t, http.MethodPost, path, tb.admin, map[string]any{"queue": "q", "id": j.ID, "lease_token": guess})
			require.Equal(t, http.StatusConflict, res.status, "%s: %s", path, res.body)
			require.Equal(t, "job_not_held", res.errorCode(t))
			require.NotContains(t, string(res.body), live, path)
		}
	}
	res = tb.do(t, http.MethodPost, "/v1/queue/ack", tb.admin, map[string]any{"queue": "q", "id": j.ID, "lease_token": j.LeaseToken})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
}
