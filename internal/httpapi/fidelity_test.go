package httpapi

// Records and jobs read back over HTTP as they were written: regressions of
// what the HTTP property test (property_test.go) found.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// A record without a value was answered with value null and the request's
// encoding as value_encoding: "auto" (not an encoding: the document lists
// json, text and base64), or "json", which made it the same answer as a
// record whose value is the JSON text null.
func TestNoValueHasNoEncoding(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{
		{Topic: "t", Value: nil}, {Topic: "t", Value: []byte("null")}, {Topic: "t", Value: []byte{}},
	}, nil))
	for enc, want := range map[string][3]string{
		wire.EncodingAuto:   {"", wire.EncodingJSON, wire.EncodingText},
		wire.EncodingJSON:   {"", wire.EncodingJSON, wire.EncodingBase64},
		wire.EncodingText:   {"", wire.EncodingText, wire.EncodingText},
		wire.EncodingBase64: {"", wire.EncodingBase64, wire.EncodingBase64},
	} {
		res := tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g-"+enc+"&encoding="+enc, tb.admin, nil)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		var out struct {
			Records []map[string]json.RawMessage `json:"records"`
		}
		res.json(t, &out)
		require.Len(t, out.Records, 3)
		for i, r := range out.Records {
			got := ""
			if raw, ok := r["value_encoding"]; ok {
				require.NoError(t, json.Unmarshal(raw, &got))
				require.NotEmpty(t, got, "record %d, encoding %s: value_encoding is \"\"", i, enc)
			}
			require.Equal(t, want[i], got, "record %d, encoding %s: %s", i, enc, res.body)
		}
		require.Equal(t, "null", string(out.Records[0]["value"]))
	}
	// Job payloads likewise (the Go library stores a missing payload as
	// empty; a NULL one comes from SQL).
	for _, enc := range []string{wire.EncodingAuto, wire.EncodingJSON, wire.EncodingText, wire.EncodingBase64} {
		raw, err := json.Marshal(wire.EncodeJob(&pgmsg.Job{ID: 1, Queue: "q", Payload: nil}, enc))
		require.NoError(t, err)
		require.NotContains(t, string(raw), "payload_encoding", enc)
		require.Contains(t, string(raw), `"payload":null`, enc)
	}
}

// An HTTP publish's timestamp: the zero instant (0001-01-01T00:00:00Z,
// within the documented range) was silently replaced by the publish time,
// because the library reads the zero time as "none"; now it is refused.
// And a timestamp finer than microseconds was answered as sent, while the
// record was stored (and consumed) truncated to microseconds.
func TestPublishTimestampHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	for _, ts := range []string{"0001-01-01T00:00:00Z", "0001-01-01T01:30:00+01:30", "0000-12-31T23:00:00-01:00"} {
		res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin,
			`{"topic":"t","records":[{"value":1},{"value":2,"timestamp":"`+ts+`"}]}`)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", ts, res.body)
		require.Equal(t, "invalid_argument", res.errorCode(t))
	}
	tb.requireNothingWritten(t, "t")

	sent := []string{"2026-01-02T03:04:05.123456789Z", "2026-01-02T03:04:05.999999999+05:00", "0001-01-01T00:00:00.000000001Z",
		"0001-01-01T00:00:00.000001Z", "9999-12-31T23:59:59.999999999Z"}
	var recs []string
	for _, ts := range sent {
		recs = append(recs, `{"value":1,"timestamp":"`+ts+`"}`)
	}
	res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, `{"topic":"t","records":[`+strings.Join(recs, ",")+`]}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var pub PublishResponse
	res.json(t, &pub)
	res = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var cons ConsumeResponse
	res.json(t, &cons)
	require.Len(t, cons.Records, len(sent))
	for i, ts := range sent {
		want, err := time.Parse(time.RFC3339Nano, ts)
		require.NoError(t, err)
		want = want.Truncate(time.Microsecond)
		require.True(t, pub.Records[i].Timestamp.Equal(want), "%s: publish answered %s", ts, pub.Records[i].Timestamp)
		require.True(t, cons.Records[i].Timestamp.Equal(want), "%s: consume answered %s", ts, cons.Records[i].Timestamp)
	}
}

// http.ServeMux redirected a path with a "." or ".." segment to its clean
// form, another resource: deleting group ".." of topic t (a valid group
// name, created by a consume) sent a client that follows redirects, as Go's
// and curl -L do, to DELETE /v1/topics/t, and the topic went with all its
// records. Such paths are now a 404, never a redirect.
func TestUncleanPathIsNotRedirected(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "t", Value: []byte("1")}}, nil))
	res := tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=..&auto_commit=true", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))

	// tb.do's client follows redirects.
	for _, c := range []struct{ method, path string }{
		{http.MethodDelete, "/v1/topics/t/groups/.."},
		{http.MethodDelete, "/v1/topics/t/groups/%2E%2E"},
		{http.MethodGet, "/v1/topics/t/groups/.."},
		{http.MethodDelete, "/v1/topics/./t"},
		{http.MethodDelete, "/v1//topics/t"},
		{http.MethodPost, "/v1/queues/../topics"},
	} {
		res := tb.do(t, c.method, c.path, tb.admin, nil)
		require.Equal(t, http.StatusNotFound, res.status, "%s %s: %s", c.method, c.path, res.body)
		require.Equal(t, "not_found", res.errorCode(t), "%s %s", c.method, c.path)
	}
	d, err := tb.client.DescribeTopic(tb.ctx, "t")
	require.NoError(t, err, "the topic is gone")
	require.Equal(t, int64(1), d.PartitionInfo[0].NextOffset)
	gs, err := tb.client.ListGroups(tb.ctx, "t", "..")
	require.NoError(t, err)
	require.Len(t, gs, 1, "group .. is still there")
}

// encoding/json parses a timestamp offset such as +24:00 that it cannot
// write back. The publish answer echoed the timestamp as given, so a
// publish with one stored its records and then answered 500 (the client,
// seeing a failure, would publish them again). Timestamps are now taken in
// UTC, as every read gives them.
func TestPublishTimestampOddOffset(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	sent := []string{"2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00-24:00", "2026-01-01T00:00:00+24:59", "2026-01-01T00:00:00+23:60"}
	var recs []string
	for _, ts := range sent {
		recs = append(recs, `{"value":1,"timestamp":"`+ts+`"}`)
	}
	res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, `{"topic":"t","records":[`+strings.Join(recs, ",")+`]}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var pub PublishResponse
	res.json(t, &pub)
	res = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var cons ConsumeResponse
	res.json(t, &cons)
	require.Len(t, cons.Records, len(sent))
	for i, ts := range sent {
		var want time.Time
		require.NoError(t, json.Unmarshal([]byte(`"`+ts+`"`), &want))
		require.True(t, pub.Records[i].Timestamp.Equal(want), "%s: publish answered %s", ts, pub.Records[i].Timestamp)
		require.True(t, cons.Records[i].Timestamp.Equal(want), "%s: consume answered %s", ts, cons.Records[i].Timestamp)
	}
}
