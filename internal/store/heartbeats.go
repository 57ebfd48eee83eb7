package store

import (
	"context"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// HeartbeatLinger is how long a heartbeat through Heartbeats waits for
// others to go with it. A heartbeat is due once an interval (3 seconds by
// default) within a session of ten: a few milliseconds more change
// nothing, and a process's members then cost one round trip together.
// A member's periodic heartbeat of a steady group may wait longer
// (HeartbeatWithin): its interval's twentieth.
const HeartbeatLinger = 5 * time.Millisecond

// steadyBatchTimeout bounds one statement of steady heartbeats; each
// caller also stops waiting when its own context ends.
const steadyBatchTimeout = 30 * time.Second

// Heartbeats sends the heartbeats of the members that share exec (a
// pool: a Client's consumers, and the members the HTTP API heartbeats for)
// together. A heartbeat waits up to HeartbeatLinger for others, then those
// of steady groups run as one statement (heartbeat_steady over all of
// them); a member that statement does not answer (it joins, its group
// rebalances or may have lost a member, or the statement failed) runs its
// own group_heartbeat() next, as GroupHeartbeat does. Each member's
// heartbeat does what its own would: the statement updates each member's
// row under the conditions group_heartbeat() applies to it. Safe for
// concurrent use.
type Heartbeats struct {
	store  *Store
	exec   DBTX
	linger time.Duration

	mu      sync.Mutex
	pending []*steadyCall // waiting for the next statement
	// flushAt is when the pending heartbeats' statement is sent: the
	// earliest a pending heartbeat may wait until; timer sends it.
	flushAt time.Time
	timer   *time.Timer
}

type steadyCall struct {
	SteadyHeartbeat
	// done receives the answer, nil when the member's heartbeat must go
	// through group_heartbeat().
	done chan *Heartbeat
}

// NewHeartbeats returns a Heartbeats that runs its statements on exec,
// lingering for linger (HeartbeatLinger; 0 sends each heartbeat alone).
func NewHeartbeats(s *Store, exec DBTX, linger time.Duration) *Heartbeats {
	return &Heartbeats{store: s, exec: exec, linger: linger}
}

// Heartbeat is Store.GroupHeartbeat, sent together with the heartbeats of
// other members that come within the linger.
func (h *Heartbeats) Heartbeat(ctx context.Context, topic, group, member string, sessionTimeout time.Duration, start string) (*Heartbeat, error) {
	return h.HeartbeatWithin(ctx, h.linger, topic, group, member, sessionTimeout, start)
}

// HeartbeatWithin is Heartbeat lingering for linger instead of the
// Heartbeats' own (but never less, nor at all when that is 0): a
// periodic heartbeat that is not urgent waits longer for others, and
// goes sooner with any that must.
func (h *Heartbeats) HeartbeatWithin(ctx context.Context, linger time.Duration, topic, group, member string, sessionTimeout time.Duration, start string) (*Heartbeat, error) {
	if h.linger <= 0 {
		return h.store.GroupHeartbeat(ctx, h.exec, topic, group, member, sessionTimeout, start)
	}
	linger = max(linger, h.linger)
	c := &steadyCall{SteadyHeartbeat: SteadyHeartbeat{Topic: topic, Group: group, Member: member, SessionTimeout: sessionTimeout},
		done: make(chan *Heartbeat, 1)}
	h.mu.Lock()
	h.pending = append(h.pending, c)
	if at := time.Now().Add(linger); len(h.pending) == 1 || at.Before(h.flushAt) {
		// The first pending heartbeat, or one that may not wait as long
		// as those before it: the statement goes at its time.
		if h.timer != nil {
			h.timer.Stop()
		}
		h.flushAt, h.timer = at, time.AfterFunc(linger, h.flush)
	}
	h.mu.Unlock()
	select {
	case hb := <-c.done:
		if hb != nil {
			return hb, nil
		}
	case <-ctx.Done():
		// The statement may still refresh the member's row: a heartbeat
		// a little later than asked, which is harmless.
		return nil, errs.Map(ctx.Err())
	}
	return h.store.groupHeartbeat(ctx, h.exec, topic, group, member, sessionTimeout, start)
}

// flush runs the pending heartbeats' statement and answers each of them.
// A failed statement answers nil to all: each then runs its own
// group_heartbeat(), which reports the failure if it is not the batch's.
func (h *Heartbeats) flush() {
	h.mu.Lock()
	batch := h.pending
	h.pending, h.timer = nil, nil
	h.mu.Unlock()
	if len(batch) == 0 {
		return // a timer stopped too late: an earlier one sent its heartbeats
	}
	calls := make([]SteadyHeartbeat, len(batch))
	for i, c := range batch {
		calls[i] = c.SteadyHeartbeat
	}
	ctx, cancel := context.WithTimeout(context.Background(), steadyBatchTimeout)
	defer cancel()
	hbs, err := h.store.steadyHeartbeats(ctx, h.exec, calls)
	for i, c := range batch {
		if err != nil {
			c.done <- nil
		} else {
			c.done <- hbs[i]
		}
	}
}
