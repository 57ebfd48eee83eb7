package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// TestReadScope: a read token is admitted to every GET route that needs
// admin and refused (403 forbidden) every other admin route; the routes of
// other scopes refuse it too; nothing changes.
func TestReadScope(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "orders", 1)
	_, err := tb.client.CreateQueue(tb.ctx, "emails", pgmsg.QueueConfig{})
	require.NoError(t, err)
	reader := tb.token(t, "viewer", pgmsg.ScopeRead)
	fill := strings.NewReplacer("{topic}", "orders", "{group}", "g", "{queue}", "emails", "{id}", "1", "{name}", "p")
	gets := 0
	for _, rt := range tb.server.Routes() {
		if rt.Scope == "" {
			continue
		}
		path := fill.Replace(rt.Pattern)
		if rt.Method == http.MethodGet && strings.HasSuffix(rt.Pattern, "/offsets") {
			path += "?time=2026-01-01T00:00:00Z"
		}
		res := tb.do(t, rt.Method, path, reader, nil)
		if rt.Scope == pgmsg.ScopeAdmin && rt.Method == http.MethodGet {
			gets++
			require.NotEqual(t, http.StatusForbidden, res.status, "%s %s: %s", rt.Method, path, res.body)
			require.NotEqual(t, http.StatusUnauthorized, res.status, "%s %s: %s", rt.Method, path, res.body)
			continue
		}
		if rt.Scope != pgmsg.ScopeAdmin {
			// Publish, consume, enqueue, claim: refused, whether by the
			// scope check or first by the (empty) request's checks.
			require.GreaterOrEqual(t, res.status, 400, "%s %s: %s", rt.Method, path, res.body)
			continue
		}
		require.Equal(t, http.StatusForbidden, res.status, "%s %s: %s", rt.Method, path, res.body)
		require.Equal(t, "forbidden", res.errorCode(t))
	}
	require.Greater(t, gets, 10)
	topics, err := tb.client.ListTopics(tb.ctx)
	require.NoError(t, err)
	require.Len(t, topics, 1, "nothing was created or deleted")
}
