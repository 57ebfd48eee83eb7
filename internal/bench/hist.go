package bench

import (
	"math/bits"
	"sync"
	"time"
)

// hist is a log-linear latency histogram in microseconds: exact below
// 128 µs, then 64 buckets per power of two (under 1.6 % error), which is
// plenty for p50/p99 and cheap enough to record every record.
type hist struct {
	mu     sync.Mutex
	counts []uint64
	n      uint64
	max    uint64
}

const histSub = 64

func newHist() *hist { return &hist{counts: make([]uint64, 128+64*histSub)} }

func histIndex(us uint64) int {
	if us < 128 {
		return int(us)
	}
	e := bits.Len64(us) - 7 // us >> e is in [64, 128)
	return 128 + (e-1)*histSub + int(us>>e) - 64
}

// histValue is the upper bound (µs) of bucket i.
func histValue(i int) uint64 {
	if i < 128 {
		return uint64(i)
	}
	e := (i-128)/histSub + 1
	sub := uint64((i-128)%histSub + 64)
	return ((sub + 1) << e) - 1
}

func (h *hist) add(d time.Duration) { h.addN(d, 1) }

func (h *hist) addN(d time.Duration, n uint64) {
	us := uint64(max(d.Microseconds(), 0))
	i := histIndex(us)
	h.mu.Lock()
	if i >= len(h.counts) {
		i = len(h.counts) - 1
	}
	h.counts[i] += n
	h.n += n
	h.max = max(h.max, us)
	h.mu.Unlock()
}

// addMany records many durations under one lock.
func (h *hist) addMany(ds []time.Duration) {
	h.mu.Lock()
	for _, d := range ds {
		us := uint64(max(d.Microseconds(), 0))
		i := min(histIndex(us), len(h.counts)-1)
		h.counts[i]++
		h.n++
		h.max = max(h.max, us)
	}
	h.mu.Unlock()
}

// snapshot returns a copy and, if reset, clears h (for per-interval
// progress figures).
func (h *hist) snapshot(reset bool) *hist {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := &hist{counts: append([]uint64(nil), h.counts...), n: h.n, max: h.max}
	if reset {
		clear(h.counts)
		h.n, h.max = 0, 0
	}
	return out
}

// quantileMS returns the q-quantile in milliseconds (0 when empty).
func (h *hist) quantileMS(q float64) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return float64(min(histValue(i), h.max)) / 1000
		}
	}
	return float64(h.max) / 1000
}
