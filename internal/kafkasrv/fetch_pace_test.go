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

	// Two answers close together are not a rate: 1 record each, 0.1 ms
	// apart.
	p.answered(1, t0.Add(1100*time.Millisecond))
	p.answered(1, t0.Add(1100*time.Millisecond+100*time.Microsecond))
	require.Zero(t, p.cooldown(20*time.Millisecond, 3000, 1, t0.Add(1101*time.Millisecond), far), "a burst of two answers")

	// 1,000 records every 10 ms for 300 ms: 100,000 a second, the
	// cooldown holds.
	now := t0.Add(2 * time.Second)
	for i := range 31 {
		p.answered(1000, now.Add(time.Duration(i)*10*time.Millisecond))
	}
	last := now.Add(300 * time.Millisecond)
	require.Equal(t, 15*time.Millisecond, p.cooldown(20*time.Millisecond, 3000, 1, last.Add(5*time.Millisecond), far))
	require.Equal(t, 2*time.Millisecond, p.cooldown(20*time.Millisecond, 3000, 1, last.Add(5*time.Millisecond), last.Add(7*time.Millisecond)),
		"never past the Fetch's deadline")
	require.LessOrEqual(t, p.cooldown(20*time.Millisecond, 3000, 1, last.Add(30*time.Millisecond), far), time.Duration(0),
		"woken after the cooldown: no wait")
	require.Equal(t, 15*time.Millisecond, p.cooldown(20*time.Millisecond, 3000, 30, last.Add(5*time.Millisecond), far),
		"100,000 records a second over 30 partitions: over 3,000 a partition")
	require.Zero(t, p.cooldown(20*time.Millisecond, 3000, 40, last.Add(5*time.Millisecond), far),
		"100,000 records a second over 40 partitions: under 3,000 a partition")
	require.Zero(t, p.cooldown(0, 3000, 1, last, far), "off")
	require.Zero(t, p.cooldown(-time.Millisecond, 3000, 1, last, far), "off")
}
