package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// stats collects what every mode measures: completed operations (writes
// and reads, or jobs) and two latency distributions. Each latency goes
// into the current progress interval's histogram, for the progress line,
// and into the totals when it is recorded inside the measured window, as
// the counters do, so that the summary holds no warm-up sample. (Folding
// whole intervals into the totals counted the first one, which the
// progress ticker ends a few microseconds after the warm-up: the run's
// cold first second was in every summary's p99.)
type stats struct {
	win window

	writesAll atomic.Int64 // including warm-up, for the live lag
	readsAll  atomic.Int64
	writes    counter
	reads     counter
	errors    atomic.Int64

	errMu    sync.Mutex
	firstErr error

	pubIv, e2eIv       *hist // current interval
	pubTotal, e2eTotal *hist // measured window
}

func newStats(win window) *stats {
	return &stats{win: win, pubIv: newHist(), e2eIv: newHist(), pubTotal: newHist(), e2eTotal: newHist()}
}

func (s *stats) wrote(n int, took time.Duration) {
	s.writesAll.Add(int64(n))
	s.writes.add(s.win, n)
	if took >= 0 {
		s.pubIv.add(took)
		if s.win.counts(time.Now()) {
			s.pubTotal.add(took)
		}
	}
}

// read records n received records whose end-to-end latencies are in e2e
// (may be shorter than n or nil when not measured).
func (s *stats) read(n int, e2e []time.Duration) {
	s.readsAll.Add(int64(n))
	s.reads.add(s.win, n)
	if len(e2e) > 0 {
		s.e2eIv.addMany(e2e)
		if s.win.counts(time.Now()) {
			s.e2eTotal.addMany(e2e)
		}
	}
}

func (s *stats) fail(err error) {
	if err == nil || err == context.Canceled || err == context.DeadlineExceeded {
		return
	}
	s.errors.Add(1)
	s.errMu.Lock()
	if s.firstErr == nil {
		s.firstErr = err
	}
	s.errMu.Unlock()
}

func (s *stats) firstError() string {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.firstErr == nil {
		return ""
	}
	return s.firstErr.Error()
}

// interval returns the histograms of the interval that ends now and
// starts the next one.
func (s *stats) interval() (pub, e2e *hist) {
	return s.pubIv.snapshot(true), s.e2eIv.snapshot(true)
}

// progress prints a line per interval until ctx ends; line formats the
// figures of one interval.
type progressLine func(elapsed time.Duration, dWrites, dReads int64, iv time.Duration, pub, e2e *hist) string

func (s *stats) runProgress(ctx context.Context, env *Env, label string, line progressLine) {
	iv := env.interval()
	t := time.NewTicker(iv)
	defer t.Stop()
	lastW, lastR, last := int64(0), int64(0), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			pub, e2e := s.interval()
			w, r := s.writesAll.Load(), s.readsAll.Load()
			if env.Progress != nil {
				phase := ""
				if last.Before(s.win.measured) { // the interval began in the warm-up
					phase = " (warm-up)"
				}
				text := fmt.Sprintf("%-12s %s%s", label, line(now.Sub(s.win.start).Truncate(time.Second), w-lastW, r-lastR, now.Sub(last), pub, e2e), phase)
				if env.ProgressTTY {
					fmt.Fprintf(env.Progress, "\r\033[K%s", text)
				} else {
					fmt.Fprintln(env.Progress, text)
				}
			}
			lastW, lastR, last = w, r, now
		}
	}
}

func endProgress(env *Env) {
	if env.Progress != nil && env.ProgressTTY {
		fmt.Fprintln(env.Progress)
	}
}

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
