package logconsumer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The estimate is set when a window of at least rateWindow closes, from
// the records counted in it, and holds until the next one closes.
func TestRateMeter(t *testing.T) {
	var m RateMeter
	t0 := time.Unix(1000, 0)
	require.Zero(t, m.Rate())
	m.Add(100, t0)
	m.Add(100, t0.Add(100*time.Millisecond))
	require.Zero(t, m.Rate(), "no window has closed yet")
	m.Add(200, t0.Add(200*time.Millisecond))
	require.InDelta(t, 2000, m.Rate(), 0.001, "400 records in 200ms")
	m.Add(0, t0.Add(300*time.Millisecond))
	require.InDelta(t, 2000, m.Rate(), 0.001, "held until the next window closes")
	m.Add(0, t0.Add(1200*time.Millisecond))
	require.Zero(t, m.Rate(), "a window of empty claims")
	m.Add(50, t0.Add(1300*time.Millisecond))
	m.Add(0, t0.Add(2200*time.Millisecond))
	require.InDelta(t, 50, m.Rate(), 0.001, "50 records in one second")
}

// The cooldown holds a wake-up only while the consumer receives at least
// ClaimCooldownMinRate records a second.
func TestClaimNotBeforeMinRate(t *testing.T) {
	cn := &Consumer{cfg: Config{ClaimCooldown: 30 * time.Millisecond, ClaimCooldownMinRate: 1000}}
	last := time.Now()
	cn.lastClaim.Store(last.UnixNano())
	require.True(t, cn.claimNotBefore().IsZero(), "no rate yet: at once")
	cn.received.Add(100, last.Add(-time.Second))
	cn.received.Add(100, last)
	require.True(t, cn.claimNotBefore().IsZero(), "200 records/s: at once")
	cn.received.Add(400, last.Add(200*time.Millisecond))
	require.Equal(t, last.Add(30*time.Millisecond).UnixNano(), cn.claimNotBefore().UnixNano(), "2,000 records/s: held")
	cn.cfg.ClaimCooldownMinRate = 0
	cn.received = RateMeter{}
	require.Equal(t, last.Add(30*time.Millisecond).UnixNano(), cn.claimNotBefore().UnixNano(), "at any rate")
	cn.cfg.ClaimCooldown = 0
	require.True(t, cn.claimNotBefore().IsZero(), "no cooldown")
}
