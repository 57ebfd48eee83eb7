package logconsumer

import (
	"sync"
	"time"
)

// rateWindow is how long RateMeter counts before it sets its estimate.
const rateWindow = 200 * time.Millisecond

// RateMeter estimates how many records a consumer's claims (or a Kafka
// listener connection's Fetch answers, internal/kafkasrv) return per
// second: the records counted over the latest window of at least
// rateWindow. ClaimCooldownMinRate compares it, so that the cooldown holds
// only a consumer that receives records faster than that. A window, not
// an average of each answer's records over the time since the previous
// one: two answers close together would read as a burst.
type RateMeter struct {
	mu     sync.Mutex
	start  time.Time // of the window being counted; zero before the first claim
	n      int64     // records counted since start
	perSec float64   // the last full window's estimate
}

// Add counts a claim's n records (0 for an empty claim) at now.
func (m *RateMeter) Add(n int, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.start.IsZero() {
		m.start = now
	}
	m.n += int64(n)
	if el := now.Sub(m.start); el >= rateWindow {
		m.perSec = float64(m.n) / el.Seconds()
		m.start, m.n = now, 0
	}
}

// Rate is the latest estimate in records per second (0 before a full
// window).
func (m *RateMeter) Rate() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.perSec
}
