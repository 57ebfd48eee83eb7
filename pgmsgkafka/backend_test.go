package pgmsgkafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/pgmsgkafka"
)

// TestNewNeedsBrokers: a backend without brokers is refused with PM004.
func TestNewNeedsBrokers(t *testing.T) {
	_, err := pgmsgkafka.New(nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = pgmsgkafka.New(&pgmsgkafka.Config{})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	require.Equal(t, "PM004", pgmsg.ErrorCode(err))
}

// TestResetGroupWithMembers: Kafka resets a group only when it has no
// members; with one, ResetGroup fails with PM004 and moves nothing, and
// succeeds once the member left. (PostgreSQL resets live groups.)
func TestResetGroupWithMembers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newBackend(t)
	defer b.Close()
	topic, group := unique("t"), unique("g") // a shared KAFKA_BROKERS cluster
	_, err := b.CreateTopic(ctx, topic, pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, []*pgmsg.Record{{Topic: topic, Value: []byte("a")}, {Topic: topic, Value: []byte("b")}}, nil))
	c, err := b.NewLogConsumer(group, []string{topic}, &pgmsg.LogConsumerOpts{HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	handled := make(chan struct{}, 10)
	go func() {
		done <- c.Run(runCtx, func(context.Context, *pgmsg.Claim) error {
			handled <- struct{}{}
			return nil
		})
	}()
	select {
	case <-handled:
	case <-ctx.Done():
		t.Fatal("no claim handled")
	}
	require.Eventually(t, func() bool {
		gps, err := b.ListGroups(ctx, topic, group)
		return err == nil && len(gps) == 1 && gps[0].NextOffset == 2
	}, time.Minute, 10*time.Millisecond)
	_, err = b.ResetGroup(ctx, topic, group, pgmsg.PositionEarliest, nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	require.Equal(t, "PM004", pgmsg.ErrorCode(err))
	gps, err := b.ListGroups(ctx, topic, group)
	require.NoError(t, err)
	require.Equal(t, int64(2), gps[0].NextOffset, "the refused reset moved nothing")

	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	c.Close()
	gps, err = b.ResetGroup(ctx, topic, group, pgmsg.PositionEarliest, nil)
	require.NoError(t, err)
	require.Equal(t, int64(0), gps[0].NextOffset)
}

func unique(prefix string) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return prefix + "-" + hex.EncodeToString(r[:])
}
