package kafkasrv

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/scram"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// TokenRecheckDefault is how often an authenticated connection's token is
// verified again (a revoked or expired token ends its connections within
// this long).
const TokenRecheckDefault = time.Minute

// authState is a connection's authentication (Config.RequireAuth):
// SASL/PLAIN whose password is a pgmsg token's secret, or SASL/SCRAM-SHA-256
// or SCRAM-SHA-512 whose username is a token's name and whose password is
// its secret (scram.go).
type authState struct {
	mu        sync.Mutex
	mechanism string // after SaslHandshake
	// secret is PLAIN's password, with which the token is checked again;
	// SCRAM leaves no secret, so its token is checked again by id.
	secret string
	// scram is SCRAM's exchange between the client's first message and
	// its final one.
	scram      *scram.Conversation
	scramTokID int64 // the token the SCRAM exchange's username named
	tok        *pgmsg.Token
	verifiedAt time.Time
}

// mechanisms are the SASL mechanisms SaslHandshake advertises.
var mechanisms = append([]string{"PLAIN"}, scram.Mechanisms...)

type principalKey struct{}

// principal returns the token of the request's connection, nil when the
// listener does not authenticate.
func principal(ctx context.Context) *pgmsg.Token {
	t, _ := ctx.Value(principalKey{}).(*pgmsg.Token)
	return t
}

// preAuth reports whether key may be sent before authenticating.
func preAuth(key int16) bool {
	return key == 18 || key == 17 || key == 36 // ApiVersions, SaslHandshake, SaslAuthenticate
}

// principalCtx returns ctx carrying the connection's token, checking it
// again when TokenRecheck has passed since it last was. An error closes
// the connection: unauthenticated, or the token revoked or expired.
func (c *conn) principalCtx(ctx context.Context) (context.Context, error) {
	a := &c.auth
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tok == nil {
		return nil, errors.New("kafkasrv: request before SASL authentication")
	}
	if time.Since(a.verifiedAt) > c.s.cfg.TokenRecheck {
		var tok *pgmsg.Token
		var err error
		if a.secret != "" {
			tok, err = c.s.client.VerifyToken(ctx, a.secret)
		} else {
			tok, err = c.s.store.TokenVerifyID(ctx, c.s.client.Pool(), a.tok.ID)
			if err == nil && tok == nil {
				err = errors.New("kafkasrv: the connection's token was revoked or expired")
			}
		}
		if err != nil {
			return nil, err
		}
		a.tok, a.verifiedAt = tok, time.Now()
	}
	return context.WithValue(ctx, principalKey{}, a.tok), nil
}

func (c *conn) saslHandshake(req *kmsg.SASLHandshakeRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = mechanisms
	// v0 is advertised because librdkafka counts SASL handshakes as
	// supported only when v0 is in the range (it then sends v1, followed
	// by SaslAuthenticate); v0's raw SASL frames are not read, so a v0
	// handshake is refused before any.
	if req.Version == 0 {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return resp
	}
	if !c.s.cfg.RequireAuth {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return resp
	}
	if !slices.Contains(mechanisms, req.Mechanism) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return resp
	}
	c.auth.mu.Lock()
	c.auth.mechanism = req.Mechanism
	c.auth.mu.Unlock()
	return resp
}

// saslAuthenticate checks SASL/PLAIN's message (authzid NUL username NUL
// password): the password must be a live pgmsg token's secret; the
// username is not checked (the token names its holder). SCRAM's
// messages are scramAuthenticate's.
func (c *conn) saslAuthenticate(ctx context.Context, req *kmsg.SASLAuthenticateRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	a := &c.auth
	a.mu.Lock()
	mech, done := a.mechanism, a.tok != nil
	a.mu.Unlock()
	if mech == "" || done {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		resp.ErrorMessage = strp("SaslHandshake (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) comes first, once per connection")
		return resp, nil
	}
	fail := func(msg string) (kmsg.Response, error) {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = &msg
		c.authFailed = true
		return resp, nil
	}
	if mech != "PLAIN" {
		return c.scramAuthenticate(ctx, mech, req.SASLAuthBytes, resp, fail)
	}
	parts := bytes.SplitN(req.SASLAuthBytes, []byte{0}, 3)
	if len(parts) != 3 || len(parts[2]) == 0 {
		return fail("SASL/PLAIN message must be authzid NUL username NUL password")
	}
	secret := string(parts[2])
	tok, err := c.s.client.VerifyToken(ctx, secret)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, pgmsg.ErrInvalidToken) {
			return fail("invalid token: the password must be a live pgmsg token (pgmsg token create)")
		}
		return fail("cannot verify the token now")
	}
	a.mu.Lock()
	a.secret, a.tok, a.verifiedAt = secret, tok, time.Now()
	a.mu.Unlock()
	return resp, nil
}

// authorize returns 0 when the connection's principal may do op on the
// resource, else the Kafka error code to answer.
func (c *conn) authorize(ctx context.Context, kind, name, op string) int16 {
	return c.s.authorizeCtx(ctx, kind, name, op)
}

// authorizeCtx is authorize for the principal ctx carries. The token's
// scopes map onto Kafka's operations: publish:T allows Write (and
// Describe) on topic T; consume:T (with or without /group:G) Read and
// Describe on T, and consume scopes Read, Describe and Delete on the
// groups they name; read allows Describe of everything; admin everything,
// and only admin creates, deletes or alters topics.
func (s *Server) authorizeCtx(ctx context.Context, kind, name, op string) int16 {
	if !s.cfg.RequireAuth {
		return 0
	}
	if allowed(principal(ctx), kind, name, op) {
		return 0
	}
	switch kind {
	case "group":
		return kerr.GroupAuthorizationFailed.Code
	case "topic":
		return kerr.TopicAuthorizationFailed.Code
	}
	return kerr.ClusterAuthorizationFailed.Code
}

// Authorize reports whether the principal ctx carries (set by the
// listener on the requests it dispatches) may do op ("read", "write",
// "describe", "create", "delete", "alter") on the resource (kind "topic"
// or "group", name). kafkagroup.Config.Authorize is this.
func (s *Server) Authorize(ctx context.Context, kind, name, op string) bool {
	return s.authorizeCtx(ctx, kind, name, op) == 0
}

func allowed(t *pgmsg.Token, kind, name, op string) bool {
	if t == nil {
		return false
	}
	if t.Allows(pgmsg.ScopeAdmin, "") {
		return true
	}
	switch kind {
	case "topic":
		switch op {
		case "write":
			return t.Allows(pgmsg.ScopePublish, name)
		case "read":
			return consumesTopic(t, name)
		case "describe":
			return t.CanRead() || t.Allows(pgmsg.ScopePublish, name) || consumesTopic(t, name)
		}
	case "group":
		switch op {
		case "read", "delete":
			return consumesGroup(t, name)
		case "describe":
			return t.CanRead() || consumesGroup(t, name)
		}
	}
	return false
}

// consumesTopic: a consume scope whose topic pattern matches, whatever
// its groups.
func consumesTopic(t *pgmsg.Token, topic string) bool {
	for _, sc := range t.Scopes {
		k, pattern, ok := strings.Cut(sc, ":")
		if !ok || k != pgmsg.ScopeConsume {
			continue
		}
		topics, _, _ := strings.Cut(pattern, pgmsgtype.ScopeGroupSep)
		if pgmsg.MatchPattern(topics, topic) {
			return true
		}
	}
	return false
}

// consumesGroup: a consume scope that allows every group, or names a
// group pattern that matches.
func consumesGroup(t *pgmsg.Token, group string) bool {
	for _, sc := range t.Scopes {
		k, pattern, ok := strings.Cut(sc, ":")
		if !ok || k != pgmsg.ScopeConsume {
			continue
		}
		_, groups, scoped := strings.Cut(pattern, pgmsgtype.ScopeGroupSep)
		if !scoped || pgmsg.MatchPattern(groups, group) {
			return true
		}
	}
	return false
}
