package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Messages reach clients as written: JSON bodies do not HTML-escape
// (<token> is not \u003ctoken\u003e).
func TestJSONBodiesAreNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.do(t, http.MethodGet, "/v1/topics", "", nil)
	require.Equal(t, http.StatusUnauthorized, res.status)
	require.Contains(t, string(res.body), "Authorization: Bearer <token>")
	require.NotContains(t, string(res.body), `\u003c`)
}
