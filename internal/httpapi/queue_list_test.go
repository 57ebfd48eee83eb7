package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// The queues' paged lists (sequences, limit-keys, tenants; one handler,
// queueList): pages by limit and after, an empty array for none, and the
// same refusals on each.
func TestQueuePagedListsHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateQueue(tb.ctx, "lk", pgmsg.QueueConfig{KeyLimit: 1})
	require.NoError(t, err)
	for _, k := range []string{"c", "a", "b"} {
		for _, q := range []string{"sq", "lk", "fq"} {
			p := pgmsg.EnqueueParams{Payload: []byte(`1`)}
			switch q {
			case "sq":
				p.SequenceKey = k
			case "lk":
				p.LimitKey = k
			case "fq":
				p.Tenant = k
			}
			_, err := tb.client.Enqueue(tb.ctx, q, p, nil)
			require.NoError(t, err)
		}
	}
	_, err = tb.client.CreateQueue(tb.ctx, "empty", pgmsg.QueueConfig{})
	require.NoError(t, err)

	for _, c := range []struct{ queue, path, field, key string }{
		{"sq", "sequences", "sequences", "key"},
		{"lk", "limit-keys", "limit_keys", "key"},
		{"fq", "tenants", "tenants", "tenant"},
	} {
		page := func(query string) (string, []string) {
			t.Helper()
			var body map[string]json.RawMessage
			r := tb.do(t, http.MethodGet, "/v1/queues/"+c.queue+"/"+c.path+query, tb.admin, nil)
			require.Equal(t, http.StatusOK, r.status, "%s%s: %s", c.path, query, r.body)
			r.json(t, &body)
			require.Len(t, body, 2, "%s: %s", c.path, r.body)
			var queue string
			require.NoError(t, json.Unmarshal(body["queue"], &queue))
			var rows []map[string]any
			require.NoError(t, json.Unmarshal(body[c.field], &rows), "%s: %s", c.path, r.body)
			keys := make([]string, len(rows))
			for i, row := range rows {
				keys[i], _ = row[c.key].(string)
			}
			return queue, keys
		}
		queue, keys := page("?limit=2")
		require.Equal(t, c.queue, queue)
		require.Equal(t, []string{"a", "b"}, keys, c.path)
		_, keys = page("?limit=2&after=b")
		require.Equal(t, []string{"c"}, keys, c.path)
		_, keys = page("")
		require.Equal(t, []string{"a", "b", "c"}, keys, c.path)

		r := tb.do(t, http.MethodGet, "/v1/queues/empty/"+c.path, tb.admin, nil)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		require.JSONEq(t, `{"queue":"empty",`+`"`+c.field+`":[]}`, string(r.body), "none: an empty array")

		for _, bad := range []struct {
			path   string
			status int
			code   string
		}{
			{"/v1/queues/" + c.queue + "/" + c.path + "?limit=0", http.StatusBadRequest, "limit_exceeded"},
			{"/v1/queues/" + c.queue + "/" + c.path + "?limit=10001", http.StatusBadRequest, "limit_exceeded"},
			{"/v1/queues/" + c.queue + "/" + c.path + "?limit=x", http.StatusBadRequest, "invalid_parameter"},
			{"/v1/queues/" + strings.Repeat("q", 201) + "/" + c.path, http.StatusBadRequest, "invalid_name"},
			{"/v1/queues/nope/" + c.path, http.StatusNotFound, "unknown_queue"},
		} {
			r := tb.do(t, http.MethodGet, bad.path, tb.admin, nil)
			require.Equal(t, bad.status, r.status, "%s: %s", bad.path, r.body)
			require.Equal(t, bad.code, r.errorCode(t), bad.path)
		}
	}
	r := tb.do(t, http.MethodGet, "/v1/queues/sq/sequences?held=maybe", tb.admin, nil)
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	require.Equal(t, "invalid_parameter", r.errorCode(t))
}
