package logconsumer

import (
	"sync"
	"time"
)

// rateWindow is how long rateMeter counts before it sets its estimate.
const rateWindow = 200 * time.Millisecond

// rateMeter estimates how many records a consumer's claims return per
// second: the records counted over the latest window of at least
// rateWindow. ClaimCooldownMinRate compares it, so that the cooldown holds
// only a consumer that receives records faster than that.
type rateMeter struct {
	mu     sync.Mutex
	start  time.Time // of the window being counted; zero before the first claim
	n      int64     // records counted since start
	perSec float64   // the last full window's estimate
}

// add counts a claim's n records (0 for an empty claim) at now.
func (m *rateMeter) add(n int, now time.Time) {
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

// rate is the latest estimate in records per second (0 before a full
// window).
func (m *rateMeter) rate() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.perSec
}
