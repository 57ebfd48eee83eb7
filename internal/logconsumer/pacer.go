package logconsumer

import (
	"sync"
	"time"
)

// Claim pacing (pgmsg.Config.ConsumerClaimRate): the consumers of one
// client share a budget of claims a second. Each claim costs the server
// about the same whatever it returns (a transaction; ~0.3 ms of its CPU on
// two cores, docs/benchmarks.md "Many groups"), so a thousand groups each
// claiming at every wake-up spend the server on claims of a few records.
// While more than PacedMinBusy consumers of the client receive records and
// their claims together reach the budget, each of them spaces the claims
// that follow a wake-up by busy/rate: together they make about rate claims
// a second, and each claim takes what arrived meanwhile. A claim that may
// have left records behind is still followed by the next at once (the
// budget never holds a backlog), and a consumer idle for longer than its
// share claims as soon as it is woken.

// PacedMinBusy is how many of a client's consumers must be busy (have
// received records within the last one to two seconds) before the claim
// budget holds any of them: with fewer, each claims as its own
// ClaimCooldown says, so small deployments see no change.
const PacedMinBusy = 20

// pacerWindow is the window the pacer counts claims and busy consumers in.
const pacerWindow = time.Second

// pacedIntervalMax bounds the spacing the budget gives a consumer's
// claims (pgmsg.ClaimCooldownMax).
const pacedIntervalMax = time.Minute

// ClaimPacer is the claim budget a client's consumers share. Its zero
// value is not usable: NewClaimPacer makes one. A nil *ClaimPacer is no
// budget. It is safe for concurrent use.
type ClaimPacer struct {
	rate float64 // claims a second, > 0

	mu sync.Mutex
	// window is the index of the current window (Unix time / pacerWindow).
	window int64
	// claims: claims started in the current window; lastClaims, in the
	// one just before it (0 when that one saw none).
	claims, lastClaims int
	// cur: consumers that received records in the current window;
	// carried: those that did in the previous one and not yet in this.
	// Busy consumers are cur + carried.
	cur, carried int
	// engaged: the client's claims reached the budget (a window of at
	// least rate claims); it stays engaged until a window of fewer than
	// half of them.
	engaged bool
}

// NewClaimPacer returns the budget of rate claims a second, or nil (no
// budget) when rate is not positive.
func NewClaimPacer(rate float64) *ClaimPacer {
	if !(rate > 0) {
		return nil
	}
	return &ClaimPacer{rate: rate}
}

// PacerMark is a consumer's own state in its client's pacer: the window
// it was last counted busy in. Its zero value is ready.
type PacerMark struct{ window int64 }

// roll moves the windows on to now's; p.mu held.
func (p *ClaimPacer) roll(now time.Time) {
	w := now.UnixNano() / int64(pacerWindow)
	if w == p.window {
		return
	}
	if w == p.window+1 {
		p.carried, p.lastClaims = p.cur, p.claims
	} else {
		p.carried, p.lastClaims = 0, 0
	}
	p.cur, p.claims, p.window = 0, 0, w
	switch {
	case !p.engaged && float64(p.lastClaims) >= p.rate:
		p.engaged = true
	case p.engaged && float64(p.lastClaims) < p.rate/2:
		p.engaged = false
	}
}

// Claimed counts a claim a consumer started at now that returned records
// (0: none); m is the consumer's mark. A nil pacer does nothing.
func (p *ClaimPacer) Claimed(m *PacerMark, records int, now time.Time) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.roll(now)
	p.claims++
	if records <= 0 || m.window == p.window {
		return
	}
	if m.window == p.window-1 {
		// Counted in the previous window, which became carried.
		p.carried--
	}
	p.cur++
	m.window = p.window
}

// State returns, at now, how many consumers received records in the
// current or the previous window, whether the budget is engaged, and the
// interval it gives (Interval). A nil pacer is 0, false, 0.
func (p *ClaimPacer) State(now time.Time) (busy int, engaged bool, interval time.Duration) {
	if p == nil {
		return 0, false, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.roll(now)
	busy, engaged = p.cur+p.carried, p.engaged
	if engaged && busy > PacedMinBusy {
		interval = min(time.Duration(float64(busy)/p.rate*float64(time.Second)), pacedIntervalMax)
	}
	return busy, engaged, interval
}

// Interval is the least time between the starts of two claims of a
// consumer that the budget allows at now: busy/rate once more than
// PacedMinBusy consumers are busy and the budget is engaged (at most a
// minute); else 0, no pacing. A nil pacer never paces.
func (p *ClaimPacer) Interval(now time.Time) time.Duration {
	_, _, d := p.State(now)
	return d
}
