package pgmsg

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// Token errors, registered with their codes like the sentinels of errors.go.
var (
	// ErrUnknownToken is returned by RevokeToken when no live token has the
	// id (PMA01).
	ErrUnknownToken error = errs.UnknownToken
	// ErrInvalidToken is returned by VerifyToken for a secret that is
	// malformed, unknown, revoked or expired (PMA02). It does not say which.
	ErrInvalidToken error = errs.InvalidToken
	// ErrTokenExists is returned by CreateToken when a live token has the
	// name already (PMA03).
	ErrTokenExists error = errs.TokenExists
)

// Scope kinds. A scope is ScopeAdmin or "KIND:PATTERN", where PATTERN is a
// topic or queue name in which '*' matches any run of characters. A consume
// scope can also name the consumer groups it may use:
// "consume:PATTERN/group:GROUP_PATTERN" (for example
// "consume:orders/group:billing"); without "/group:" it allows every group.
const (
	ScopeAdmin = "admin"
	// ScopeRead allows what ScopeAdmin allows on reads only (every GET of
	// the admin API: topics, groups, queues, jobs): the dashboard's
	// read-only viewers and monitoring scripts, which must not change
	// anything.
	ScopeRead    = "read"
	ScopePublish = "publish" // publish to matching topics
	ScopeConsume = "consume" // consume from, commit and extend claims on matching topics
	ScopeEnqueue = "enqueue" // enqueue into matching queues
	ScopeClaim   = "claim"   // claim, complete, fail and extend jobs of matching queues
)

// tokenPrefix starts every secret, so that a leaked token is recognisable.
const tokenPrefix = "pgm_"

// Token describes an API token of the HTTP server. The secret is only
// returned once, by CreateToken.
type Token struct {
	ID     int64    `json:"id"`
	Name   string   `json:"name"`
	Prefix string   `json:"prefix"`
	Scopes []string `json:"scopes"`
	// CreatedAt, ExpiresAt (nil: never), RevokedAt (nil: live) and
	// LastUsedAt (nil: never; updated at most once a minute).
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// CreateTokenOpts are options of CreateToken; nil means defaults.
type CreateTokenOpts struct {
	// ExpiresAt ends the token's validity. Default: never.
	ExpiresAt time.Time
}

// scopeGroupSep separates a consume scope's topic pattern from its group
// pattern.
const scopeGroupSep = "/group:"

// ValidateScope returns ErrInvalidArgument unless scope is ScopeAdmin,
// ScopeRead,
// KIND:PATTERN with KIND one of publish, consume, enqueue, claim, or
// consume:PATTERN/group:GROUP_PATTERN.
func ValidateScope(scope string) error {
	if scope == ScopeAdmin || scope == ScopeRead {
		return nil
	}
	validPattern := func(p string) bool { return ValidateName("pattern", strings.ReplaceAll(p, "*", "x")) == nil }
	kind, pattern, ok := strings.Cut(scope, ":")
	if ok {
		switch kind {
		case ScopePublish, ScopeEnqueue, ScopeClaim:
			if validPattern(pattern) {
				return nil
			}
		case ScopeConsume:
			topics, groups, scoped := strings.Cut(pattern, scopeGroupSep)
			if validPattern(topics) && (!scoped || validPattern(groups)) {
				return nil
			}
		}
	}
	return newError(ErrInvalidArgument, "invalid scope %q: use admin, read, publish|consume|enqueue|claim:PATTERN or consume:PATTERN/group:PATTERN, e.g. publish:orders.*", truncate(scope, 80))
}

// Allows reports whether the token's scopes permit kind (ScopePublish ...)
// on name, a topic or queue. An admin token allows everything; kind
// ScopeAdmin is only allowed to admin tokens.
//
// For ScopeConsume it only counts scopes that allow every group; use
// AllowsGroup where the group is known.
func (t *Token) Allows(kind, name string) bool {
	for _, s := range t.Scopes {
		if s == ScopeAdmin {
			return true
		}
		k, pattern, ok := strings.Cut(s, ":")
		if ok && k == kind && kind != ScopeAdmin && !strings.Contains(pattern, scopeGroupSep) && MatchPattern(pattern, name) {
			return true
		}
	}
	return false
}

// CanRead reports whether the token may read what the admin API shows
// (ScopeAdmin or ScopeRead).
func (t *Token) CanRead() bool {
	for _, s := range t.Scopes {
		if s == ScopeAdmin || s == ScopeRead {
			return true
		}
	}
	return false
}

// AllowsGroup reports whether the token may consume topic as group: an
// admin scope, consume:PATTERN matching topic (every group), or
// consume:PATTERN/group:GROUP_PATTERN matching both.
func (t *Token) AllowsGroup(topic, group string) bool {
	for _, s := range t.Scopes {
		if s == ScopeAdmin {
			return true
		}
		k, pattern, ok := strings.Cut(s, ":")
		if !ok || k != ScopeConsume {
			continue
		}
		topics, groups, scoped := strings.Cut(pattern, scopeGroupSep)
		if MatchPattern(topics, topic) && (!scoped || MatchPattern(groups, group)) {
			return true
		}
	}
	return false
}

// MatchPattern reports whether name matches pattern, in which '*' matches
// any run of characters (including none) and every other byte itself.
func MatchPattern(pattern, name string) bool {
	// Iterative glob match: on a mismatch, backtrack only to the last '*'
	// (linear in len(pattern)*len(name) at worst, never exponential).
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// HashToken returns the SHA-256 of a secret, the form tokens are stored
// and looked up in (SQL: token_verify(sha256(convert_to(secret, 'UTF8')))).
func HashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// CreateToken creates an API token with scopes and returns its secret,
// which is not stored and cannot be shown again, with its description. It
// fails with ErrInvalidName, ErrInvalidArgument (a bad scope) or
// ErrTokenExists.
func (c *Client) CreateToken(ctx context.Context, name string, scopes []string, opts *CreateTokenOpts) (string, *Token, error) {
	// token_create() refuses a bad name (PM003) and then bad scopes (PM004:
	// none, or one ValidateScope refuses), before it writes anything; Go
	// refuses only a name that cannot be sent (a scope that cannot is
	// refused by the server as ErrInvalidArgument too).
	if err := sendableNames("token", name); err != nil {
		return "", nil, err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", nil, err
	}
	secret := tokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	var expiresAt *time.Time
	if opts != nil {
		expiresAt = &opts.ExpiresAt
	}
	row, err := c.store.TokenCreate(ctx, c.pool, name, HashToken(secret), secret[:len(tokenPrefix)+6], scopes, expiresAt)
	if err != nil {
		return "", nil, err
	}
	return secret, (*Token)(row), nil
}

// ListTokens returns every token, revoked and expired ones included, by id.
func (c *Client) ListTokens(ctx context.Context) ([]*Token, error) {
	rows, err := c.store.TokenList(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	out := make([]*Token, len(rows))
	for i, r := range rows {
		out[i] = (*Token)(r)
	}
	return out, nil
}

// RevokeToken revokes a live token at once. It fails with ErrUnknownToken.
func (c *Client) RevokeToken(ctx context.Context, id int64) error {
	return c.store.TokenRevoke(ctx, c.pool, id)
}

// VerifyToken returns the live token whose secret this is, or
// ErrInvalidToken.
func (c *Client) VerifyToken(ctx context.Context, secret string) (*Token, error) {
	if !strings.HasPrefix(secret, tokenPrefix) || len(secret) > 200 {
		return nil, newError(ErrInvalidToken, "invalid token")
	}
	tok, err := c.store.TokenVerify(ctx, c.pool, HashToken(secret))
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, newError(ErrInvalidToken, "invalid token: unknown, revoked or expired")
	}
	return (*Token)(tok), nil
}
