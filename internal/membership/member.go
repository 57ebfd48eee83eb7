// Package membership is one consumer's membership of its group: the
// heartbeats that keep it in the group (group_heartbeat(), which
// rebalances partitions among live members), the partitions the group
// assigns it, the callbacks that report a change of them, and leaving.
// See "Group membership (automatic partition assignment)" in
// docs/architecture.md for the protocol.
//
// A pgmsg.Consumer without manual partitions has one Member and asks it
// which partitions it may claim. The Member takes what it needs (the
// store, the connection pool, a logger, the callbacks), not the client.
package membership

import (
	"context"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/notifier"
	"github.com/pgmsg/pgmsg/internal/store"
)

// leaveTimeout bounds the leave of all topics on Close.
const leaveTimeout = 10 * time.Second

// Config is what a Member needs. Every field but the callbacks is
// required; the caller fills in the defaults.
type Config struct {
	// Store and Exec run the heartbeats and the leave (Exec: the pool).
	Store *store.Store
	Exec  store.DBTX
	// Heartbeats, when set, sends the heartbeats instead, together with
	// those of the other members sharing it (the client's).
	Heartbeats *store.Heartbeats
	// Logger receives the heartbeats' failures and recoveries and a failed
	// leave.
	Logger *slog.Logger
	// Wake, when set, is a subscription to the group's changes on its
	// topics (notifier.GroupKey; the Member sets its keys and Close ends
	// it): a rebalance that moved a partition of the group wakes the
	// member for a heartbeat at once, so that it learns of a join, a leave
	// or a completed hand-over without waiting for its next interval.
	Wake *notifier.Subscription

	// Topics, Group and MemberID name the membership: one per topic.
	Topics   []string
	Group    string
	MemberID string
	// Start is where a group that does not exist yet starts (the first
	// heartbeat creates it): a position as ClaimOpts.Start.
	Start string
	// HeartbeatInterval is the time between heartbeats in a steady group;
	// while it rebalances the member heartbeats from a twentieth of it,
	// doubling back up to it.
	HeartbeatInterval time.Duration
	// SessionTimeout is the member's session: the group moves its
	// partitions when it has not heartbeated for that long, and the member
	// counts them lost when no heartbeat of its succeeded for that long.
	SessionTimeout time.Duration

	// OnAssigned, OnRevoked and OnLost are the public callbacks of
	// pgmsg.ConsumerOpts, called in the order lost, revoked, assigned,
	// without the Member's lock held, from the goroutine that heartbeated
	// (Join's caller, or the heartbeat loop). Each may be nil.
	OnAssigned func(topic string, partitions []int32)
	OnRevoked  func(topic string, partitions []int32)
	OnLost     func(topic string, partitions []int32)
	// OnChange is called after the partitions the member may claim
	// changed, with all of them, so that the consumer can listen for the
	// right wake-ups. It runs with the Member's lock held and must not
	// call the Member. May be nil.
	OnChange func(owned iter.Seq2[string, int32])
}

// Member is one member of a consumer group on each of its topics. It is
// safe for concurrent use.
type Member struct {
	cfg Config
	// now asks the heartbeat loop for a heartbeat at once.
	now chan struct{}

	runMu  sync.Mutex // guards stop, done and closed
	stop   chan struct{}
	done   chan struct{} // closed when the heartbeat loop has returned
	closed bool          // Close ran; the member never joins again

	mu     sync.Mutex
	owned  map[string]map[int32]bool // claimable partitions per topic
	lastOK map[string]time.Time      // last successful heartbeat per topic
}

// New returns a member that has not joined yet: it owns nothing until
// Join.
func New(cfg *Config) *Member {
	m := &Member{cfg: *cfg, now: make(chan struct{}, 1),
		owned: map[string]map[int32]bool{}, lastOK: map[string]time.Time{}}
	if cfg.Wake != nil {
		keys := make([]string, len(cfg.Topics))
		for i, t := range cfg.Topics {
			keys[i] = notifier.GroupKey(t, cfg.Group)
		}
		cfg.Wake.Set(keys...)
	}
	return m
}

// Join makes the member join its group on every topic with a first
// heartbeat each (which reports the assignment through the callbacks
// before Join returns), then starts the heartbeat loop. A Join that fails
// leaves nothing running: the next one tries again. Joining a joined
// member does nothing; after Close it fails with errs.Closed.
//
// The loop runs on a context without ctx's cancellation (ctx's values
// stay): Close stops it between heartbeats, so no heartbeat can still
// commit on the server after the member has left, as a cancelled query
// may.
func (m *Member) Join(ctx context.Context) error {
	m.runMu.Lock()
	defer m.runMu.Unlock()
	if m.closed {
		return errs.New(errs.Closed, "member %q of group %q has left", m.cfg.MemberID, m.cfg.Group)
	}
	if m.done != nil {
		return nil
	}
	for _, t := range m.cfg.Topics {
		if _, err := m.heartbeat(ctx, t, 0); err != nil {
			return err
		}
	}
	m.stop = make(chan struct{})
	m.done = make(chan struct{})
	go m.loop(context.WithoutCancel(ctx), m.stop, m.done)
	return nil
}

// Close stops the heartbeat loop (waiting for a heartbeat under way) and
// leaves the group on every topic, so that its partitions move to the
// other members at once; a leave that fails is logged, and the partitions
// move after the session timeout. A member that never joined only
// becomes closed. A second Close does nothing.
func (m *Member) Close() {
	if m.cfg.Wake != nil {
		m.cfg.Wake.Close()
	}
	m.runMu.Lock()
	stop, done, already := m.stop, m.done, m.closed
	m.closed = true
	m.runMu.Unlock()
	if stop == nil || already {
		return
	}
	close(stop)
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	for _, t := range m.cfg.Topics {
		_, err := m.cfg.Store.GroupLeave(ctx, m.cfg.Exec, t, m.cfg.Group, m.cfg.MemberID)
		if err != nil {
			m.cfg.Logger.Warn("pgmsg: consumer could not leave the group; its partitions move after the session timeout",
				"topic", t, "group", m.cfg.Group, "member", m.cfg.MemberID, "error", err)
		}
	}
}

// ID is the member's id in the group.
func (m *Member) ID() string { return m.cfg.MemberID }

// Owns reports whether the member may claim partition of topic now: it is
// assigned to it and not being handed over.
func (m *Member) Owns(topic string, partition int32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.owned[topic][partition]
}

// Count returns how many partitions of topic the member may claim now,
// and one of them (the only one when n is 1; 0 when n is 0).
func (m *Member) Count(topic string) (n int, one int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.owned[topic] {
		one = p
	}
	return len(m.owned[topic]), one
}

// Assignment returns the partitions the member may claim now, per topic,
// in ascending order; a topic without any is absent.
func (m *Member) Assignment() map[string][]int32 {
	out := map[string][]int32{}
	m.mu.Lock()
	defer m.mu.Unlock()
	for t, ps := range m.owned {
		for p := range ps {
			out[t] = append(out[t], p)
		}
		slices.Sort(out[t])
	}
	return out
}

// HeartbeatNow asks the heartbeat loop for a heartbeat at once instead of
// at its next tick: the member learns of a change without waiting (its
// session expired, a partition moved). It never blocks; asks made before
// the loop gets to them make one heartbeat.
func (m *Member) HeartbeatNow() {
	select {
	case m.now <- struct{}{}:
	default:
	}
}

// ClaimEnded is called when a claim of the member on partition of topic
// has been committed or released. If the partition is being handed over
// (no longer the member's to claim), a heartbeat now completes the
// hand-over instead of one up to HeartbeatInterval later.
func (m *Member) ClaimEnded(topic string, partition int32) {
	if !m.Owns(topic, partition) {
		m.HeartbeatNow()
	}
}

// loop heartbeats every topic until stop is closed, then closes done.
func (m *Member) loop(ctx context.Context, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	// The member has just joined: the group is rebalancing.
	fast := max(m.cfg.HeartbeatInterval/20, time.Millisecond)
	delay := fast
	t := time.NewTimer(delay)
	defer t.Stop()
	log := m.cfg.Logger
	var failingSince time.Time // the first failure of a run of failures
	var wake <-chan struct{}   // nil (never ready) without a subscription
	if m.cfg.Wake != nil {
		wake = m.cfg.Wake.C()
	}
	for {
		// linger: a periodic heartbeat of a steady member (the timer's, a
		// whole interval after the last) may wait a twentieth of the
		// interval for the other members' of the client, to go in one
		// statement; one asked for or woken goes at once.
		var linger time.Duration
		select {
		case <-stop:
			return
		case <-t.C:
			if delay == m.cfg.HeartbeatInterval {
				linger = fast
			}
		case <-m.now:
		case <-wake:
		}
		rebalancing, firstFailure := false, false
		for _, topic := range m.cfg.Topics {
			moving, err := m.heartbeat(ctx, topic, linger)
			rebalancing = rebalancing || moving
			switch {
			case err != nil && failingSince.IsZero():
				firstFailure = true
				// Once per run of failures (a database restart fails every
				// heartbeat until it is back); the rest at debug level.
				failingSince = time.Now()
				log.Warn("pgmsg: consumer heartbeat failed; retrying", "topic", topic, "group", m.cfg.Group,
					"member", m.cfg.MemberID, "error", err)
			case err != nil:
				log.Debug("pgmsg: consumer heartbeat failed again", "topic", topic, "group", m.cfg.Group,
					"member", m.cfg.MemberID, "error", err)
			case !failingSince.IsZero():
				log.Info("pgmsg: consumer heartbeats succeed again", "topic", topic, "group", m.cfg.Group,
					"member", m.cfg.MemberID, "after", time.Since(failingSince).Round(time.Millisecond))
				failingSince = time.Time{}
			}
		}
		delay = nextDelay(delay, fast, m.cfg.HeartbeatInterval, rebalancing || firstFailure)
		t.Reset(delay)
	}
}

// nextDelay is the wait before the next heartbeat after one that waited
// delay. A rebalance takes a few heartbeats: the old owner's, to learn a
// partition is being handed over and then to complete the hand-over once
// its claim has ended; the new owner's, to learn it owns it. So while the
// group rebalances (soon: the group's notifications usually wake the
// member first) the member heartbeats fast; after that the delay doubles
// back up to interval. The first of a run of failed heartbeats is retried
// fast too, backing off the same way: a heartbeat that failed or timed
// out after half a session leaves room for more within the session
// (three intervals of the default 3s fit in the default 10s session).
func nextDelay(delay, fast, interval time.Duration, soon bool) time.Duration {
	if soon {
		return fast
	}
	return min(2*delay, interval)
}

// heartbeat keeps the membership for one topic alive, applies the
// assignment it returns and runs the callbacks; linger is how long it may
// wait for other members' heartbeats through Config.Heartbeats (0: their
// own linger). rebalancing: the member joined, its assignment changed, or
// a partition of it is being handed over.
func (m *Member) heartbeat(ctx context.Context, topic string, linger time.Duration) (rebalancing bool, err error) {
	hbCtx, cancel := context.WithTimeout(ctx, max(m.cfg.SessionTimeout/2, time.Second))
	var hb *store.Heartbeat
	if m.cfg.Heartbeats != nil {
		hb, err = m.cfg.Heartbeats.HeartbeatWithin(hbCtx, linger, topic, m.cfg.Group, m.cfg.MemberID, m.cfg.SessionTimeout, m.cfg.Start)
	} else {
		hb, err = m.cfg.Store.GroupHeartbeat(hbCtx, m.cfg.Exec, topic, m.cfg.Group, m.cfg.MemberID,
			m.cfg.SessionTimeout, m.cfg.Start)
	}
	cancel()
	m.mu.Lock()
	prev := m.owned[topic]
	if err != nil {
		// Without a heartbeat for a whole session the group has moved our
		// partitions: stop claiming them.
		lost := lostAfterFailure(prev, m.lastOK[topic], time.Now(), m.cfg.SessionTimeout)
		if len(lost) > 0 {
			delete(m.owned, topic)
		}
		m.mu.Unlock()
		if len(lost) > 0 && m.cfg.OnLost != nil {
			m.cfg.OnLost(topic, lost)
		}
		return false, err
	}
	m.lastOK[topic] = time.Now()
	c := diff(prev, hb)
	m.owned[topic] = c.owned
	if c.changed() && m.cfg.OnChange != nil {
		m.cfg.OnChange(m.all)
	}
	m.mu.Unlock()
	if len(c.lost) > 0 && m.cfg.OnLost != nil {
		m.cfg.OnLost(topic, c.lost)
	}
	if len(c.revoked) > 0 && m.cfg.OnRevoked != nil {
		m.cfg.OnRevoked(topic, c.revoked)
	}
	if len(c.assigned) > 0 && m.cfg.OnAssigned != nil {
		m.cfg.OnAssigned(topic, c.assigned)
	}
	return hb.Joined || c.changed(), nil
}

// all yields every claimable (topic, partition); m.mu held.
func (m *Member) all(yield func(string, int32) bool) {
	for t, ps := range m.owned {
		for p := range ps {
			if !yield(t, p) {
				return
			}
		}
	}
}

// change is what one heartbeat's answer does to the member's partitions
// of a topic.
type change struct {
	// owned: the partitions the member may claim now.
	owned map[int32]bool
	// assigned: now claimable, not before (after a rejoin: all of owned).
	// revoked: claimable before, not now (being handed over, or gone).
	// lost: claimable before a rejoin; the rejoin fenced their claims.
	// Each in ascending order.
	assigned, revoked, lost []int32
}

// changed reports whether the claimable partitions changed.
func (c *change) changed() bool {
	return len(c.assigned) > 0 || len(c.revoked) > 0 || len(c.lost) > 0
}

// diff compares prev, the partitions the member could claim before the
// heartbeat, with its answer hb. A partition being handed over is not
// claimable. When the heartbeat (re)joined the member (its session had
// expired, or it never joined) every partition of prev is lost, not
// revoked: the rejoin ended their claims.
func diff(prev map[int32]bool, hb *store.Heartbeat) change {
	var c change
	if hb.Joined && len(prev) > 0 {
		c.lost = sortedKeys(prev)
		prev = nil
	}
	c.owned = map[int32]bool{}
	for i, p := range hb.Partitions {
		if !hb.Revoking[i] {
			c.owned[p] = true
		}
	}
	for p := range c.owned {
		if !prev[p] {
			c.assigned = append(c.assigned, p)
		}
	}
	for p := range prev {
		if !c.owned[p] {
			c.revoked = append(c.revoked, p)
		}
	}
	slices.Sort(c.assigned)
	slices.Sort(c.revoked)
	return c
}

// lostAfterFailure is the loss rule of a failed heartbeat at now: a
// member none of whose heartbeats succeeded for longer than its session
// (since lastOK) counts every partition it could claim, prev, as lost:
// the group has moved them. Else nothing is lost. In ascending order.
func lostAfterFailure(prev map[int32]bool, lastOK, now time.Time, session time.Duration) []int32 {
	if len(prev) == 0 || now.Sub(lastOK) <= session {
		return nil
	}
	return sortedKeys(prev)
}

func sortedKeys(m map[int32]bool) []int32 {
	out := make([]int32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
