package httpapi

import (
	"crypto/sha256"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg"
)

type tokenKey struct{}

// devToken is the identity of every request under InsecureNoAuth.
var devToken = &pgmsg.Token{Name: "insecure-no-auth", Scopes: []string{pgmsg.ScopeAdmin}}

// authenticate returns the request's token: 401 unauthorized without one,
// 401 invalid_token for an unknown, revoked or expired one, and 429
// auth_rate_limited when the client's address has failed too often
// (authLimiter), without asking the database. A token in the cache is
// accepted even then: it needs no database round trip, and an attacker
// who has it needs no guessing.
//
// No secret is compared byte by byte here or in the library: the secret's
// SHA-256 is the key of the cache and of the database lookup (a unique
// index), so timing depends on the hash of a guess, which the guesser
// cannot steer towards the real one's. There is no negative cache: guesses
// do not repeat, so it would only fill up, and the limiter already bounds
// what failures cost.
func (s *Server) authenticate(r *http.Request) (*pgmsg.Token, error) {
	if s.cfg.InsecureNoAuth {
		return devToken, nil
	}
	key := ""
	if s.authFailures != nil {
		key = clientKey(r)
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, s.authFailure(key, newAPIError(errUnauthorized, "missing bearer token: send Authorization: Bearer <token> (create one with `pgmsg token create`)"))
	}
	scheme, secret, ok := strings.Cut(h, " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return nil, s.authFailure(key, newAPIError(errUnauthorized, "malformed Authorization header: use Authorization: Bearer <token>"))
	}
	if tok := s.tokens.get(secret); tok != nil {
		return tok, nil
	}
	if err := s.authAttempt(key); err != nil {
		return nil, err
	}
	if s.testHookVerify != nil {
		s.testHookVerify()
	}
	tok, err := s.client.VerifyToken(r.Context(), secret)
	if err != nil {
		if errors.Is(err, pgmsg.ErrInvalidToken) {
			return nil, newAPIError(errInvalidToken, "invalid token: unknown, revoked or expired")
		}
		s.authRefund(key)
		return nil, err
	}
	s.authRefund(key)
	s.tokens.put(secret, tok)
	return tok, nil
}

// authAttempt takes a token of the client's failure bucket before an
// attempt is checked, or returns 429 auth_rate_limited if it is empty.
func (s *Server) authAttempt(key string) error {
	if s.authFailures == nil {
		return nil
	}
	if ok, wait := s.authFailures.take(key); !ok {
		e := newAPIError(errAuthRateLimited, "too many failed authentications from %s: retry later with a valid token", key).(*apiError)
		e.retryAfter = int(math.Ceil(wait.Seconds()))
		return e
	}
	return nil
}

// authFailure counts a failure that needed no database (no or a malformed
// header) and returns err, or 429 if the client is over its limit.
func (s *Server) authFailure(key string, err error) error {
	if lerr := s.authAttempt(key); lerr != nil {
		return lerr
	}
	return err
}

// authRefund gives back the token authAttempt took, for a success.
func (s *Server) authRefund(key string) {
	if s.authFailures != nil {
		s.authFailures.refund(key)
	}
}

// mayUse reports whether the token has any scope of kind (pgmsg.ScopePublish
// ...) or the admin scope: whether a request of that kind could be allowed
// for some topic or queue.
func mayUse(tok *pgmsg.Token, kind string) bool {
	for _, sc := range tok.Scopes {
		if sc == pgmsg.ScopeAdmin {
			return true
		}
		if k, _, ok := strings.Cut(sc, ":"); ok && k == kind {
			return true
		}
	}
	return false
}

// authorize returns 403 forbidden unless the request's token allows kind on
// name (a topic or queue).
func authorize(r *http.Request, kind, name string) error {
	// Validate first: a name is at most 200 characters of a small alphabet
	// by the time it reaches pattern matching.
	label := "topic"
	if kind == pgmsg.ScopeEnqueue || kind == pgmsg.ScopeClaim {
		label = "queue"
	}
	if err := pgmsg.ValidateName(label, name); err != nil {
		return err
	}
	tok, _ := r.Context().Value(tokenKey{}).(*pgmsg.Token)
	if tok == nil {
		return newAPIError(errUnauthorized, "missing bearer token")
	}
	if !tok.Allows(kind, name) {
		return newAPIError(errForbidden, "token %q has no %s scope for %q", tok.Name, kind, name)
	}
	return nil
}

// authorizeGroup checks that the request's token may consume topic as
// group (pgmsg.Token.AllowsGroup).
func authorizeGroup(r *http.Request, topic, group string) error {
	if err := validNames("topic", topic, "group", group); err != nil {
		return err
	}
	tok, _ := r.Context().Value(tokenKey{}).(*pgmsg.Token)
	if tok == nil {
		return newAPIError(errUnauthorized, "missing bearer token")
	}
	if !tok.AllowsGroup(topic, group) {
		return newAPIError(errForbidden, "token %q has no consume scope for %q as group %q", tok.Name, topic, group)
	}
	return nil
}

// tokenCache remembers verified tokens for a short time, keyed by the
// secret's hash, so that most requests do not read the token table.
type tokenCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[[32]byte]cachedToken
}

type cachedToken struct {
	tok     *pgmsg.Token
	expires time.Time
}

const tokenCacheMax = 10000

func newTokenCache(ttl time.Duration) *tokenCache {
	return &tokenCache{ttl: ttl, m: map[[32]byte]cachedToken{}}
}

func (c *tokenCache) get(secret string) *pgmsg.Token {
	if c.ttl <= 0 {
		return nil
	}
	k := sha256.Sum256([]byte(secret))
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil
	}
	if time.Now().After(e.expires) || (e.tok.ExpiresAt != nil && time.Now().After(*e.tok.ExpiresAt)) {
		delete(c.m, k)
		return nil
	}
	return e.tok
}

// forget drops every cached entry of token id.
func (c *tokenCache) forget(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if e.tok.ID == id {
			delete(c.m, k)
		}
	}
}

func (c *tokenCache) put(secret string, tok *pgmsg.Token) {
	if c.ttl <= 0 {
		return
	}
	k := sha256.Sum256([]byte(secret))
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= tokenCacheMax {
		now := time.Now()
		for key, e := range c.m {
			if now.After(e.expires) {
				delete(c.m, key)
			}
		}
		if len(c.m) >= tokenCacheMax {
			c.m = map[[32]byte]cachedToken{}
		}
	}
	c.m[k] = cachedToken{tok: tok, expires: time.Now().Add(c.ttl)}
}
