package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pgmsg maintenance min-insync-replicas shows the guard, sets it to 1 or
// 2, and refuses anything else without touching the database.
func TestMinInsyncReplicasCommand(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	get := func(args ...string) string {
		t.Helper()
		out, errOut, code := s.runRecorded(false, "", append([]string{"maintenance", "min-insync-replicas"}, args...)...)
		require.Zero(t, code, errOut)
		return strings.TrimSpace(out)
	}
	require.Equal(t, "1", get())
	require.Equal(t, "2", get("2"))
	require.Equal(t, "2", get())
	require.Equal(t, `{
  "min_insync_replicas": 2
}`, get("-o", "json"))
	for _, bad := range []string{"0", "3", "two"} {
		_, errOut, code := s.runRecorded(false, "", "maintenance", "min-insync-replicas", bad)
		require.NotZero(t, code, bad)
		require.Contains(t, errOut, "want 1 (no guard) or 2", bad)
	}
	require.Equal(t, "2", get())
	require.Equal(t, "1", get("1"))
}
