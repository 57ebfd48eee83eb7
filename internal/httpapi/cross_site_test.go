package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// A page of another site cannot drive a server without auth: an <img>
// GET of consume with auto_commit, or of claim with a year's lease, sends
// no Origin, but every current browser sends Sec-Fetch-Site. A
// state-changing request that says it comes from another site or origin
// is refused and changes nothing; reads, and clients that are not
// browsers, are served as before.
func TestCrossSiteStateChangeRefused(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{InsecureNoAuth: true})
	tb.topic(t, "demo", 1)
	_, err := tb.client.CreateQueue(tb.ctx, "emails", pgmsg.QueueConfig{})
	require.NoError(t, err)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "demo", Value: []byte(`1`)}}, nil))
	_, err = tb.client.Enqueue(tb.ctx, "emails", pgmsg.EnqueueParams{Payload: []byte(`{}`)}, nil)
	require.NoError(t, err)

	consume := "/v1/pubsub/consume?topic=demo&group=audit&auto_commit=true"
	claim := "/v1/queue/claim?queue=emails&lease=8784h"
	for _, site := range []string{"cross-site", "same-site", "CROSS-SITE", "bogus"} {
		for _, c := range []struct{ method, path, body string }{
			{http.MethodGet, consume, ""},
			{http.MethodGet, "/pubsub/consume?topic=demo&group=audit&auto_commit=true", ""},
			{http.MethodGet, claim, ""},
			{http.MethodGet, "/queue/claim?queue=emails&lease=8784h", ""},
			{http.MethodPost, "/v1/pubsub/publish", `{"topic":"demo","records":[{"value":2}]}`},
			{http.MethodPost, "/v1/queues/emails/pause", ""},
		} {
			h := map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}
			if c.body != "" {
				h["Content-Type"] = "application/json"
			}
			status, code := tb.rawRequest(t, c.method, c.path, h, c.body)
			require.Equal(t, http.StatusForbidden, status, "%s %s, Sec-Fetch-Site %s", c.method, c.path, site)
			require.Equal(t, "cross_site_request", code)
		}
	}
	// HEAD runs the GET's handler: refused too (no body to read).
	req, err := http.NewRequestWithContext(tb.ctx, http.MethodHead, tb.ts.URL+consume, nil)
	require.NoError(t, err)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	res, err := tb.ts.Client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	// Nothing was committed, leased, published or paused.
	gs, err := tb.client.ListGroups(tb.ctx, "demo", "")
	require.NoError(t, err)
	for _, g := range gs {
		require.Zero(t, g.NextOffset, "group %s committed", g.Group)
		require.Empty(t, g.ClaimOwner, "group %s claimed", g.Group)
	}
	st, err := tb.client.QueueStats(tb.ctx, "emails")
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Available)
	require.Zero(t, st.Running)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "emails", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1, "the queue was paused or the job leased")
	d, err := tb.client.DescribeTopic(tb.ctx, "demo")
	require.NoError(t, err)
	require.EqualValues(t, 1, d.PartitionInfo[0].NextOffset)

	// Reads from another site are answered (a page cannot read them
	// without CORS, which the API does not send).
	status, _ := tb.rawRequest(t, http.MethodGet, "/v1/topics", map[string]string{"Sec-Fetch-Site": "cross-site"}, "")
	require.Equal(t, http.StatusOK, status)
	// The page's own origin, the address bar and non-browsers are served.
	for _, h := range []map[string]string{{"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, {}} {
		status, _ := tb.rawRequest(t, http.MethodGet, "/v1/pubsub/consume?topic=demo&group=g"+h["Sec-Fetch-Site"], h, "")
		require.Equal(t, http.StatusOK, status, "%v", h)
	}
}
