package httpapi

import (
	"crypto/sha256"
	"errors"
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
// 401 invalid_token for an unknown, revoked or expired one.
func (s *Server) authenticate(r *http.Request) (*pgmsg.Token, error) {
	if s.cfg.InsecureNoAuth {
		return devToken, nil
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, newAPIError(errUnauthorized, "missing bearer token: send Authorization: Bearer <token> (create one with `pgmsg token create`)")
	}
	scheme, secret, ok := strings.Cut(h, " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return nil, newAPIError(errUnauthorized, "malformed Authorization header: use Authorization: Bearer <token>")
	}
	if tok := s.tokens.get(secret); tok != nil {
		return tok, nil
	}
	tok, err := s.client.VerifyToken(r.Context(), secret)
	if err != nil {
		if errors.Is(err, pgmsg.ErrInvalidToken) {
			return nil, newAPIError(errInvalidToken, "invalid token: unknown, revoked or expired")
		}
		return nil, err
	}
	s.tokens.put(secret, tok)
	return tok, nil
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
