// Package notifier keeps one LISTEN connection per client and fans
// notifications out to subscribers by payload (a topic or queue name, or a
// consumer group's changes: GroupKey).
//
// A payload "name#part" (a topic's partition) wakes the subscribers of
// "name#part" and of "name"; a plain "name" wakes the subscribers of "name"
// and of every "name#..." key (some partition of it: nobody knows which).
// '#' cannot occur in a topic name.
//
// Notifications are only wake-ups: after a reconnect every subscriber is
// woken, because notifications sent while disconnected are lost, and
// subscribers always fall back to polling.
package notifier

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
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
	// gens counts the wake-ups of each name (a payload's part before
	// '#'), allGen those of every name (Generation). gens holds at most
	// maxGens names: past that its counts fold into allGen (foldGens).
	gens   map[string]uint64
	allGen uint64

	cancel context.CancelFunc
	done   chan struct{}
}

// PartitionKey is the key of one partition's wake-ups: "topic#partition",
// the payload a publish to it sends and what its consumers subscribe to.
func PartitionKey(topic string, partition int32) string {
	return topic + "#" + strconv.Itoa(int(partition))
}

// GroupKey is the key of a consumer group's changes on a topic:
// "group:topic:group", the payload a rebalance that moved a partition of
// the group sends (_rebalance), so that its members heartbeat at once.
// ':' cannot occur in a name, so it is no topic's or partition's key.
func GroupKey(topic, group string) string {
	return "group:" + topic + ":" + group
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
	sub := n.NewSubscription(keys...)
	return sub.C(), sub.Close
}

// Subscription is a channel of coalesced wake-ups for a set of keys that
// can change (a consumer's partitions change with every rebalance).
type Subscription struct {
	n    *Notifier
	ch   chan struct{}
	keys []string // guarded by n.mu
}

// NewSubscription subscribes to keys.
func (n *Notifier) NewSubscription(keys ...string) *Subscription {
	s := &Subscription{n: n, ch: make(chan struct{}, 1)}
	s.Set(keys...)
	return s
}

// C is the channel that receives the wake-ups.
func (s *Subscription) C() <-chan struct{} { return s.ch }

// Set replaces the subscribed keys.
func (s *Subscription) Set(keys ...string) {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	s.remove()
	s.keys = append([]string(nil), keys...)
	for _, key := range s.keys {
		if n.subs[key] == nil {
			n.subs[key] = map[chan struct{}]struct{}{}
		}
		n.subs[key][s.ch] = struct{}{}
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	s.remove()
	s.keys = nil
}

func (s *Subscription) remove() {
	for _, key := range s.keys {
		delete(s.n.subs[key], s.ch)
		if len(s.n.subs[key]) == 0 {
			delete(s.n.subs, key)
		}
	}
}

// Close stops listening and waits for the listener to exit.
func (n *Notifier) Close() {
	n.cancel()
	<-n.done
}

// Generation counts the wake-ups that may concern name (a topic or
// queue): a notification of it or of one of its partitions, or a
// reconnect. It is incremented before the subscribers are woken, so a
// subscriber woken reads a count that includes its wake-up, and a read of
// name's state that starts after Generation returned n reflects every
// commit whose notification counted toward n (internal/kafkasrv keeps
// its partitions' high watermarks by it).
func (n *Notifier) Generation(name string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gens[name] + n.allGen
}

// maxGens bounds the names whose wake-ups gens counts one by one, so
// that a listener that sees topics come and go does not keep every name.
const maxGens = 10000

// foldGens empties gens and raises allGen past every name's count, as a
// wake-up of every name would: each Generation grows, none goes back.
// Call it with n.mu held.
func (n *Notifier) foldGens() {
	var top uint64
	for _, g := range n.gens {
		top = max(top, g)
	}
	n.allGen += top + 1
	clear(n.gens)
}

func (n *Notifier) wake(payload string, all bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name, _, partitioned := strings.Cut(payload, "#")
	if all {
		n.allGen++
	} else {
		if n.gens == nil {
			n.gens = map[string]uint64{}
		}
		if _, ok := n.gens[name]; !ok && len(n.gens) >= maxGens {
			n.foldGens()
		}
		n.gens[name]++
	}
	for k, set := range n.subs {
		if !all && k != payload && k != name && (partitioned || !strings.HasPrefix(k, payload+"#")) {
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
	const backoffMin = 100 * time.Millisecond
	backoff := backoffMin
	var lostSince time.Time // when the connection was lost; zero while listening
	for ctx.Err() == nil {
		listened, err := n.listen(ctx, func() {
			// Listening again: say so once, and start the next outage's
			// backoff from the beginning.
			if !lostSince.IsZero() {
				n.logger.Info("pgmsg: notification listener is back", "channel", n.channel,
					"after", time.Since(lostSince).Round(time.Millisecond))
				lostSince = time.Time{}
			}
			backoff = backoffMin
		})
		if ctx.Err() != nil {
			return
		}
		if listened || lostSince.IsZero() {
			lostSince = time.Now()
			n.logger.Warn("pgmsg: notification listener lost its connection; consumers poll until it is back",
				"channel", n.channel, "error", err)
		} else {
			n.logger.Debug("pgmsg: notification listener could not reconnect", "channel", n.channel, "error", err)
		}
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

// listen connects, listens and wakes subscribers until the connection
// fails; listening is called once LISTEN took effect, and listened reports
// whether it was.
func (n *Notifier) listen(ctx context.Context, listening func()) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, n.connConfig)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{n.channel}.Sanitize()); err != nil {
		return false, err
	}
	listening()
	// Anything published before LISTEN took effect was not notified.
	n.wake("", true)
	for {
		note, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		n.wake(note.Payload, false)
	}
}
