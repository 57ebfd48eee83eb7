// Package notifier keeps one LISTEN connection per client and fans
// notifications out to subscribers by payload (a topic or queue name).
//
// Notifications are only wake-ups: after a reconnect every subscriber is
// woken, because notifications sent while disconnected are lost, and
// subscribers always fall back to polling.
package notifier

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notifier listens on one channel on a dedicated connection (not one of
// the pool's, so it never starves it).
type Notifier struct {
	connConfig *pgx.ConnConfig
	channel    string
	logger     *slog.Logger

	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// New starts a Notifier listening on channel.
func New(connConfig *pgx.ConnConfig, channel string, logger *slog.Logger) *Notifier {
	ctx, cancel := context.WithCancel(context.Background())
	n := &Notifier{
		connConfig: connConfig.Copy(),
		channel:    channel,
		logger:     logger,
		subs:       map[string]map[chan struct{}]struct{}{},
		cancel:     cancel,
		done:       make(chan struct{}),
	}
	go n.run(ctx)
	return n
}

// Subscribe returns a channel that receives (coalesced) wake-ups for any
// of keys and a function that ends the subscription.
func (n *Notifier) Subscribe(keys ...string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	for _, key := range keys {
		if n.subs[key] == nil {
			n.subs[key] = map[chan struct{}]struct{}{}
		}
		n.subs[key][ch] = struct{}{}
	}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		for _, key := range keys {
			delete(n.subs[key], ch)
			if len(n.subs[key]) == 0 {
				delete(n.subs, key)
			}
		}
		n.mu.Unlock()
	}
}

// Close stops listening and waits for the listener to exit.
func (n *Notifier) Close() {
	n.cancel()
	<-n.done
}

func (n *Notifier) wake(key string, all bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, set := range n.subs {
		if !all && k != key {
			continue
		}
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

func (n *Notifier) run(ctx context.Context) {
	defer close(n.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := n.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		n.logger.Warn("pgmsg: notification listener lost its connection; consumers poll until it is back",
			"channel", n.channel, "error", err)
		n.wake("", true)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

func (n *Notifier) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, n.connConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{n.channel}.Sanitize()); err != nil {
		return err
	}
	// Anything published before LISTEN took effect was not notified.
	n.wake("", true)
	for {
		note, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		n.wake(note.Payload, false)
	}
}
