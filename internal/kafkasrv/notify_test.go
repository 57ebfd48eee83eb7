package kafkasrv_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// The listener finds out whether its client's notifications are disabled
// (pgmsg.Config.DisableNotify) without subscribing through the client,
// which would start the client's own LISTEN connection, unused by the
// listener (it listens on a connection of its own). Over a client with
// notifications disabled it opens no LISTEN connection; over one with
// notifications, its LISTEN connection is the only one, gone when the
// listener is closed while the client stays open.
func TestListenerNotifyConnections(t *testing.T) {
	t.Parallel()
	listens := func(b *env) int {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE query ILIKE 'LISTEN %' AND query LIKE '%' || $1 || '%'`, b.Schema+"_log").Scan(&n))
		return n
	}

	off := newEnv(t, 4, time.Minute)
	offClient, err := pgmsg.NewClient(off.Pool, &pgmsg.Config{Schema: off.Schema, DisableNotify: true})
	require.NoError(t, err)
	t.Cleanup(offClient.Close)
	require.True(t, offClient.NotifyDisabled())
	offSrv, err := kafkasrv.New(kafkasrv.Config{Client: offClient})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, offSrv.Close()) })

	on := newEnv(t, 4, time.Minute)
	onClient, err := pgmsg.NewClient(on.Pool, &pgmsg.Config{Schema: on.Schema})
	require.NoError(t, err)
	t.Cleanup(onClient.Close)
	require.False(t, onClient.NotifyDisabled())
	onSrv, err := kafkasrv.New(kafkasrv.Config{Client: onClient})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return listens(on) > 0 }, 30*time.Second, 10*time.Millisecond,
		"the listener with notifications never listened")
	// The listener with notifications disabled was started first: a
	// LISTEN of its would have been seen by now as well.
	require.Zero(t, listens(off), "a listener with notifications disabled opened a LISTEN connection")

	require.NoError(t, onSrv.Close())
	require.Eventually(t, func() bool { return listens(on) == 0 }, 30*time.Second, 10*time.Millisecond,
		"a LISTEN connection outlived the listener: the client's own, started by the listener")
}
