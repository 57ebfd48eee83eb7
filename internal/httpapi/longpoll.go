package httpapi

import (
	"context"
	"time"
)

// longPoll calls try at once and, when it finds nothing and wait > 0, again
// at each wake-up until it finds something, wait passes, ctx ends (its
// error is returned) or the server drains (at once, with nothing).
//
// subscribe (Client.RecordWakeups or Client.JobWakeups) is called before the
// first try, so a publish or enqueue that lands after a try found nothing
// still wakes the wait. Its channel is nil when notifications are disabled:
// every PollInterval the wait wakes anyway, the fallback for lost
// notifications and for work that becomes due without one.
func (s *Server) longPoll(ctx context.Context, wait time.Duration, subscribe func() (<-chan struct{}, func()),
	try func() (found bool, err error)) error {
	if wait <= 0 || s.draining() {
		_, err := try()
		return err
	}
	deadline := time.Now().Add(wait)
	wake, unsubscribe := subscribe()
	defer unsubscribe()
	for {
		if found, err := try(); err != nil || found {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 || s.draining() {
			return nil
		}
		if s.testHookWaiting != nil {
			s.testHookWaiting()
		}
		t := time.NewTimer(min(left, s.cfg.PollInterval))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-s.stopCtx.Done():
			t.Stop()
			return nil
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}
