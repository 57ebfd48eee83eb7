package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// countingBody is a request body that counts the bytes read from it.
type countingBody struct {
	r    io.Reader
	read int
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

func (c *countingBody) Close() error { return nil }

// serveCounting serves one request in-process (no connection, so nothing
// but the handler reads the body) and returns its answer and how many
// bytes of the body were read.
func (tb *testBundle) serveCounting(t *testing.T, path, token, body string) (response, int) {
	t.Helper()
	cb := &countingBody{r: strings.NewReader(body)}
	req := httptest.NewRequestWithContext(tb.ctx, http.MethodPost, path, nil)
	req.Body = cb
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	tb.server.ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}, cb.read
}

// emptyItems is n empty JSON objects separated by commas.
func emptyItems(n int) string {
	return strings.TrimSuffix(strings.Repeat("{},", n), ",")
}

// A list body is decoded item by item and decoding stops at the item past
// MaxRecords: what a request costs is bounded by what the server accepts,
// however long the list the client sends (before, an 8 MiB body of empty
// jobs cost 1.28 GB and 13 s of decoding before the 413).
func TestListBodyStopsPastMaxRecords(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{MaxRecords: 10})
	tb.topic(t, "t", 1)
	_, err := tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{})
	require.NoError(t, err)
	const items = 200000 // 600 KB of items
	for _, c := range []struct{ name, path, body string }{
		{"Enqueue", "/v1/queue/enqueue", `{"queue":"q","jobs":[` + emptyItems(items) + `]}`},
		{"EnqueueQueueLast", "/v1/queue/enqueue", `{"jobs":[` + emptyItems(items) + `],"queue":"q"}`},
		{"Publish", "/v1/pubsub/publish", `{"topic":"t","records":[` + emptyItems(items) + `]}`},
		{"PublishTopicLast", "/v1/pubsub/publish", `{"records":[` + emptyItems(items) + `],"topic":"t"}`},
		{"RequeueDead", "/v1/queues/q/dead/requeue", `{"ids":[` + strings.TrimSuffix(strings.Repeat("1,", items), ",") + `]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, read := tb.serveCounting(t, c.path, tb.admin, c.body)
			require.Equal(t, http.StatusRequestEntityTooLarge, res.status, "%s", res.body)
			require.Equal(t, "too_many_records", res.errorCode(t))
			// Eleven items are a few dozen bytes; the decoder reads ahead
			// in small chunks.
			require.Less(t, read, 8<<10, "bytes of a %d-byte body read", len(c.body))
		})
	}
	// At the limit, everything is read and stored.
	res, _ := tb.serveCounting(t, "/v1/queue/enqueue", tb.admin, `{"queue":"q","jobs":[`+emptyItems(10)+`]}`)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	st, err := tb.client.QueueStats(tb.ctx, "q")
	require.NoError(t, err)
	require.EqualValues(t, 10, st.Available)
}

// A token that may not enqueue into the body's queue is refused as soon as
// the queue name has been read, before the jobs are decoded; a token with
// no enqueue (or publish) scope at all before the body is read.
func TestListBodyScopeBeforeDecode(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	reader := tb.token(t, "reader", pgmsg.ScopeRead)
	other := tb.token(t, "other", pgmsg.ScopeEnqueue+":other", pgmsg.ScopePublish+":other")
	big := emptyItems(500000) // 1.5 MB
	for _, c := range []struct {
		name, token, path, body string
		maxRead                 int
	}{
		{"ReadTokenEnqueue", reader, "/v1/queue/enqueue", `{"queue":"q","jobs":[` + big + `]}`, 0},
		{"ReadTokenPublish", reader, "/v1/pubsub/publish", `{"topic":"t","records":[` + big + `]}`, 0},
		{"OtherQueue", other, "/v1/queue/enqueue", `{"queue":"q","jobs":[` + big + `]}`, 4 << 10},
		{"OtherTopic", other, "/v1/pubsub/publish", `{"topic":"t","records":[` + big + `]}`, 4 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, read := tb.serveCounting(t, c.path, c.token, c.body)
			require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
			require.Equal(t, "forbidden", res.errorCode(t))
			require.LessOrEqual(t, read, c.maxRead, "bytes of a %d-byte body read", len(c.body))
		})
	}
}

// The streamed decoding keeps the rules of one JSON object: known fields
// only, each once (a second "queue" after the check could redirect the
// jobs), the list an array, nothing after the object.
func TestListBodyShape(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	onlyA := tb.token(t, "only-a", pgmsg.ScopeEnqueue+":a")
	_, err := tb.client.CreateQueue(tb.ctx, "a", pgmsg.QueueConfig{})
	require.NoError(t, err)
	for _, c := range []struct {
		name, token, body string
		status            int
		code              string
	}{
		{"NameTwice", onlyA, `{"queue":"a","jobs":[{}],"queue":"b"}`, 400, "malformed_json"},
		{"NameTwiceOtherCase", onlyA, `{"queue":"a","jobs":[{}],"Queue":"b"}`, 400, "malformed_json"},
		{"ListTwice", tb.admin, `{"queue":"a","jobs":[{}],"jobs":[{}]}`, 400, "malformed_json"},
		{"UnknownField", tb.admin, `{"queue":"a","jobz":[{}]}`, 400, "malformed_json"},
		{"UnknownItemField", tb.admin, `{"queue":"a","jobs":[{"kindd":"x"}]}`, 400, "malformed_json"},
		{"ListNotArray", tb.admin, `{"queue":"a","jobs":{}}`, 400, "malformed_json"},
		{"NotObject", tb.admin, `[{"queue":"a"}]`, 400, "malformed_json"},
		{"Trailing", tb.admin, `{"queue":"a","jobs":[{}]} {}`, 400, "malformed_json"},
		{"Truncated", tb.admin, `{"queue":"a","jobs":[{}`, 400, "malformed_json"},
		{"NameNotString", tb.admin, `{"queue":1,"jobs":[{}]}`, 400, "malformed_json"},
		{"ItemWrongType", tb.admin, `{"queue":"a","jobs":[{"priority":"high"}]}`, 400, "malformed_json"},
		{"NullList", tb.admin, `{"queue":"a","jobs":null}`, 400, "empty_batch"},
		{"NoName", tb.admin, `{"jobs":[{}]}`, 400, "invalid_parameter"},
		{"ForbiddenNameLast", onlyA, `{"jobs":[{}],"queue":"b"}`, 403, "forbidden"},
		{"CaseInsensitiveKeys", onlyA, `{"Queue":"a","JOBS":[{"Payload":1}]}`, 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := tb.do(t, http.MethodPost, "/v1/queue/enqueue", c.token, c.body)
			require.Equal(t, c.status, res.status, "%s", res.body)
			if c.code != "" {
				require.Equal(t, c.code, res.errorCode(t))
			}
		})
	}
	st, err := tb.client.QueueStats(tb.ctx, "b")
	if err == nil {
		require.Zero(t, st.Available, "a job reached queue b")
	}
}

// One job's tags are decoded up to the one past pgmsg.JobTagsMax: 8 MiB of
// tags in one job cost 170 MB before the library refused them.
func TestJobTagsStopPastMax(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{})
	require.NoError(t, err)
	tags := strings.TrimSuffix(strings.Repeat(`"t",`, 200000), ",")
	res, read := tb.serveCounting(t, "/v1/queue/enqueue", tb.admin, `{"queue":"q","jobs":[{"tags":[`+tags+`]}]}`)
	require.Equal(t, http.StatusBadRequest, res.status, "%s", res.body)
	require.Equal(t, "invalid_argument", res.errorCode(t))
	require.Contains(t, string(res.body), "at most 20 tags")
	// Decoding stopped at the 21st tag: the answer cannot count them all,
	// as the library's check after a full decoding did ("got 200000").
	require.NotContains(t, string(res.body), "200000")
	// The item itself is read whole (the decoder takes a value at a time).
	require.Greater(t, read, len(tags))

	for _, c := range []struct {
		tags   string
		status int
		code   string
	}{
		{`["a","b"]`, 200, ""},
		{`null`, 200, ""},
		{`[]`, 200, ""},
		{strings.TrimSuffix(strings.Repeat(`"x",`, pgmsg.JobTagsMax), ","), 0, ""},
		{`"a"`, 400, "malformed_json"},
		{`[1]`, 400, "malformed_json"},
	} {
		body := `{"queue":"q","jobs":[{"tags":` + c.tags + `}]}`
		if c.status == 0 { // exactly the maximum, as a bare list
			body = `{"queue":"q","jobs":[{"tags":[` + c.tags + `]}]}`
			c.status = 200
		}
		res := tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, body)
		require.Equal(t, c.status, res.status, "%s: %s", c.tags, res.body)
		if c.code != "" {
			require.Equal(t, c.code, res.errorCode(t), c.tags)
		}
	}
}

// A periodic job's tags are bounded the same way.
func TestPeriodicTagsStopPastMax(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{})
	require.NoError(t, err)
	tags := strings.TrimSuffix(strings.Repeat(`"t",`, 100000), ",")
	res := tb.do(t, http.MethodPut, "/v1/queues/q/periodic/p", tb.admin, `{"schedule":"@hourly","tags":[`+tags+`]}`)
	require.Equal(t, http.StatusBadRequest, res.status, "%s", res.body)
	require.Equal(t, "invalid_argument", res.errorCode(t))
	require.NotContains(t, string(res.body), "100000")
	res = tb.do(t, http.MethodPut, "/v1/queues/q/periodic/p", tb.admin, `{"schedule":"@hourly","tags":["a"]}`)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
}
