package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// Request metrics must not grow with what a client sends. Every
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

// The 409 of an ack, fail or extend with a token that does not
// hold the job names no lease token, and guessed tokens are refused.
func TestJobNotHeldDoesNotRevealLeaseToken(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, `{"queue":"q","jobs":[{"payload":1}]}`).status)
	var claimed struct {
		Jobs []wire.JobJSON `json:"jobs"`
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

// oddValues are stored values that are not portable JSON, each with the
// encoding a JSON answer must use for it, and portable ones for contrast.
var oddValues = []struct {
	value []byte
	auto  string // encoding with encoding=auto
	json  string // encoding with encoding=json
}{
	{[]byte("\"a\xffb\""), wire.EncodingBase64, wire.EncodingBase64},                 // JSON syntax, not UTF-8
	{[]byte("\xff\xfe"), wire.EncodingBase64, wire.EncodingBase64},                   // binary
	{[]byte(`"\ud800"`), wire.EncodingText, wire.EncodingBase64},                     // lone high surrogate escape
	{[]byte(`["x\udc00"]`), wire.EncodingText, wire.EncodingBase64},                  // lone low surrogate escape
	{[]byte(`"\ud800\u0041"`), wire.EncodingText, wire.EncodingBase64},               // high surrogate then not a low one
	{[]byte(`{"a":"\ud83d\ude00","b":[1,2]}`), wire.EncodingJSON, wire.EncodingJSON}, // a valid pair
	{[]byte(`{"a":"\\ud800"}`), wire.EncodingJSON, wire.EncodingJSON},                // an escaped backslash, not an escape
	{[]byte(`"caf\u00e9 é"`), wire.EncodingJSON, wire.EncodingJSON},
	{[]byte("plain text"), wire.EncodingText, wire.EncodingBase64},
}

// requirePortableJSON fails unless body is valid UTF-8 JSON without a lone
// surrogate escape: what Python, jq and serde all accept.
func requirePortableJSON(t *testing.T, body []byte) {
	t.Helper()
	require.True(t, utf8.Valid(body), "body is not UTF-8: %q", body)
	require.True(t, json.Valid(body), "body is not JSON: %q", body)
	for _, bad := range []string{`\ud800`, `\udc00`} {
		require.NotContains(t, strings.ReplaceAll(string(body), `\\`, ""), bad, "lone surrogate in %s", body)
	}
}

// A consume answer stays valid UTF-8 JSON whatever bytes the
// records hold; values that are not portable JSON go base64 (or text).
func TestConsumeAnswerIsValidUTF8JSON(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	var recs []*pgmsg.Record
	for _, v := range oddValues {
		recs = append(recs, &pgmsg.Record{Topic: "t", Value: v.value, Key: []byte("k\xff"),
			Headers: map[string][]byte{"h": []byte("\xfe\xff")}})
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))
	for _, enc := range []string{wire.EncodingAuto, wire.EncodingJSON} {
		res := tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g-"+enc+"&max_records=100&encoding="+enc, tb.admin, nil)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		requirePortableJSON(t, res.body)
		var out ConsumeResponse
		res.json(t, &out)
		require.Len(t, out.Records, len(oddValues))
		for i, r := range out.Records {
			want := oddValues[i].auto
			if enc == wire.EncodingJSON {
				want = oddValues[i].json
			}
			require.Equal(t, want, r.ValueEncoding, "value %q with encoding=%s", oddValues[i].value, enc)
			requireDecodes(t, oddValues[i].value, r.Value, r.ValueEncoding)
			require.Equal(t, wire.EncodingBase64, r.KeyEncoding)
			require.Equal(t, wire.EncodingBase64, r.HeadersEncoding)
		}
	}
}

// The same for job payloads in a claim answer.
func TestClaimAnswerIsValidUTF8JSON(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for _, v := range oddValues {
		_, err := tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Payload: v.value}, nil)
		require.NoError(t, err)
	}
	res := tb.do(t, http.MethodGet, "/v1/queue/claim?queue=q&max=100", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	requirePortableJSON(t, res.body)
	var out struct {
		Jobs []wire.JobJSON `json:"jobs"`
	}
	res.json(t, &out)
	require.Len(t, out.Jobs, len(oddValues))
	for _, j := range out.Jobs {
		i := int(j.ID) - 1 // ids follow enqueue order in a fresh schema
		require.Equal(t, oddValues[i].auto, j.PayloadEncoding, "payload %q", oddValues[i].value)
		requireDecodes(t, oddValues[i].value, j.Payload, j.PayloadEncoding)
	}
}

// requireDecodes checks that raw, read with enc, gives back stored.
func requireDecodes(t *testing.T, stored []byte, raw json.RawMessage, enc string) {
	t.Helper()
	switch enc {
	case wire.EncodingJSON:
		require.Equal(t, string(stored), string(raw))
	case wire.EncodingText:
		var s string
		require.NoError(t, json.Unmarshal(raw, &s))
		require.Equal(t, string(stored), s)
	case wire.EncodingBase64:
		var s string
		require.NoError(t, json.Unmarshal(raw, &s))
		b, err := base64.StdEncoding.DecodeString(s)
		require.NoError(t, err)
		require.Equal(t, stored, b)
	default:
		t.Fatalf("unknown encoding %q", enc)
	}
}

// rawRequest sends a request with the given headers (Host set via
// req.Host) and returns its status and error code ("" on success).
func (tb *testBundle) rawRequest(t *testing.T, method, path string, headers map[string]string, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(tb.ctx, method, tb.ts.URL+path, rd)
	require.NoError(t, err)
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := tb.ts.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	r := response{status: res.StatusCode, header: res.Header, body: raw}
	if r.status < 300 {
		return r.status, ""
	}
	return r.status, r.errorCode(t)
}

// A body must be declared JSON. The content types a browser may
// send cross-site without a CORS preflight (form encodings, text/plain, or
// none) get 415, with or without auth, and write nothing.
func TestBodyMustBeJSON(t *testing.T) {
	t.Parallel()
	for _, noAuth := range []bool{false, true} {
		t.Run(fmt.Sprintf("InsecureNoAuth=%v", noAuth), func(t *testing.T) {
			t.Parallel()
			tb := setup(t, &Config{InsecureNoAuth: noAuth})
			tb.topic(t, "t", 1)
			publish := `{"topic":"t","records":[{"value":1}]}`
			for _, ct := range []string{"", "application/x-www-form-urlencoded", "text/plain", "text/plain;charset=UTF-8",
				"multipart/form-data; boundary=x", "application/jsonx", "json", "application/json;;"} {
				h := map[string]string{"Authorization": "Bearer " + tb.admin}
				if ct != "" {
					h["Content-Type"] = ct
				}
				status, code := tb.rawRequest(t, http.MethodPost, "/v1/pubsub/publish", h, publish)
				require.Equal(t, http.StatusUnsupportedMediaType, status, "Content-Type %q", ct)
				require.Equal(t, "unsupported_media_type", code, "Content-Type %q", ct)
				// Also on an admin route that reads no body.
				status, code = tb.rawRequest(t, http.MethodDelete, "/v1/topics/t", h, `topic=t`)
				require.Equal(t, http.StatusUnsupportedMediaType, status, "Content-Type %q", ct)
				require.Equal(t, "unsupported_media_type", code)
			}
			tb.requireNothingWritten(t, "t")
			for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON"} {
				status, _ := tb.rawRequest(t, http.MethodPost, "/v1/pubsub/publish",
					map[string]string{"Authorization": "Bearer " + tb.admin, "Content-Type": ct}, publish)
				require.Equal(t, http.StatusOK, status, "Content-Type %q", ct)
			}
			// Requests without a body need no content type.
			status, _ := tb.rawRequest(t, http.MethodGet, "/v1/topics", map[string]string{"Authorization": "Bearer " + tb.admin}, "")
			require.Equal(t, http.StatusOK, status)
		})
	}
}

// Without auth, only loopback Hosts (no DNS rebinding) and
// loopback Origins (no cross-site page) are served; others get 403.
func TestInsecureNoAuthLocalOnly(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{InsecureNoAuth: true})
	tb.topic(t, "t", 1)
	port := tb.ts.URL[strings.LastIndex(tb.ts.URL, ":")+1:]
	json := map[string]string{"Content-Type": "application/json"}
	with := func(extra map[string]string) map[string]string {
		h := map[string]string{"Content-Type": "application/json"}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	publish := `{"topic":"t","records":[{"value":1}]}`
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.nip.io:" + port, "localhost.evil.example",
		"10.0.0.1:" + port, "0.0.0.0:" + port, "[::ffff:10.0.0.1]:" + port} {
		status, code := tb.rawRequest(t, http.MethodPost, "/v1/pubsub/publish", with(map[string]string{"Host": host}), publish)
		require.Equal(t, http.StatusForbidden, status, "Host %q", host)
		require.Equal(t, "host_not_allowed", code, "Host %q", host)
		status, code = tb.rawRequest(t, http.MethodGet, "/v1/topics", map[string]string{"Host": host}, "")
		require.Equal(t, http.StatusForbidden, status, "Host %q", host)
		require.Equal(t, "host_not_allowed", code)
	}
	for _, origin := range []string{"http://evil.example", "https://evil.example:" + port, "null", "file://", "http://localhost.evil.example",
		"http://127.0.0.1.nip.io", "chrome-extension://abc"} {
		status, code := tb.rawRequest(t, http.MethodPost, "/v1/pubsub/publish", with(map[string]string{"Origin": origin}), publish)
		require.Equal(t, http.StatusForbidden, status, "Origin %q", origin)
		require.Equal(t, "origin_not_allowed", code, "Origin %q", origin)
	}
	tb.requireNothingWritten(t, "t")

	for _, host := range []string{"localhost:" + port, "LOCALHOST:" + port, "127.0.0.1:" + port, "[::1]:" + port, "localhost", "127.0.0.2:" + port} {
		status, _ := tb.rawRequest(t, http.MethodPost, "/v1/pubsub/publish", with(map[string]string{"Host": host}), publish)
		require.Equal(t, http.StatusOK, status, "Host %q", host)
	}
	for _, origin := range []string{"http://localhost:3000", "http://127.0.0.1:" + port, "http://[::1]:8080", "https://localhost"} {
		status, _ := tb.rawRequest(t, http.MethodPost, "/v1/pubsub/publish", with(map[string]string{"Origin": origin}), publish)
		require.Equal(t, http.StatusOK, status, "Origin %q", origin)
	}
	status, _ := tb.rawRequest(t, http.MethodPost, "/v1/pubsub/publish", json, publish)
	require.Equal(t, http.StatusOK, status)
}

// With auth, the Host and Origin are not checked: tokens protect the API
// and it may be served under any name.
func TestAuthServesAnyHost(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	status, _ := tb.rawRequest(t, http.MethodGet, "/v1/topics",
		map[string]string{"Authorization": "Bearer " + tb.admin, "Host": "pgmsg.example:443", "Origin": "https://app.example"}, "")
	require.Equal(t, http.StatusOK, status)
}
