package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// requireNothingWritten checks that topic has no records and no groups.
func (tb *testBundle) requireNothingWritten(t *testing.T, topic string) {
	t.Helper()
	d, err := tb.client.DescribeTopic(tb.ctx, topic)
	require.NoError(t, err)
	for _, p := range d.PartitionInfo {
		require.Zero(t, p.NextOffset, "partition %d", p.Partition)
	}
	gs, err := tb.client.ListGroups(tb.ctx, topic, "")
	require.NoError(t, err)
	require.Empty(t, gs)
}

func TestLimits(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{MaxBodyBytes: 1024, MaxRecords: 3, MaxWait: 2e9})
	tb.topic(t, "t", 2)
	_, err := tb.client.CreateTopic(tb.ctx, "small", topicCfg(16))
	require.NoError(t, err)

	cases := []struct {
		name   string
		method string
		path   string
		body   any
		status int
		code   string
	}{
		{"BodyTooLarge", "POST", "/v1/pubsub/publish", publishBody("t", strings.Repeat("x", 2000)), 413, "body_too_large"},
		{"TooManyRecords", "POST", "/v1/pubsub/publish", publishBody("t", "a", "b", "c", "d"), 413, "too_many_records"},
		{"TooManyJobs", "POST", "/v1/queue/enqueue", `{"queue":"q","jobs":[{},{},{},{}]}`, 413, "too_many_records"},
		{"RecordTooLarge", "POST", "/v1/pubsub/publish", publishBody("small", strings.Repeat("x", 40)), 413, "record_too_large"},
		{"MaxRecordsOverLimit", "GET", "/v1/pubsub/consume?topic=t&group=g&max_records=4", nil, 400, "limit_exceeded"},
		{"WaitOverLimit", "GET", "/v1/pubsub/consume?topic=t&group=g&wait=3s", nil, 400, "limit_exceeded"},
		{"ClaimMaxOverLimit", "GET", "/v1/queue/claim?queue=q&max=4", nil, 400, "limit_exceeded"},
		{"BadWait", "GET", "/v1/pubsub/consume?topic=t&group=g&wait=soon", nil, 400, "invalid_parameter"},
		{"MissingGroup", "GET", "/v1/pubsub/consume?topic=t", nil, 400, "invalid_parameter"},
		{"BadEncoding", "GET", "/v1/pubsub/consume?topic=t&group=g&encoding=xml", nil, 400, "invalid_parameter"},
		{"SyntaxError", "POST", "/v1/pubsub/publish", `{"topic":"t","records":[{"value":1},]}`, 400, "malformed_json"},
		{"UnknownField", "POST", "/v1/pubsub/publish", `{"topic":"t","recrods":[{"value":1}]}`, 400, "malformed_json"},
		{"WrongType", "POST", "/v1/pubsub/publish", `{"topic":"t","records":{"value":1}}`, 400, "malformed_json"},
		{"TrailingData", "POST", "/v1/pubsub/publish", `{"topic":"t","records":[{"value":1}]} {}`, 400, "malformed_json"},
		{"EmptyBody", "POST", "/v1/pubsub/publish", ``, 400, "malformed_json"},
		{"Truncated", "POST", "/v1/pubsub/publish", `{"topic":"t","records":[`, 400, "malformed_json"},
		{"BadBase64", "POST", "/v1/pubsub/publish", `{"topic":"t","encoding":"base64","records":[{"value":"aGk="},{"value":"%%%"}]}`, 400, "invalid_parameter"},
		{"TextNotString", "POST", "/v1/pubsub/publish", `{"topic":"t","encoding":"text","records":[{"value":{"a":1}}]}`, 400, "invalid_parameter"},
		{"MixedPartitions", "POST", "/v1/pubsub/publish", `{"topic":"t","records":[{"value":1,"partition":0},{"value":2}]}`, 400, "invalid_parameter"},
		{"PartitionOutOfRange", "POST", "/v1/pubsub/publish", `{"topic":"t","records":[{"value":1,"partition":7}]}`, 400, "partition_out_of_range"},
		{"MissingTopic", "POST", "/v1/pubsub/publish", `{"records":[{"value":1}]}`, 400, "invalid_parameter"},
		{"CommitMissingEpoch", "POST", "/v1/pubsub/commit", `{"topic":"t","group":"g","partition":0}`, 400, "invalid_parameter"},
		{"NegativeDelay", "POST", "/v1/queue/enqueue", `{"queue":"q","jobs":[{"delay":"-5s"}]}`, 400, "malformed_json"},
		{"UnknownRoute", "GET", "/v1/nope", nil, 404, "not_found"},
		{"WrongMethod", "DELETE", "/v1/pubsub/publish", nil, 405, "method_not_allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := tb.do(t, c.method, c.path, tb.admin, c.body)
			require.Equal(t, c.status, res.status, string(res.body))
			require.Equal(t, c.code, res.errorCode(t))
			require.Equal(t, "application/json", res.header.Get("Content-Type"))
		})
	}
	tb.requireNothingWritten(t, "t")
	tb.requireNothingWritten(t, "small")
	st, err := tb.client.AllQueueStats(tb.ctx)
	require.NoError(t, err)
	require.Empty(t, st, "no queue was created by refused enqueues")

	t.Run("WrongContentType", func(t *testing.T) {
		req, err := http.NewRequestWithContext(tb.ctx, http.MethodPost, tb.ts.URL+"/v1/pubsub/publish", strings.NewReader(`<topic>t</topic>`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tb.admin)
		req.Header.Set("Content-Type", "text/xml")
		res, err := tb.ts.Client().Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusUnsupportedMediaType, res.StatusCode)
	})
	t.Run("CurlDefaultContentTypeIsRefused", func(t *testing.T) {
		// A form-encoded body (curl -d's default, and what an
		// HTML form posts cross-site without a CORS preflight) is not JSON.
		req, err := http.NewRequestWithContext(tb.ctx, http.MethodPost, tb.ts.URL+"/v1/pubsub/publish", strings.NewReader(`{"topic":"t","records":[{"value":1}]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tb.admin)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := tb.ts.Client().Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusUnsupportedMediaType, res.StatusCode)
		tb.requireNothingWritten(t, "t")
	})
	t.Run("MethodNotAllowedSaysWhich", func(t *testing.T) {
		res := tb.do(t, http.MethodPut, "/v1/topics", tb.admin, nil)
		require.Equal(t, "GET, POST", res.header.Get("Allow"))
	})
}

func TestEncodings(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	for _, body := range []string{
		`{"topic":"t","encoding":"text","records":[{"key":"alice","value":"hello","headers":{"trace":"abc"}}]}`,
		`{"topic":"t","records":[{"value":{"a": [1, 2]}}]}`,
		`{"topic":"t","encoding":"base64","key_encoding":"base64","records":[{"key":"AP8=","value":"AAEC/w==","headers":{"bin":"/w=="}}]}`,
		`{"topic":"t","records":[{"key":"tomb"}]}`,
	} {
		res := tb.do(t, http.MethodPost, "/pubsub/publish", tb.admin, body)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
	}
	recs, err := tb.client.Fetch(tb.ctx, "t", 0, 0, 10)
	require.NoError(t, err)
	require.Len(t, recs, 4)
	require.Equal(t, []byte("hello"), recs[0].Value)
	require.Equal(t, []byte("abc"), recs[0].Headers["trace"])
	require.Equal(t, []byte(`{"a":[1,2]}`), recs[1].Value)
	require.Equal(t, []byte{0, 1, 2, 255}, recs[2].Value)
	require.Equal(t, []byte{0, 255}, recs[2].Key)
	require.Equal(t, []byte{255}, recs[2].Headers["bin"])
	require.Nil(t, recs[3].Value)

	res := tb.do(t, http.MethodGet, "/pubsub/consume?topic=t&group=g&auto_commit=true", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var cr ConsumeResponse
	res.json(t, &cr)
	require.True(t, cr.Claim.Committed)
	require.Len(t, cr.Records, 4)
	require.Equal(t, `"hello"`, string(cr.Records[0].Value))
	require.Equal(t, wire.EncodingText, cr.Records[0].ValueEncoding)
	require.Equal(t, "alice", *cr.Records[0].Key)
	require.Equal(t, map[string]string{"trace": "abc"}, cr.Records[0].Headers)
	require.JSONEq(t, `{"a":[1,2]}`, string(cr.Records[1].Value))
	require.Equal(t, wire.EncodingJSON, cr.Records[1].ValueEncoding)
	require.Nil(t, cr.Records[1].Key)
	require.Equal(t, `"AAEC/w=="`, string(cr.Records[2].Value))
	require.Equal(t, wire.EncodingBase64, cr.Records[2].ValueEncoding)
	require.Equal(t, "AP8=", *cr.Records[2].Key)
	require.Equal(t, wire.EncodingBase64, cr.Records[2].KeyEncoding)
	require.Equal(t, wire.EncodingBase64, cr.Records[2].HeadersEncoding)
	require.Equal(t, "null", string(cr.Records[3].Value))

	// auto_commit advanced the group: nothing left.
	res = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g", tb.admin, nil)
	res.json(t, &cr)
	require.Nil(t, cr.Claim)
	require.Empty(t, cr.Records)
	require.Equal(t, "[]", string(mustField(t, res.body, "records")), "records is an empty list, not null")

	// Forced base64 for a second group.
	res = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g2&encoding=base64&max_records=1", tb.admin, nil)
	res.json(t, &cr)
	require.Equal(t, `"aGVsbG8="`, string(cr.Records[0].Value))
}

func mustField(t *testing.T, body []byte, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &m))
	return m[name]
}

func topicCfg(maxBytes int) pgmsg.TopicConfig {
	return pgmsg.TopicConfig{Partitions: 1, MaxRecordBytes: maxBytes}
}
