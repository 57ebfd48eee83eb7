// Package logconsumer is the engine behind pgmsg.Consumer: one member of
// a consumer group claiming records, running a handler on them and
// committing them. It owns the claim loop (the rotation over the topics
// and, for manual partitions, the partitions; the commit of a handled
// claim riding on the next claim, or lingering for one), the start (the
// group membership's join, internal/membership, or a manual consumer's
// group creation) and Close, the supervision of a handler (Supervisor:
// its claim's lease extended every third of the lease while it runs, its
// context cancelled when the claim turns out lost), redelivery of
// records a handler failed on with its backoff, the decision to set them
// aside as dead letters and the transaction that does it, ProcessTx's
// claim inside the caller's transaction, and the poll policy
// (CommitLinger, MayHaveMore, Wait, RetryBackoff).
//
// Everything it needs of the database and tracing comes through Log,
// which DB implements on the client's engines (internal/logread's claims,
// internal/logpublish's publish of dead letters, internal/telemetry's
// spans), bound to the consumer's group and claim options; tests use
// their own Log. It works on *pgmsgtype.Claim. It does not own the claim
// statements (internal/logread and internal/store), the public API and
// its option checks and defaults (pgmsg.Consumer, ConsumerOpts,
// NewConsumer), nor the dead-letter format (naming, headers, listing and
// replay: internal/deadletter).
package logconsumer

import (
	"context"
	"sync"
	"time"
)

// Supervisor runs handlers on claims of type C, keeping each claim's
// lease while its handler runs. Its funcs are set once, when the consumer
// is made.
type Supervisor[C any] struct {
	// Extend pushes cl's expiry to lease from now.
	Extend func(ctx context.Context, cl C, lease time.Duration) error
	// IsLost reports whether an error of Extend means the claim is no
	// longer held (fenced or expired): the handler's context is then
	// cancelled and extending stops. Other errors are ignored (the next
	// tick tries again).
	IsLost func(err error) bool
}

// extendEveryMin bounds how often a claim's lease is extended.
const extendEveryMin = 10 * time.Millisecond

// Handle runs run with cl while extending cl's lease by lease every third
// of it (at most every 10ms). If an extension finds the claim lost, run's
// context is cancelled. Handle returns run's error once run has returned
// and the extensions have stopped.
func (s *Supervisor[C]) Handle(ctx context.Context, cl C, lease time.Duration, run func(ctx context.Context, cl C) error) error {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(max(lease/3, extendEveryMin))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if err := s.Extend(hctx, cl, lease); err != nil && s.IsLost(err) {
					cancel()
					return
				}
			}
		}
	}()
	err := run(hctx, cl)
	close(stop)
	wg.Wait()
	return err
}

// CommitLingerMax bounds how long Run holds a handled claim's commit
// while it waits for records to claim along with it.
const CommitLingerMax = 100 * time.Millisecond

// CommitLinger is how long Run may hold the commit of a claim that
// expires at expiresAt: CommitLingerMax, or less with a short poll
// interval or lease (well before the claim expires); never negative.
func CommitLinger(pollInterval time.Duration, expiresAt time.Time) time.Duration {
	return max(0, min(pollInterval, CommitLingerMax, time.Until(expiresAt)/2))
}

// MayHaveMore reports whether records may have been left behind when a
// claim of n records was made with at most maxRecords records and
// maxBytes bytes (0: no cap): it is as large as the options allow, or was
// cut by bytes, which cannot be told apart.
func MayHaveMore(n, maxRecords int, maxBytes int64) bool {
	return maxBytes > 0 || n >= maxRecords
}

// Wait blocks until a wake-up on wake (nil: never), a signal on changed
// (nil: never), d, or the end of ctx, whose error it then returns. A
// wake-up that comes before notBefore (the consumer's ClaimCooldown, or
// its client's claim budget, after its previous claim, capped by the
// caller) is held until then, so that the records published meanwhile
// are claimed together; a wait that d ended returns at once, and so does
// one that changed ends, hold or not (the member's partitions changed:
// one being handed over must not wait).
func Wait(ctx context.Context, wake, changed <-chan struct{}, d time.Duration, notBefore time.Time) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-changed:
	case <-wake:
		if hold := time.Until(notBefore); hold > 0 {
			t.Reset(hold)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-changed:
			case <-t.C:
			}
		}
	case <-t.C:
	}
	return nil
}

// Retry backoff bounds: the first wait after a transient error, and the
// most it doubles to.
const (
	RetryBackoffMin = 50 * time.Millisecond
	RetryBackoffMax = 5 * time.Second
)

// RetryBackoff is the wait after a transient error that follows a wait of
// prev (0 after a success): double prev, from RetryBackoffMin up to
// RetryBackoffMax.
func RetryBackoff(prev time.Duration) time.Duration {
	return min(max(2*prev, RetryBackoffMin), RetryBackoffMax)
}
