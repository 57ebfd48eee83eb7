package kafkasrv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg/internal/scram"
)

// scramAuthenticate runs one step of SASL/SCRAM-SHA-256 or SCRAM-SHA-512
// (RFC 5802, RFC 7677) in SaslAuthenticate: the client-first message
// names the token (username = the token's name, the one `pgmsg token
// create` was given) and gets the server-first message with the salt and
// iterations of the token's stored verifier; the client-final message's
// proof must match the verifier (its password is the token's secret), and
// gets the server-final message with the ServerSignature. A token created
// before the verifiers existed (no token_scram row) is refused with a message
// saying to re-create it or use PLAIN; a revoked or expired token, a
// wrong proof and any malformed message are SASL_AUTHENTICATION_FAILED,
// which closes the connection. The connection's token then carries the
// same scopes as with PLAIN.
func (c *conn) scramAuthenticate(ctx context.Context, mech string, msg []byte, resp *kmsg.SASLAuthenticateResponse,
	fail func(string) (kmsg.Response, error)) (kmsg.Response, error) {
	a := &c.auth
	// One step at a time: the lock is held over the lookups, so that two
	// pipelined SaslAuthenticate requests cannot both use one exchange.
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tok != nil {
		return fail("SASL/" + mech + " already completed on this connection")
	}
	pool := c.s.client.Pool()
	if a.scram == nil {
		first, err := scram.ParseClientFirst(msg)
		if err != nil {
			return fail("SASL/" + mech + ": " + err.Error())
		}
		tok, ver, err := c.s.store.TokenScram(ctx, pool, first.User, mech)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return fail("cannot verify the token now")
		case tok == nil:
			return fail(fmt.Sprintf("invalid token: the SASL/%s username must be the name of a live pgmsg token (pgmsg token create NAME) and the password its secret", mech))
		case ver == nil:
			return fail(fmt.Sprintf("token %q has no %s verifier (it was created before pgmsg stored them): re-create the token (pgmsg token revoke, pgmsg token create) or use SASL/PLAIN", tok.Name, mech))
		}
		conv, serverFirst, err := scram.Start(first, &scram.Verifier{Mechanism: mech, Salt: ver.Salt, Iterations: ver.Iterations,
			StoredKey: ver.StoredKey, ServerKey: ver.ServerKey})
		if err != nil {
			return fail("token " + tok.Name + "'s " + mech + " verifier is not usable: re-create the token or use SASL/PLAIN")
		}
		a.scram, a.scramTokID = conv, tok.ID
		resp.SASLAuthBytes = serverFirst
		return resp, nil
	}
	conv := a.scram
	a.scram = nil
	serverFinal, err := conv.Finish(msg)
	if err != nil {
		if errors.Is(err, scram.ErrProof) {
			return fail(fmt.Sprintf("invalid token: the SASL/%s password must be the secret of the token the username names", mech))
		}
		return fail("SASL/" + mech + ": " + err.Error())
	}
	// The proof matched: the token must still be live (it may have been
	// revoked since the first message), and its use is recorded.
	tok, err := c.s.store.TokenVerifyID(ctx, pool, a.scramTokID)
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return fail("cannot verify the token now")
	case tok == nil:
		return fail("invalid token: revoked or expired")
	}
	a.tok, a.verifiedAt = tok, time.Now()
	resp.SASLAuthBytes = serverFinal
	return resp, nil
}
