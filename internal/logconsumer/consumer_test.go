package logconsumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/deadletter"
	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// fakeLog is a Log that records the calls the engine makes and answers
// claims from a list.
type fakeLog struct {
	mu     sync.Mutex
	calls  []string
	claims []*pgmsgtype.Claim // answered in order; nil when empty
	pub    []*pgmsgtype.Record
}

func (f *fakeLog) call(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeLog) next() *pgmsgtype.Claim {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.claims) == 0 {
		return nil
	}
	cl := f.claims[0]
	f.claims = f.claims[1:]
	return cl
}

func epoch(cl *pgmsgtype.Claim) int64 {
	if cl == nil {
		return 0
	}
	return cl.Epoch
}

func (f *fakeLog) Claim(_ context.Context, topic string, partition int32, requireOwner bool, _ int, commit *pgmsgtype.Claim) (*pgmsgtype.Claim, error) {
	f.call("claim %s/%d owner=%v commit=%d", topic, partition, requireOwner, epoch(commit))
	return f.next(), nil
}

func (f *fakeLog) ClaimTx(_ context.Context, _ pgx.Tx, topic string, partition int32, requireOwner bool, lease time.Duration) (*pgmsgtype.Claim, error) {
	f.call("claimTx %s/%d owner=%v lease=%s", topic, partition, requireOwner, lease)
	return f.next(), nil
}

func (f *fakeLog) Commit(_ context.Context, cl *pgmsgtype.Claim) error {
	f.call("commit %d", cl.Epoch)
	return nil
}

func (f *fakeLog) CommitTx(_ context.Context, _ pgx.Tx, cl *pgmsgtype.Claim) error {
	f.call("commitTx %d", cl.Epoch)
	return nil
}

func (f *fakeLog) Release(_ context.Context, cl *pgmsgtype.Claim) error {
	f.call("release %d", cl.Epoch)
	return nil
}

func (f *fakeLog) Extend(context.Context, *pgmsgtype.Claim, time.Duration) error { return nil }

func (f *fakeLog) CreateGroup(_ context.Context, topic, start string) error {
	f.call("group %s %s", topic, start)
	return nil
}

func (f *fakeLog) BeginFunc(ctx context.Context, fn func(tx pgx.Tx) error) error {
	f.call("begin")
	return fn(nil)
}

func (f *fakeLog) DeadLetterPartitions(_ context.Context, dlq, topic string) (int, error) {
	f.call("dlq %s of %s", dlq, topic)
	return 1, nil
}

func (f *fakeLog) PublishTx(_ context.Context, _ pgx.Tx, recs []*pgmsgtype.Record) error {
	f.call("publish %d", len(recs))
	f.mu.Lock()
	f.pub = append(f.pub, recs...)
	f.mu.Unlock()
	return nil
}

func (f *fakeLog) StartProcessSpan(ctx context.Context, _ *pgmsgtype.Claim) (context.Context, func(error)) {
	return ctx, func(error) {}
}

func manualConsumer(f *fakeLog, topics []string, partitions []int32) *Consumer {
	cn := &Consumer{}
	cn.Init(f, Config{Topics: topics, Group: "g", MemberID: "m", Partitions: partitions, Start: "earliest",
		Lease: time.Minute, MaxRecords: 1, PollInterval: time.Millisecond, LeaseMax: time.Hour,
		RedeliveryBackoff: time.Millisecond, RedeliveryBackoffMax: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return cn
}

func claimOf(topic string, partition int32, epoch int64, offsets ...int64) *pgmsgtype.Claim {
	cl := &pgmsgtype.Claim{Topic: topic, Group: "g", Partition: partition, Epoch: epoch, ExpiresAt: time.Now().Add(time.Minute)}
	for _, o := range offsets {
		cl.Records = append(cl.Records, &pgmsgtype.Record{Topic: topic, Partition: partition, Offset: o})
	}
	return cl
}

// A handled claim's commit rides on the next claim of its topic: no
// Commit call of its own. The manual partitions are tried in rotation,
// starting one further each cycle.
func TestPollCommitRides(t *testing.T) {
	t.Parallel()
	f := &fakeLog{claims: []*pgmsgtype.Claim{nil, claimOf("a", 1, 7, 0)}}
	cn := manualConsumer(f, []string{"a"}, []int32{0, 1})
	done := claimOf("a", 0, 6, 0) // as large as MaxRecords: no linger
	cl, err := cn.Poll(context.Background(), done)
	require.NoError(t, err)
	require.Equal(t, int64(7), cl.Epoch)
	require.Equal(t, []string{"group a earliest", "claim a/0 owner=false commit=6", "claim a/1 owner=false commit=0"}, f.calls)
}

// A commit of a topic whose claim finds nothing is committed on its own.
func TestPollCommitAlone(t *testing.T) {
	t.Parallel()
	f := &fakeLog{claims: []*pgmsgtype.Claim{nil, claimOf("b", 0, 9, 0)}}
	cn := manualConsumer(f, []string{"a", "b"}, []int32{0})
	cl, err := cn.Poll(context.Background(), claimOf("c", 0, 6, 0))
	require.NoError(t, err)
	require.Equal(t, int64(9), cl.Epoch)
	require.Equal(t, []string{"group a earliest", "group b earliest", "claim a/0 owner=false commit=0",
		"claim b/0 owner=false commit=0", "commit 6"}, f.calls)
}

// With MaxDeliveries, the records a handler keeps failing on are
// published to the dead-letter topic with their headers, and the claim is
// committed, in one transaction; the record handled is not set aside.
func TestRedeliverSetsAside(t *testing.T) {
	t.Parallel()
	f := &fakeLog{}
	cn := manualConsumer(f, []string{"a"}, []int32{0})
	cn.cfg.MaxDeliveries = 2
	cl := claimOf("a", 0, 5, 10, 11)
	boom := errors.New("boom")
	handler := func(_ context.Context, cl *pgmsgtype.Claim) error {
		if len(cl.Records) == 1 && cl.Records[0].Offset == 11 {
			return nil
		}
		return boom
	}
	got, err := cn.redeliver(context.Background(), cl, cl, handler, boom)
	require.NoError(t, err)
	require.Nil(t, got, "committed with its dead letters")
	require.Equal(t, []string{"dlq a.dlq of a", "begin", "publish 1", "commitTx 5"}, f.calls)
	require.Len(t, f.pub, 1)
	s, ok := deadletter.Of(f.pub[0], "a", "g")
	require.True(t, ok)
	require.Equal(t, deadletter.Source{Partition: 0, Offset: 10, Error: "boom", Deliveries: 2}, s)
}

// ProcessTx claims inside the transaction with the long lease and commits
// there; a handler error rolls back (no commit).
func TestProcessTx(t *testing.T) {
	t.Parallel()
	f := &fakeLog{claims: []*pgmsgtype.Claim{claimOf("a", 0, 3, 0)}}
	cn := manualConsumer(f, []string{"a"}, []int32{0})
	ok, err := cn.ProcessTx(context.Background(), func(context.Context, pgx.Tx, *pgmsgtype.Claim) error { return nil })
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{"group a earliest", "begin", "claimTx a/0 owner=false lease=24h0m0s", "commitTx 3"}, f.calls)
	cn.Close()
	_, err = cn.ProcessTx(context.Background(), nil)
	require.ErrorIs(t, err, errs.Closed)
}
