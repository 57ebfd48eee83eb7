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

// ClaimCooldown above ClaimCooldownMax is refused with a clear error; a
// negative one (none) and the longest are accepted.
func TestConsumerClaimCooldownChecked(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.NewConsumer("cooldownchecked", "g", &pgmsg.ConsumerOpts{ClaimCooldown: pgmsg.ClaimCooldownMax + time.Nanosecond})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	require.ErrorContains(t, err, "claim cooldown")
	for _, d := range []time.Duration{-time.Nanosecond, pgmsg.ClaimCooldownMax} {
		cn, err := tb.client.NewConsumer("cooldownchecked", "g", &pgmsg.ConsumerOpts{ClaimCooldown: d})
		require.NoError(t, err, "ClaimCooldown %s", d)
		cn.Close()
	}
}

// A consumer whose claims the cooldown holds loses and repeats nothing:
// records published one at a time by several publishers while it runs
// are each handled once, in offset order per partition, and the group
// ends with no lag.
func TestConsumerClaimCooldownHandlesEveryRecordOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "cooldown", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	cn, err := tb.client.NewConsumer("cooldown", "g", &pgmsg.ConsumerOpts{
		// At any rate: the cooldown must hold these claims.
		ClaimCooldown: 100 * time.Millisecond, ClaimCooldownMinRate: -1, PollInterval: time.Hour,
	})
	require.NoError(t, err)
	defer cn.Close()

	const publishers, each = 3, 10
	ctx, cancel := context.WithCancel(tb.ctx)
	var mu sync.Mutex
	seen := map[string]int{}
	last := map[int32]int64{0: -1, 1: -1}
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(ctx, func(_ context.Context, cl *pgmsg.Claim) error {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range cl.Records {
				if r.Offset <= last[r.Partition] {
					return fmt.Errorf("partition %d: offset %d after %d", r.Partition, r.Offset, last[r.Partition])
				}
				last[r.Partition] = r.Offset
				seen[string(r.Value)]++
			}
			if len(seen) == publishers*each {
				cancel()
			}
			return nil
		})
	}()
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				v := fmt.Sprintf("%d-%d", p, i)
				if err := tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "cooldown", Key: []byte(v), Value: []byte(v)}}, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	requireRunHandledOnce(t, tb, done, seen, publishers*each, "cooldown")
}
