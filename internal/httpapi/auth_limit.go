package httpapi

import (
	"container/list"
	"math"
	"net"
	"net/http"
	"sync"
	"time"
)

// authLimiter rate-limits failed authentications per client address with a
// token bucket: each address may fail burst times in a row, then once per
// 1/rate seconds. An attempt that needs the database (an uncached token)
// or that is malformed takes a token before it is checked; success gives
// it back, so only failures drain the bucket. An address with an empty
// bucket is answered 429 auth_rate_limited before any database round trip.
//
// Memory is bounded: at most max addresses are tracked, in least recently
// used order. Buckets that have refilled are forgotten (they are the same
// as a new one), and when the table is full the least recently used
// address is evicted, so hostile input of any number of addresses cannot
// grow it.
type authLimiter struct {
	burst float64
	rate  float64 // tokens per second
	max   int

	mu sync.Mutex
	// now is the clock (tests replace it before serving).
	now func() time.Time
	m   map[string]*list.Element // of *authBucket
	lru *list.List               // front: most recently used
}

type authBucket struct {
	key    string
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

func newAuthLimiter(burst int, rate float64, max int) *authLimiter {
	return &authLimiter{burst: float64(burst), rate: rate, max: max, now: time.Now,
		m: map[string]*list.Element{}, lru: list.New()}
}

// level brings b's tokens up to now and returns them.
func (l *authLimiter) level(b *authBucket, now time.Time) float64 {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = math.Min(l.burst, b.tokens+d.Seconds()*l.rate)
		b.at = now
	}
	return b.tokens
}

// take takes a token of key's bucket. If it is empty, it returns false and
// how long until a token is back.
func (l *authLimiter) take(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e, ok := l.m[key]
	if !ok {
		l.prune(now)
		b := &authBucket{key: key, tokens: l.burst - 1, at: now}
		l.m[key] = l.lru.PushFront(b)
		return true, 0
	}
	l.lru.MoveToFront(e)
	b := e.Value.(*authBucket)
	if t := l.level(b, now); t < 1 {
		return false, time.Duration((1 - t) / l.rate * float64(time.Second))
	}
	b.tokens--
	return true, 0
}

// refund gives back the token an attempt took: it succeeded, or failed
// for a reason that is not the client's (the database was unavailable).
func (l *authLimiter) refund(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[key]; ok {
		b := e.Value.(*authBucket)
		b.tokens = math.Min(l.burst, l.level(b, l.now())+1)
	}
}

// prune makes room for one more address: it forgets the least recently
// used ones while they have refilled, then evicts the least recently used
// one if the table is still full. Called with mu held.
func (l *authLimiter) prune(now time.Time) {
	for e := l.lru.Back(); e != nil; e = l.lru.Back() {
		b := e.Value.(*authBucket)
		if len(l.m) < l.max && l.level(b, now) < l.burst {
			return
		}
		l.lru.Remove(e)
		delete(l.m, b.key)
	}
}

// clientKey is the address a request is rate-limited by: the host of
// r.RemoteAddr (X-Forwarded-For is not trusted: any client can send it).
// IPv6 addresses count by /64, the block one subscriber usually gets, so
// that rotating through one's own addresses does not reset the bucket.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}
