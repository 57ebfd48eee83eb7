package logconsumer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The estimate is set when a window of at least rateWindow closes, from
// the records counted in it, and holds until the next one closes.
func TestRateMeter(t *testing.T) {
	var m rateMeter
	t0 := time.Unix(1000, 0)
	require.Zero(t, m.rate())
	m.add(100, t0)
	m.add(100, t0.Add(100*time.Millisecond))
	require.Zero(t, m.rate(), "no window has closed yet")
	m.add(200, t0.Add(200*time.Millisecond))
	require.InDelta(t, 2000, m.rate(), 0.001, "400 records in 200ms")
	m.add(0, t0.Add(300*time.Millisecond))
	require.InDelta(t, 2000, m.rate(), 0.001, "held until the next window closes")
	m.add(0, t0.Add(1200*time.Millisecond))
	require.Zero(t, m.rate(), "a window of empty claims")
	m.add(50, t0.Add(1300*time.Millisecond))
	m.add(0, t0.Add(2200*time.Millisecond))
	require.InDelta(t, 50, m.rate(), 0.001, "50 records in one second")
}

// The cooldown holds a wake-up only while the consumer receives at least
// ClaimCooldownMinRate records a second.
func TestClaimNotBeforeMinRate(t *testing.T) {
	cn := &Consumer{cfg: Config{ClaimCooldown: 30 * time.Millisecond, ClaimCooldownMinRate: 1000}}
	last := time.Now()
	cn.lastClaim.Store(last.UnixNano())
	require.True(t, cn.claimNotBefore().IsZero(), "no rate yet: at once")
	cn.received.add(100, last.Add(-time.Second))
	cn.received.add(100, last)
	require.True(t, cn.claimNotBefore().IsZero(), "200 records/s: at once")
	cn.received.add(400, last.Add(200*time.Millisecond))
	require.Equal(t, last.Add(30*time.Millisecond).UnixNano(), cn.claimNotBefore().UnixNano(), "2,000 records/s: held")
	cn.cfg.ClaimCooldownMinRate = 0
	cn.received = rateMeter{}
	require.Equal(t, last.Add(30*time.Millisecond).UnixNano(), cn.claimNotBefore().UnixNano(), "at any rate")
	cn.cfg.ClaimCooldown = 0
	require.True(t, cn.claimNotBefore().IsZero(), "no cooldown")
}
