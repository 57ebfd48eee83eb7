package httpapi

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// Every library sentinel answers with the status and code it carries,
// whether bare, wrapped, or raised by the SQL API, and docs/http-api.md
// lists each under that status: a sentinel added to the library cannot
// become a 500 or go undocumented.
func TestSentinelsAnswerTheirStatus(t *testing.T) {
	documented := loadErrorTable(t)
	sentinels := pgmsg.Sentinels()
	require.GreaterOrEqual(t, len(sentinels), 27)
	seen := map[string]bool{}
	for _, s := range sentinels {
		require.NotEmpty(t, s.Name(), s.Error())
		require.False(t, seen[s.Name()], "two sentinels named %s", s.Name())
		seen[s.Name()] = true
		require.GreaterOrEqual(t, s.HTTPStatus(), 400, s.Name())
		if s == pgmsg.ErrNotEnoughReplicas {
			// The one server-side condition: min_insync_replicas refused a
			// write while the database has no synchronous standby (503, as
			// an unavailable database; nothing written, retry later).
			require.Equal(t, http.StatusServiceUnavailable, s.HTTPStatus())
		} else {
			require.Less(t, s.HTTPStatus(), 500, "%s: a library condition is the caller's, not the server's", s.Name())
		}
		for _, err := range []error{s, fmt.Errorf("op: %w", s)} {
			status, code, _ := errorFor(err)
			require.Equal(t, s.HTTPStatus(), status, s.Name())
			require.Equal(t, s.Name(), code)
		}
		if s.Code() == "" {
			// Only the Go library reports it (ErrClosed: a Producer used
			// after Close); no request reaches it.
			continue
		}
		status, code, msg := errorFor(pgmsg.MapError(&pgconn.PgError{Code: s.Code(), Message: "from SQL"}))
		require.Equal(t, s.HTTPStatus(), status, s.Code())
		require.Equal(t, s.Name(), code, s.Code())
		require.Equal(t, "from SQL", msg)
		require.Equal(t, s.HTTPStatus(), documented[s.Name()], "docs/http-api.md: %s under its status", s.Name())
	}
	// The HTTP layer's own entries are documented too.
	for _, e := range append(append([]statusEntry(nil), errorStatus...), availability...) {
		require.Equal(t, e.status, documented[e.code], "docs/http-api.md: %s", e.code)
	}
	require.Equal(t, http.StatusInternalServerError, documented["internal"])
}
