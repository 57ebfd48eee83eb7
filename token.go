package pgmsg

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"github.com/pgmsg/pgmsg/pgmsgtype"
	"strings"
	"time"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/scram"
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

// Scope kinds (pgmsgtype's). A scope is ScopeAdmin or "KIND:PATTERN",
// where PATTERN is a topic or queue name in which '*' matches any run of
// characters; a consume scope can also name the consumer groups it may use
// ("consume:orders/group:billing"). Token.Allows and Token.AllowsGroup
// check them.
const (
	ScopeAdmin   = pgmsgtype.ScopeAdmin
	ScopeRead    = pgmsgtype.ScopeRead
	ScopePublish = pgmsgtype.ScopePublish
	ScopeConsume = pgmsgtype.ScopeConsume
	ScopeEnqueue = pgmsgtype.ScopeEnqueue
	ScopeClaim   = pgmsgtype.ScopeClaim
)

// tokenPrefix starts every secret, so that a leaked token is recognisable.
const tokenPrefix = "pgm_"

// Token describes an API token of the HTTP server (pgmsgtype.Token). The
// secret is only returned once, by CreateToken.
type Token = pgmsgtype.Token

// CreateTokenOpts are options of CreateToken; nil means defaults.
type CreateTokenOpts struct {
	// ExpiresAt ends the token's validity. Default: never.
	ExpiresAt time.Time
}

// scopeGroupSep separates a consume scope's topic pattern from its group
// pattern.
const scopeGroupSep = pgmsgtype.ScopeGroupSep

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

// MatchPattern reports whether name matches pattern, in which '*' matches
// any run of characters (pgmsgtype.MatchPattern).
func MatchPattern(pattern, name string) bool { return pgmsgtype.MatchPattern(pattern, name) }

// HashToken returns the SHA-256 of a secret, the form tokens are stored
// and looked up in (SQL: token_verify(sha256(convert_to(secret, 'UTF8')))).
func HashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// CreateToken creates an API token with scopes and returns its secret,
// which is not stored and cannot be shown again, with its description.
// Besides the secret's SHA-256 it stores the secret's SCRAM-SHA-256 and
// SCRAM-SHA-512 verifiers (random salts, 4096 iterations), with which the
// Kafka listener authenticates SASL/SCRAM (docs/kafka.md). It
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
	// The SCRAM verifiers of the Kafka listener's SASL/SCRAM, one per
	// mechanism, each with its own random salt.
	verifiers := make([]string, 0, len(scram.Mechanisms))
	for _, m := range scram.Mechanisms {
		v, err := scram.NewVerifier(m, secret)
		if err != nil {
			return "", nil, err
		}
		verifiers = append(verifiers, v.String())
	}
	row, err := c.store.TokenCreate(ctx, c.pool, name, HashToken(secret), secret[:len(tokenPrefix)+6], scopes, expiresAt, verifiers)
	if err != nil {
		return "", nil, err
	}
	return secret, row, nil
}

// ListTokens returns every token, revoked and expired ones included, by id.
func (c *Client) ListTokens(ctx context.Context) ([]*Token, error) {
	return c.store.TokenList(ctx, c.pool)
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
	return tok, nil
}
