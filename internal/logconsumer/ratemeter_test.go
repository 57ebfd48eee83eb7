package logconsumer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/pgmsgtype"
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

// The budget's interval holds a wake-up at any rate of records, and the
// longer of it and ClaimCooldown counts.
func TestClaimNotBeforePacer(t *testing.T) {
	// A try that crosses into the pacer's next window (the claims were
	// counted in the one before) finds it not engaged: it is made again,
	// so the check always runs.
	for try := 0; try < 5; try++ {
		p := NewClaimPacer(10)
		marks := make([]PacerMark, PacedMinBusy+1)
		now := time.Now()
		claimAll(p, marks, now.Add(-time.Second))
		claimAll(p, marks, now) // engaged: 21 claims in the previous window
		cn := &Consumer{cfg: Config{ClaimCooldown: 30 * time.Millisecond, ClaimCooldownMinRate: 1000, Pacer: p}}
		last := time.Now()
		cn.lastClaim.Store(last.UnixNano())
		if got := cn.claimNotBefore(); !got.IsZero() {
			require.Equal(t, last.Add(2100*time.Millisecond).UnixNano(), got.UnixNano(), "21 busy at 10 claims a second")
			return
		}
	}
	t.Fatal("the pacer was not engaged in any of 5 tries")
}

// The cap of a consumer left at the default grows while its claims come
// back full and halves back when one comes back a quarter full or less,
// except right after a full one; a fixed cap never moves.
func TestClaimCapAdapts(t *testing.T) {
	cn := &Consumer{cfg: Config{MaxRecords: 100, MaxRecordsGrow: 1000}}
	cn.claimCap = 100
	claimOfN := func(n int) *pgmsgtype.Claim {
		cl := &pgmsgtype.Claim{}
		for range n {
			cl.Records = append(cl.Records, &pgmsgtype.Record{})
		}
		return cl
	}
	now := time.Unix(1000, 0)
	var caps []int
	for _, n := range []int{100, 200, 400, 800, 1000, 3, 10, 250, 251, 10, 10, 0, 10} {
		cl := claimOfN(n)
		limit := cn.ClaimCap()
		cn.claimed(cl, limit, now)
		require.Equal(t, MayHaveMore(n, limit, 0), cn.mayHaveMore(cl), "claim of %d", n)
		caps = append(caps, cn.ClaimCap())
	}
	require.Equal(t, []int{200, 400, 800, 1000, 1000, 1000, 500, 500, 500, 250, 125, 100, 100}, caps)

	fixed := &Consumer{cfg: Config{MaxRecords: 100}}
	fixed.claimCap = 100
	for _, n := range []int{100, 100, 0, 5} {
		fixed.claimed(claimOfN(n), 100, now)
		require.Equal(t, 100, fixed.ClaimCap())
	}
}
