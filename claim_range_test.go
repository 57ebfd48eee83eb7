package pgmsg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// Consumer.Run commits a handled claim along with the next claim, and the
// last claim when Run returns: every record is handled once and the group
// ends with no lag.
func TestConsumerRunCommitsLastClaimOnExit(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "runexit", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	recs := make([]*pgmsg.Record, 25)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: "runexit", Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))

	cn, err := tb.client.NewConsumer("runexit", "g", &pgmsg.ConsumerOpts{Claim: pgmsg.ClaimOpts{MaxRecords: 3}})
	require.NoError(t, err)
	defer cn.Close()
	ctx, cancel := context.WithCancel(tb.ctx)
	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(ctx, func(_ context.Context, cl *pgmsg.Claim) error {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range cl.Records {
				seen[string(r.Value)]++
			}
			if len(seen) == len(recs) {
				cancel()
			}
			return nil
		})
	}()
	requireRunHandledOnce(t, tb, done, seen, len(recs), "runexit")
}

// requireRunHandledOnce waits for Run's result on done (it must end with
// context.Canceled, the handler having cancelled it once every record
// was seen), then checks that want records were each handled once and
// that the group g of topic has no lag left.
func requireRunHandledOnce(t *testing.T, tb *testBundle, done <-chan error, seen map[string]int, want int, topic string) {
	t.Helper()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(time.Minute):
		t.Fatal("Run did not read every record")
	}
	require.Len(t, seen, want)
	for v, n := range seen {
		require.Equal(t, 1, n, "record %s handled %d times", v, n)
	}
	gs, err := tb.client.ListGroups(tb.ctx, topic, "g")
	require.NoError(t, err)
	for _, g := range gs {
		require.Zero(t, g.Lag, "partition %d", g.Partition)
	}
}

// A first Poll whose context ends during the group join does not break the
// consumer: the next Poll joins and claims.
func TestConsumerStartRetriedAfterFailedFirstPoll(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "retrystart", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "retrystart", Value: []byte("x")}}, nil))
	cn, err := tb.client.NewConsumer("retrystart", "g", nil)
	require.NoError(t, err)
	defer cn.Close()
	dead, cancel := context.WithCancel(tb.ctx)
	cancel()
	_, err = cn.Poll(dead)
	require.ErrorIs(t, err, context.Canceled)
	ctx, cancel2 := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel2()
	cl, err := cn.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, cl.Records, 1)
	require.NoError(t, tb.client.Commit(tb.ctx, cl))
}
