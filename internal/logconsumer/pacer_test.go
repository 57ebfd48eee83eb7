package logconsumer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// No budget: a rate that is not positive makes none, and a nil pacer
// counts nothing and never paces.
func TestClaimPacerOff(t *testing.T) {
	require.Nil(t, NewClaimPacer(0))
	require.Nil(t, NewClaimPacer(-1))
	var p *ClaimPacer
	var m PacerMark
	p.Claimed(&m, 10, time.Unix(1000, 0))
	require.Zero(t, p.Interval(time.Unix(1000, 0)))
	busy, engaged, d := p.State(time.Unix(1000, 0))
	require.Zero(t, busy)
	require.False(t, engaged)
	require.Zero(t, d)
}

// claimAll has n consumers (marks) each claim once, with records, at
// now.
func claimAll(p *ClaimPacer, marks []PacerMark, now time.Time) {
	for i := range marks {
		p.Claimed(&marks[i], 5, now)
	}
}

// The budget holds only once more than PacedMinBusy consumers are busy
// and their claims reached the rate within a window; it then spaces each
// consumer's claims by busy/rate.
func TestClaimPacerThreshold(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewClaimPacer(10)
	marks := make([]PacerMark, PacedMinBusy)
	claimAll(p, marks, t0)
	busy, engaged, d := p.State(t0.Add(time.Second))
	require.Equal(t, PacedMinBusy, busy)
	require.True(t, engaged, "20 claims in a window, at a budget of 10")
	require.Zero(t, d, "20 busy consumers: no pacing")

	marks = append(marks, PacerMark{})
	claimAll(p, marks, t0.Add(time.Second))
	busy, engaged, d = p.State(t0.Add(time.Second + time.Millisecond))
	require.Equal(t, PacedMinBusy+1, busy)
	require.True(t, engaged)
	require.Equal(t, 2100*time.Millisecond, d, "21 consumers at 10 claims a second")
	require.Equal(t, d, p.Interval(t0.Add(time.Second+time.Millisecond)))

	// Many more busy consumers than the budget: at most a minute.
	many := make([]PacerMark, 1000)
	claimAll(p, many, t0.Add(1500*time.Millisecond))
	require.Equal(t, pacedIntervalMax, p.Interval(t0.Add(1500*time.Millisecond)))
}

// The budget engages after a window of at least rate claims, not before,
// and lets go after a window of fewer than half as many.
func TestClaimPacerEngages(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewClaimPacer(100)
	marks := make([]PacerMark, 50)
	claimAll(p, marks, t0) // 50 claims: under the budget
	busy, engaged, d := p.State(t0.Add(time.Second))
	require.Equal(t, 50, busy)
	require.False(t, engaged, "50 claims in a window, at a budget of 100")
	require.Zero(t, d)

	claimAll(p, marks, t0.Add(time.Second))
	claimAll(p, marks, t0.Add(time.Second+time.Millisecond)) // 100 claims
	_, engaged, d = p.State(t0.Add(2 * time.Second))
	require.True(t, engaged)
	require.Equal(t, 500*time.Millisecond, d, "50 consumers at 100 claims a second")

	claimAll(p, marks, t0.Add(2*time.Second)) // 50 claims: half the budget, still engaged
	_, engaged, _ = p.State(t0.Add(3 * time.Second))
	require.True(t, engaged)

	claimAll(p, marks[:49], t0.Add(3*time.Second)) // 49 claims: under half
	busy, engaged, d = p.State(t0.Add(4 * time.Second))
	require.Equal(t, 49, busy, "the 50th consumer's last records were two windows ago")
	require.False(t, engaged)
	require.Zero(t, d)
}

// A consumer counts busy in the window it received records in and the
// next; empty claims count as claims, not as busy; a gap of windows
// forgets everything.
func TestClaimPacerBusyWindows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewClaimPacer(1)
	var a, b PacerMark
	p.Claimed(&a, 3, t0)
	p.Claimed(&a, 3, t0.Add(100*time.Millisecond)) // counted once
	p.Claimed(&b, 0, t0)                           // nothing received
	busy, _, _ := p.State(t0.Add(500 * time.Millisecond))
	require.Equal(t, 1, busy)

	busy, engaged, _ := p.State(t0.Add(1500 * time.Millisecond))
	require.Equal(t, 1, busy, "carried into the next window")
	require.True(t, engaged, "3 claims at a budget of 1")
	p.Claimed(&a, 1, t0.Add(1600*time.Millisecond)) // now in this window, not twice
	p.Claimed(&b, 1, t0.Add(1700*time.Millisecond))
	busy, _, _ = p.State(t0.Add(1800 * time.Millisecond))
	require.Equal(t, 2, busy)

	busy, _, _ = p.State(t0.Add(2500 * time.Millisecond))
	require.Equal(t, 2, busy)
	busy, engaged, _ = p.State(t0.Add(3500 * time.Millisecond))
	require.Zero(t, busy, "nothing received for two windows")
	require.False(t, engaged, "a window of no claims")
	p.Claimed(&a, 1, t0.Add(10*time.Second))
	busy, _, _ = p.State(t0.Add(10 * time.Second))
	require.Equal(t, 1, busy)
}
