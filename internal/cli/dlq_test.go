package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// pgmsg group dlq list shows what a consumer with MaxDeliveries set aside,
// and dlq replay publishes it back once.
func TestGroupDLQCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgmsg.NewClient(s.b.Pool, &pgmsg.Config{Schema: s.b.Schema, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	defer c.Close()
	s.ok("", "topic", "create", "orders", "--partitions", "1")
	s.ok("ok-1\nbad\nok-2\n", "publish", "orders")
	cn, err := c.NewConsumer("orders", "billing", &pgmsg.ConsumerOpts{MaxDeliveries: 2, RedeliveryBackoff: time.Millisecond})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(rctx, func(_ context.Context, cl *pgmsg.Claim) error {
			for _, r := range cl.Records {
				if string(r.Value) == "bad" {
					return errors.New("cannot bill\nthis one")
				}
			}
			return nil
		})
	}()
	for {
		gs, err := c.ListGroups(ctx, "orders", "billing")
		require.NoError(t, err)
		if len(gs) == 1 && gs[0].NextOffset == 3 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	cn.Close()

	out := s.ok("", "group", "dlq", "list", "billing", "orders")
	require.Contains(t, out, "PARTITION  OFFSET  DELIVERIES  REPLAYED")
	require.Regexp(t, `(?m)^0 +1 +2 +false +\S+ +cannot bill this one$`, out)
	var list []struct {
		Topic      string `json:"topic"`
		Offset     int64  `json:"offset"`
		Deliveries int    `json:"deliveries"`
		Replayed   bool   `json:"replayed"`
		Error      string `json:"error"`
		DeadLetter struct {
			Topic string          `json:"topic"`
			Value json.RawMessage `json:"value"`
		} `json:"dead_letter"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "group", "dlq", "list", "billing", "orders", "--encoding", "text", "-o", "json")), &list))
	require.Len(t, list, 1)
	require.Equal(t, "orders", list[0].Topic)
	require.Equal(t, int64(1), list[0].Offset)
	require.Equal(t, "cannot bill\nthis one", list[0].Error)
	require.Equal(t, "orders.dlq", list[0].DeadLetter.Topic)
	require.JSONEq(t, `"bad"`, string(list[0].DeadLetter.Value))

	require.Equal(t, "replayed 1 dead letters of group \"billing\" to \"orders\"\n", s.ok("", "group", "dlq", "replay", "billing", "orders"))
	require.Equal(t, "replayed 0 dead letters of group \"billing\" to \"orders\"\n", s.ok("", "group", "dlq", "replay", "billing", "orders"))
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "group", "dlq", "list", "billing", "orders", "-o", "json")), &list))
	require.True(t, list[0].Replayed)

	require.Equal(t, "[]\n", s.ok("", "group", "dlq", "list", "shipping", "orders", "-o", "json"))
	require.True(t, strings.Contains(s.fail("", "group", "dlq", "list", "billing", "orders", "--encoding", "hex"), "invalid --encoding"))
	require.Contains(t, s.fail("", "group", "dlq", "replay", "billing", "orders", "--limit", "-1"), "limit must not be negative")
}
