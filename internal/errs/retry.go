package errs

import (
	"context"
	"errors"
	"time"
)

// RetryWhile calls op again while err (its last result) matches sentinel,
// backing off from 10 ms to 250 ms, for as long as the next attempt still
// starts within wait of now. It is how publishes (internal/logpublish)
// and enqueues wait out backpressure (Backpressure, QueueFull, for the
// wait BackpressureWait reads); the consumer or worker making room is
// what ends the wait. It lives here, beside BackpressureWait, because
// both the log's and the queue's engines use it and import nothing of
// each other.
func RetryWhile(ctx context.Context, sentinel error, wait time.Duration, err error, op func() error) error {
	deadline := time.Now().Add(wait)
	pause := 10 * time.Millisecond
	for errors.Is(err, sentinel) && time.Now().Add(pause).Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(pause*2, 250*time.Millisecond)
		err = op()
	}
	return err
}
