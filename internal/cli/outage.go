package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/pgmsg/pgmsg"
)

// outage rides the long-running commands (consume --follow, queue work
// --follow) through a database that cannot be reached for a while (a
// restart, a failover, a network blip), as a Kafka console consumer rides
// through a broker restart: it says so once on stderr, retries with
// backoff, and says when the database answers again. Anything that is not
// a retryable error (IsRetryable) still ends the command.
type outage struct {
	stderr io.Writer
	since  time.Time // when the current outage started; zero when none
	pause  time.Duration
}

const (
	outagePauseMin = 100 * time.Millisecond
	outagePauseMax = 5 * time.Second
)

// wait returns err if it is not retryable (or o is nil: the command does
// not ride outages). Otherwise it notes the outage, sleeps the next backoff
// pause and returns nil (try again), or ctx's error.
func (o *outage) wait(ctx context.Context, err error) error {
	if o == nil || !pgmsg.IsRetryable(err) || errors.Is(err, pgmsg.ErrBackpressure) || errors.Is(err, pgmsg.ErrQueueFull) {
		return err
	}
	if o.since.IsZero() {
		o.since, o.pause = time.Now(), outagePauseMin
		fmt.Fprintf(o.stderr, "pgmsg: database unavailable (%s); retrying until it answers\n", oneLine(err))
	}
	t := time.NewTimer(o.pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	o.pause = min(2*o.pause, outagePauseMax)
	return nil
}

// over notes that the database answered again.
func (o *outage) over() {
	if o == nil || o.since.IsZero() {
		return
	}
	fmt.Fprintf(o.stderr, "pgmsg: database available again after %s\n", time.Since(o.since).Round(100*time.Millisecond))
	o.since = time.Time{}
}

// connect is g.client, retried through an outage when ride is set.
func (g *globals) connect(ctx context.Context, ride *outage) (*pgmsg.Client, func(), error) {
	for {
		c, done, err := g.client(ctx)
		if err == nil {
			ride.over()
			return c, done, nil
		}
		if werr := ride.wait(ctx, err); werr != nil {
			return nil, nil, werr
		}
	}
}
