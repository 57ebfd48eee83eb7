package logconsumer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errLost = errors.New("lost")

// claim stands for the root's *Claim.
type claim struct{ extended atomic.Int32 }

func supervisor(extend func(cl *claim) error) *Supervisor[*claim] {
	return &Supervisor[*claim]{
		Extend: func(_ context.Context, cl *claim, _ time.Duration) error {
			cl.extended.Add(1)
			return extend(cl)
		},
		IsLost: func(err error) bool { return errors.Is(err, errLost) },
	}
}

// The lease is extended while the handler runs and the handler's error is
// returned; the extending goroutine has ended by then (goleak).
func TestHandleExtendsWhileRunning(t *testing.T) {
	t.Parallel()
	s := supervisor(func(*claim) error { return nil })
	cl := &claim{}
	herr := errors.New("handler")
	err := s.Handle(context.Background(), cl, 30*time.Millisecond, func(ctx context.Context, got *claim) error {
		require.Same(t, cl, got)
		require.Eventually(t, func() bool { return cl.extended.Load() >= 2 }, 5*time.Second, time.Millisecond)
		require.NoError(t, ctx.Err())
		return herr
	})
	require.ErrorIs(t, err, herr)
}

// An extension that finds the claim lost cancels the handler's context
// and stops extending; other errors do neither.
func TestHandleCancelsLostClaim(t *testing.T) {
	t.Parallel()
	s := supervisor(func(cl *claim) error {
		if cl.extended.Load() < 3 {
			return errors.New("transient")
		}
		return errLost
	})
	cl := &claim{}
	err := s.Handle(context.Background(), cl, 15*time.Millisecond, func(ctx context.Context, _ *claim) error {
		<-ctx.Done()
		return ctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 3, cl.extended.Load())
}

// The parent's end reaches the handler.
func TestHandleParentCancelled(t *testing.T) {
	t.Parallel()
	s := supervisor(func(*claim) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Handle(ctx, &claim{}, time.Hour, func(ctx context.Context, _ *claim) error { return ctx.Err() })
	require.ErrorIs(t, err, context.Canceled)
}

func TestCommitLinger(t *testing.T) {
	t.Parallel()
	far := time.Now().Add(time.Hour)
	require.Equal(t, CommitLingerMax, CommitLinger(time.Second, far))
	require.Equal(t, 20*time.Millisecond, CommitLinger(20*time.Millisecond, far))
	// Well before the claim expires: at most half of what is left.
	d := CommitLinger(time.Second, time.Now().Add(60*time.Millisecond))
	require.True(t, d > 0 && d <= 30*time.Millisecond, "linger %s", d)
	require.Zero(t, CommitLinger(time.Second, time.Now().Add(-time.Second)))
}

func TestMayHaveMore(t *testing.T) {
	t.Parallel()
	require.True(t, MayHaveMore(100, 100, 0))
	require.False(t, MayHaveMore(99, 100, 0))
	require.True(t, MayHaveMore(1, 100, 1024)) // cut by bytes, perhaps
}

func TestWait(t *testing.T) {
	t.Parallel()
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	require.NoError(t, Wait(context.Background(), wake, nil, time.Hour, time.Time{}))
	require.NoError(t, Wait(context.Background(), nil, nil, time.Millisecond, time.Time{}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, Wait(ctx, nil, nil, time.Hour, time.Time{}), context.Canceled)
}

// A wake-up before notBefore is held until then; one after it is not; a
// wait the timer ended is not held; the end of ctx ends the hold.
func TestWaitCooldown(t *testing.T) {
	t.Parallel()
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	start := time.Now()
	require.NoError(t, Wait(context.Background(), wake, nil, time.Hour, start.Add(50*time.Millisecond)))
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "the wake-up was not held until notBefore")

	// notBefore has passed: the wake-up returns at once (an hour's timer
	// would hang the test otherwise).
	wake <- struct{}{}
	require.NoError(t, Wait(context.Background(), wake, nil, time.Hour, time.Now().Add(-time.Second)))

	// The timer ends the wait: no hold (an hour's would hang the test).
	require.NoError(t, Wait(context.Background(), make(chan struct{}), nil, time.Millisecond, time.Now().Add(time.Hour)))

	ctx, cancel := context.WithCancel(context.Background())
	wake <- struct{}{}
	done := make(chan error, 1)
	go func() { done <- Wait(ctx, wake, nil, time.Hour, time.Now().Add(time.Hour)) }()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// A change of the member's partitions ends a wait at once, held or not
// (an hour's timer or hold would hang the test otherwise).
func TestWaitChanged(t *testing.T) {
	t.Parallel()
	changed := make(chan struct{}, 1)
	changed <- struct{}{}
	require.NoError(t, Wait(context.Background(), make(chan struct{}), changed, time.Hour, time.Time{}))

	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	done := make(chan error, 1)
	go func() { done <- Wait(context.Background(), wake, changed, time.Hour, time.Now().Add(time.Hour)) }()
	changed <- struct{}{}
	require.NoError(t, <-done)
}

func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	var got []time.Duration
	d := time.Duration(0)
	for range 9 {
		d = RetryBackoff(d)
		got = append(got, d)
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5000 * ms, 5000 * ms}, got)
}
