package httpapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// limitBundle is a server whose failure limiter runs on a fake clock and
// which counts its token lookups in the database.
type limitBundle struct {
	*testBundle
	clock    *fakeClock
	verifies atomic.Int64
}

func setupLimit(t *testing.T, cfg *Config) *limitBundle {
	t.Helper()
	lb := &limitBundle{testBundle: setup(t, cfg), clock: &fakeClock{t: time.Unix(1e9, 0)}}
	// Before any request is served, so without a race.
	lb.server.authFailures.now = lb.clock.now
	lb.server.testHookVerify = func() { lb.verifies.Add(1) }
	return lb
}

// from sends GET /v1/topics from addr (host:port) with token ("" for none)
// through the server's handler.
func (lb *limitBundle) from(t *testing.T, addr, token string) response {
	t.Helper()
	r := httptest.NewRequestWithContext(lb.ctx, http.MethodGet, "http://x/v1/topics", nil)
	r.RemoteAddr = addr
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	lb.server.ServeHTTP(w, r)
	return response{status: w.Code, header: w.Header(), body: w.Body.Bytes()}
}

// badToken is a well-formed secret no token has: VerifyToken looks it up.
func badToken(i int) string { return fmt.Sprintf("pgm_notarealtoken%040d", i) }

// TestAuthFailureLimit: after AuthFailureBurst failures an address gets
// 429 auth_rate_limited with Retry-After and no database lookup; its cached
// valid token still works, other addresses are not affected, and the bucket
// refills at AuthFailureRate.
func TestAuthFailureLimit(t *testing.T) {
	t.Parallel()
	lb := setupLimit(t, &Config{TokenCacheTTL: time.Hour})
	const a, b = "192.0.2.1:1111", "198.51.100.7:2222"
	good := lb.token(t, "good", pgmsg.ScopeAdmin)
	fresh := lb.token(t, "fresh", pgmsg.ScopeAdmin)

	// A valid token from a: verified once, then cached.
	require.Equal(t, http.StatusOK, lb.from(t, a, good).status)
	require.Equal(t, int64(1), lb.verifies.Load())

	// Ten bad tokens from a: 401 each, one lookup each.
	for i := range AuthFailureBurstDefault {
		res := lb.from(t, a, badToken(i))
		require.Equal(t, http.StatusUnauthorized, res.status, i)
		require.Equal(t, "invalid_token", res.errorCode(t))
	}
	require.Equal(t, int64(1+AuthFailureBurstDefault), lb.verifies.Load())

	// The eleventh, a missing token and an uncached valid token: 429,
	// without a lookup.
	for _, tok := range []string{badToken(99), "", "garbage", fresh} {
		res := lb.from(t, a, tok)
		require.Equal(t, http.StatusTooManyRequests, res.status, tok)
		require.Equal(t, "auth_rate_limited", res.errorCode(t))
		require.Equal(t, "1", res.header.Get("Retry-After"))
	}
	require.Equal(t, int64(1+AuthFailureBurstDefault), lb.verifies.Load(), "no database lookup once limited")

	// a's cached token still passes: the cache needs no database.
	require.Equal(t, http.StatusOK, lb.from(t, a, good).status)

	// Another address: a bad token is a 401, a good one a 200.
	res := lb.from(t, b, badToken(100))
	require.Equal(t, http.StatusUnauthorized, res.status)
	require.Equal(t, "invalid_token", res.errorCode(t))
	require.Equal(t, http.StatusOK, lb.from(t, b, fresh).status)

	// One second later a has one attempt again.
	lb.clock.advance(time.Second)
	require.Equal(t, http.StatusUnauthorized, lb.from(t, a, badToken(101)).status)
	require.Equal(t, http.StatusTooManyRequests, lb.from(t, a, badToken(102)).status)
	// Half a second in, the wait left is rounded up.
	lb.clock.advance(500 * time.Millisecond)
	res = lb.from(t, a, badToken(103))
	require.Equal(t, http.StatusTooManyRequests, res.status)
	require.Equal(t, "1", res.header.Get("Retry-After"))

	// After a long pause the bucket is full, not more than full.
	lb.clock.advance(time.Hour)
	for i := range AuthFailureBurstDefault {
		require.Equal(t, http.StatusUnauthorized, lb.from(t, a, badToken(200+i)).status, i)
	}
	require.Equal(t, http.StatusTooManyRequests, lb.from(t, a, badToken(300)).status)

	// Successes give their token back: a client that keeps
	// authenticating with valid (uncached) tokens is never limited.
	lb.clock.advance(time.Hour)
	lb.server.tokens = newTokenCache(-1)
	for i := range 3 * AuthFailureBurstDefault {
		require.Equal(t, http.StatusOK, lb.from(t, a, good).status, i)
	}
}

// TestAuthFailureLimitRetryAfter: Retry-After is the wait for the next
// token, in whole seconds rounded up, at a slow refill rate.
func TestAuthFailureLimitRetryAfter(t *testing.T) {
	t.Parallel()
	lb := setupLimit(t, &Config{AuthFailureBurst: 2, AuthFailureRate: 0.1})
	const a = "192.0.2.1:1"
	for range 2 {
		require.Equal(t, http.StatusUnauthorized, lb.from(t, a, "").status)
	}
	res := lb.from(t, a, "")
	require.Equal(t, http.StatusTooManyRequests, res.status)
	require.Equal(t, "10", res.header.Get("Retry-After"))
	lb.clock.advance(7500 * time.Millisecond)
	res = lb.from(t, a, "")
	require.Equal(t, http.StatusTooManyRequests, res.status)
	require.Equal(t, "3", res.header.Get("Retry-After"))
	lb.clock.advance(3 * time.Second)
	require.Equal(t, http.StatusUnauthorized, lb.from(t, a, "").status)
}

// TestAuthFailureLimitAddresses: the port does not matter, IPv6 addresses
// count by /64, and X-Forwarded-For is ignored.
func TestAuthFailureLimitAddresses(t *testing.T) {
	t.Parallel()
	lb := setupLimit(t, &Config{AuthFailureBurst: 1})
	limited := func(addr string, hdr ...string) bool {
		t.Helper()
		r := httptest.NewRequestWithContext(lb.ctx, http.MethodGet, "http://x/v1/topics", nil)
		r.RemoteAddr = addr
		if len(hdr) > 0 {
			r.Header.Set("X-Forwarded-For", hdr[0])
		}
		w := httptest.NewRecorder()
		lb.server.ServeHTTP(w, r)
		require.Contains(t, []int{http.StatusUnauthorized, http.StatusTooManyRequests}, w.Code)
		return w.Code == http.StatusTooManyRequests
	}
	require.False(t, limited("192.0.2.1:1"))
	require.True(t, limited("192.0.2.1:2"), "another port of the same host")
	require.True(t, limited("192.0.2.1:3", "203.0.113.9"), "X-Forwarded-For is not trusted")
	require.False(t, limited("192.0.2.2:1"))
	require.False(t, limited("[2001:db8:1:2::1]:1"))
	require.True(t, limited("[2001:db8:1:2:ffff::9]:1"), "same /64")
	require.False(t, limited("[2001:db8:1:3::1]:1"), "another /64")
	require.False(t, limited("[::ffff:192.0.2.3]:1"))
	require.True(t, limited("192.0.2.3:1"), "an IPv4-mapped address is the IPv4 address")
}

// TestAuthFailureLimitBounded: however many addresses fail, the limiter
// tracks at most AuthFailureClients of them, and still limits the address
// that keeps failing.
func TestAuthFailureLimitBounded(t *testing.T) {
	t.Parallel()
	lb := setupLimit(t, &Config{AuthFailureClients: 100})
	for i := range 5000 {
		addr := fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255)
		require.Equal(t, http.StatusUnauthorized, lb.from(t, addr, "").status)
		require.LessOrEqual(t, lb.server.authFailures.len(), 100)
	}
	require.Equal(t, 100, lb.server.authFailures.len())
	// IPv6 too, and a hostile, unparsable RemoteAddr.
	for i := range 5000 {
		require.Equal(t, http.StatusUnauthorized, lb.from(t, fmt.Sprintf("[2001:db8:%x::1]:1", i), "").status)
		require.Equal(t, http.StatusUnauthorized, lb.from(t, strings.Repeat("x", i%50)+fmt.Sprint(i), "").status)
	}
	require.Equal(t, 100, lb.server.authFailures.len())

	// After a pause the refilled buckets are forgotten, and an address
	// that keeps failing is limited again while others come and go.
	lb.clock.advance(time.Hour)
	const bad = "192.0.2.1:1"
	for i := range AuthFailureBurstDefault {
		require.Equal(t, http.StatusUnauthorized, lb.from(t, bad, "").status, i)
	}
	for i := range 99 {
		require.Equal(t, http.StatusUnauthorized, lb.from(t, fmt.Sprintf("10.200.0.%d:1", i), "").status)
	}
	require.Equal(t, http.StatusTooManyRequests, lb.from(t, bad, "").status)
	require.LessOrEqual(t, lb.server.authFailures.len(), 100)
}

// TestAuthFailureLimitDisabled: a negative AuthFailureBurst turns the
// limiter off.
func TestAuthFailureLimitDisabled(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{AuthFailureBurst: -1})
	require.Nil(t, tb.server.authFailures)
	for i := range 3 * AuthFailureBurstDefault {
		res := tb.do(t, http.MethodGet, "/v1/topics", badToken(i), nil)
		require.Equal(t, http.StatusUnauthorized, res.status, i)
	}
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodGet, "/v1/topics", tb.admin, nil).status)
}

func TestAuthFailureLimitConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{AuthFailureRate: -1}, {AuthFailureClients: -1}} {
		cfg.Client = &pgmsg.Client{}
		_, err := New(cfg)
		require.Error(t, err)
		require.Contains(t, err.Error(), "AuthFailure")
	}
}

// len returns the number of addresses tracked.
func (l *authLimiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
