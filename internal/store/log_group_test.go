package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// The heartbeat statement commits asynchronously only when the group
// existed before it: a heartbeat that creates the group (at its start
// position) commits synchronously, as a claim that creates one does.
func TestHeartbeatAsyncUnlessCreating(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	st := New(b.Schema)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := st.TopicCreate(ctx, b.Pool, "t", 2, []byte("{}"))
	require.NoError(t, err)
	hb := func(member string) *Heartbeat {
		t.Helper()
		row, err := st.GroupHeartbeat(ctx, b.Pool, "t", "g", member, 10*time.Second, "latest")
		require.NoError(t, err)
		return row
	}
	first := hb("m1")
	require.True(t, first.Joined)
	require.Empty(t, first.Async, "the heartbeat that created the group commits synchronously")
	second := hb("m2")
	require.True(t, second.Joined)
	require.Equal(t, "off", second.Async)
	require.Equal(t, "off", hb("m1").Async)
}
