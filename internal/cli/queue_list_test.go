package cli

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// queue sequences and queue limit-keys (their one RunE, queueListRunE):
// an empty list is [] in JSON and a header alone as a table; a queue's
// rows are listed in both forms; a page size out of 1..10000 fails with
// the server's error, and a bad -o before any connection.
func TestQueueListCommands(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "queue", "create", "sync")
	s.ok("", "queue", "create", "mail", "--key-limit", "1")
	for _, cmd := range []string{"sequences", "limit-keys"} {
		require.Equal(t, "[]\n", s.ok("", "queue", cmd, "sync", "-o", "json"), cmd)
		require.Regexp(t, `^KEY +\S.*\n$`, s.ok("", "queue", cmd, "sync"), cmd)
		require.Contains(t, s.fail("", "queue", cmd, "sync", "--limit", "10001"), "limit must be from 1 to 10000", cmd)
		s.fail("", "queue", cmd, "sync", "-o", "yaml-ish")
	}

	c := newClient(t, s)
	ctx := context.Background()
	for range 2 {
		_, err := c.Enqueue(ctx, "sync", pgmsg.EnqueueParams{Payload: []byte(`{}`), SequenceKey: "acct-1"}, nil)
		require.NoError(t, err)
		_, err = c.Enqueue(ctx, "mail", pgmsg.EnqueueParams{Payload: []byte(`{}`), LimitKey: "cust-7"}, nil)
		require.NoError(t, err)
	}
	var seqs []pgmsg.Sequence
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "sequences", "sync", "-o", "json")), &seqs))
	require.Len(t, seqs, 1)
	require.Equal(t, "acct-1", seqs[0].Key)
	require.Equal(t, int64(1), seqs[0].Pending)
	require.Regexp(t, `\nacct-1 +\d+ +available +1 +- +- +-\n$`, s.ok("", "queue", "sequences", "sync"))

	var keys []pgmsg.LimitKey
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "limit-keys", "mail", "-o", "json")), &keys))
	require.Equal(t, []pgmsg.LimitKey{{Key: "cust-7", Waiting: 1, Pending: 1}}, keys)
	require.Regexp(t, `\ncust-7 +0 +1 +1\n$`, s.ok("", "queue", "limit-keys", "mail"))
}
