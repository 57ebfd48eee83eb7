package kafkasrv

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A woken Fetch waits out the cooldown only when the connection's answers
// have been carrying at least the minimum rate, never past its deadline,
// and not at all when the cooldown is off or on the first answer.
func TestFetchPaceCooldown(t *testing.T) {
	t0 := time.Unix(1000, 0)
	far := t0.Add(time.Hour)
	var p fetchPace
	require.Zero(t, p.cooldown(20*time.Millisecond, 3000, 1, t0, far), "no answer yet")

	p.answered(10, t0)
	p.answered(10, t0.Add(time.Second)) // 10 records a second: a trickle
	require.Zero(t, p.cooldown(20*time.Millisecond, 3000, 1, t0.Add(time.Second+time.Millisecond), far))
	require.Equal(t, 19*time.Millisecond, p.cooldown(20*time.Millisecond, -1, 1, t0.Add(time.Second+time.Millisecond), far),
		"a negative rate holds at any rate")

	// 1,000 records every 10 ms: the cooldown holds.
	now := t0.Add(2 * time.Second)
	for i := range 5 {
		p.answered(1000, now.Add(time.Duration(i)*10*time.Millisecond))
	}
	last := now.Add(40 * time.Millisecond)
	require.Equal(t, 15*time.Millisecond, p.cooldown(20*time.Millisecond, 3000, 1, last.Add(5*time.Millisecond), far))
	require.Equal(t, 2*time.Millisecond, p.cooldown(20*time.Millisecond, 3000, 1, last.Add(5*time.Millisecond), last.Add(7*time.Millisecond)),
		"never past the Fetch's deadline")
	require.LessOrEqual(t, p.cooldown(20*time.Millisecond, 3000, 1, last.Add(30*time.Millisecond), far), time.Duration(0),
		"woken after the cooldown: no wait")
	require.Equal(t, 15*time.Millisecond, p.cooldown(20*time.Millisecond, 3000, 30, last.Add(5*time.Millisecond), far),
		"about 94,000 records a second over 30 partitions: over 3,000 a partition")
	require.Zero(t, p.cooldown(20*time.Millisecond, 3000, 40, last.Add(5*time.Millisecond), far),
		"about 94,000 records a second over 40 partitions: under 3,000 a partition")
	require.Zero(t, p.cooldown(0, 3000, 1, last, far), "off")
	require.Zero(t, p.cooldown(-time.Millisecond, 3000, 1, last, far), "off")
}
