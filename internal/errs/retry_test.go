package errs

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRetryWhile(t *testing.T) {
	ctx := context.Background()
	// Retried while the sentinel matches, until op succeeds.
	calls := 0
	err := RetryWhile(ctx, Backpressure, time.Minute, New(Backpressure, "full"), func() error {
		calls++
		if calls < 3 {
			return New(Backpressure, "full")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err %v after %d calls, want nil after 3", err, calls)
	}
	// Another error is returned at once, without a call.
	other := errors.New("other")
	calls = 0
	if err := RetryWhile(ctx, Backpressure, time.Minute, other, func() error { calls++; return nil }); err != other || calls != 0 {
		t.Fatalf("err %v after %d calls, want other after 0", err, calls)
	}
	// No wait: the first error stands.
	first := New(Backpressure, "full")
	if err := RetryWhile(ctx, Backpressure, 0, first, func() error { calls++; return nil }); err != first || calls != 0 {
		t.Fatalf("err %v after %d calls with no wait", err, calls)
	}
	// A context that ends stops the wait with its error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := RetryWhile(cctx, Backpressure, time.Minute, first, func() error { return first }); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}
