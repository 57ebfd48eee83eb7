package kafkasrv_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// oldToken creates a token as pgmsg did before SCRAM verifiers existed
// (token_create without them) and returns its secret.
func oldToken(t *testing.T, c *pgmsg.Client, ctx context.Context, name string, scopes ...string) string {
	t.Helper()
	secret := "pgm_oldtokenoldtokenoldtokenoldtokenoldtoken1" + name
	_, err := c.Pool().Exec(ctx, "SELECT token_id FROM "+pgx.Identifier{c.Schema()}.Sanitize()+
		".token_create($1, $2, $3, $4)", name, pgmsg.HashToken(secret), secret[:10], scopes)
	require.NoError(t, err)
	return secret
}

// SASL/SCRAM-SHA-256 and SCRAM-SHA-512 with pgmsg tokens, with franz-go's
// SCRAM client: username the token's name, password its secret. Each
// mechanism produces and consumes under the token's scopes exactly as
// PLAIN does; a wrong password, an unknown name, a revoked and an expired
// token are SASL_AUTHENTICATION_FAILED; a token created without
// verifiers (no token_scram row) is refused by SCRAM with a message
// saying to re-create it or use PLAIN, and PLAIN still accepts it.
func TestAuthSCRAM(t *testing.T) {
	t.Parallel()
	// TokenRecheck of a nanosecond: every request checks the token again
	// (by id, as SCRAM leaves no secret), so a revocation ends the next.
	tb := setup(t, &kafkasrv.Config{RequireAuth: true, TokenRecheck: time.Nanosecond})
	ctx := tb.Ctx
	for _, name := range []string{"orders", "other"} {
		_, err := tb.Client.CreateTopic(ctx, name, pgmsg.TopicConfig{Partitions: 1})
		require.NoError(t, err)
	}
	token := func(name string, scopes ...string) string {
		secret, _, err := tb.Client.CreateToken(ctx, name, scopes, nil)
		require.NoError(t, err)
		return secret
	}
	mechs := map[string]func(user, pass string) sasl.Mechanism{
		"SCRAM-SHA-256": func(u, p string) sasl.Mechanism { return scram.Auth{User: u, Pass: p}.AsSha256Mechanism() },
		"SCRAM-SHA-512": func(u, p string) sasl.Mechanism { return scram.Auth{User: u, Pass: p}.AsSha512Mechanism() },
	}
	client := func(m sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
		return tb.kclient(t, append([]kgo.Opt{kgo.SASL(m), kgo.RequestRetries(1), kgo.RetryTimeout(2 * time.Second),
			kgo.DisableIdempotentWrite()}, opts...)...)
	}
	rec := func(topic, v string) *kgo.Record { return &kgo.Record{Topic: topic, Value: []byte(v)} }

	rw := token("rw", "publish:orders", "consume:orders")
	for mech, m := range mechs {
		p := client(m("rw", rw))
		require.NoError(t, p.ProduceSync(ctx, rec("orders", mech)).FirstErr(), mech)
		// The scopes, as with PLAIN: no publish on other.
		require.ErrorIs(t, p.ProduceSync(ctx, rec("other", mech)).FirstErr(), kerr.TopicAuthorizationFailed, mech)
		require.ErrorIs(t, client(m("rw", "pgm_wrong")).Ping(ctx), kerr.SaslAuthenticationFailed, mech)
		require.ErrorIs(t, client(m("nobody", rw)).Ping(ctx), kerr.SaslAuthenticationFailed, mech)
	}
	for mech, m := range mechs {
		c := client(m("rw", rw), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var got []string
		for len(got) < 2 {
			fs := c.PollFetches(ctx)
			require.NoError(t, fs.Err(), mech)
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		require.ElementsMatch(t, []string{"SCRAM-SHA-256", "SCRAM-SHA-512"}, got, mech)
	}

	// A token without verifiers: SCRAM says what to do, PLAIN works.
	old := oldToken(t, tb.Client, ctx, "old", "publish:orders")
	for mech, m := range mechs {
		err := client(m("old", old)).Ping(ctx)
		require.ErrorIs(t, err, kerr.SaslAuthenticationFailed, mech)
		require.ErrorContains(t, err, "re-create the token", mech)
		require.ErrorContains(t, err, "SASL/PLAIN", mech)
	}
	require.NoError(t, client(plain.Auth{User: "old", Pass: old}.AsMechanism()).ProduceSync(ctx, rec("orders", "plain")).FirstErr())

	// Expired, and revoked while a connection is open: refused at the
	// next authentication, and the open connection's next request fails.
	exp := token("exp", "publish:orders")
	_, err := tb.Client.Pool().Exec(ctx, "UPDATE "+pgx.Identifier{tb.Client.Schema()}.Sanitize()+
		".token SET expires_at = now() - interval '1 second' WHERE name = 'exp'")
	require.NoError(t, err)
	require.ErrorIs(t, client(mechs["SCRAM-SHA-512"]("exp", exp)).Ping(ctx), kerr.SaslAuthenticationFailed)
	open := client(mechs["SCRAM-SHA-256"]("rw", rw), kgo.RecordRetries(2))
	require.NoError(t, open.Ping(ctx))
	toks, err := tb.Client.ListTokens(ctx)
	require.NoError(t, err)
	for _, tk := range toks {
		if tk.Name == "rw" {
			require.NoError(t, tb.Client.RevokeToken(ctx, tk.ID))
		}
	}
	require.Error(t, open.ProduceSync(ctx, rec("orders", "after revoke")).FirstErr(),
		"the open connection closed at its next request and its re-authentication refused")
	require.ErrorIs(t, client(mechs["SCRAM-SHA-256"]("rw", rw)).Ping(ctx), kerr.SaslAuthenticationFailed)
	recs, err := tb.Client.Fetch(ctx, "orders", 0, 0, 100)
	require.NoError(t, err)
	require.Len(t, recs, 3, "two SCRAM records and the PLAIN one, nothing after the revocation")
}

// Malformed and unsupported SCRAM messages on the wire: each is
// SASL_AUTHENTICATION_FAILED with a message, and the connection closes.
func TestAuthSCRAMRefusesMalformed(t *testing.T) {
	t.Parallel()
	tb := setup(t, &kafkasrv.Config{RequireAuth: true})
	_, _, err := tb.Client.CreateToken(tb.Ctx, "tok", []string{pgmsg.ScopeAdmin}, nil)
	require.NoError(t, err)

	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version = 1
	hs.Mechanism = "SCRAM-SHA-256"
	for first, want := range map[string]string{
		"p=tls-server-end-point,,n=tok,r=abc": "channel binding",
		"n,,n=tok":                            "n=USER,r=NONCE",
		"\x00\xff":                            "GS2 header",
		"n,,n=tok,r=abc":                      "", // well-formed: the server-first message comes back
	} {
		rc := dialRaw(t, tb)
		h := rc.roundTrip(t, hs).(*kmsg.SASLHandshakeResponse)
		require.Zero(t, h.ErrorCode)
		require.Equal(t, []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}, h.SupportedMechanisms)
		au := kmsg.NewPtrSASLAuthenticateRequest()
		au.Version = 1
		au.SASLAuthBytes = []byte(first)
		resp := rc.roundTrip(t, au).(*kmsg.SASLAuthenticateResponse)
		if want == "" {
			require.Zero(t, resp.ErrorCode)
			require.Regexp(t, `^r=abc[^,]+,s=[A-Za-z0-9+/=]+,i=4096$`, string(resp.SASLAuthBytes))
			// A client-final whose binding is not the first message's.
			au.SASLAuthBytes = []byte("c=eSws,r=abc,p=AAAA")
			want = "channel binding"
			resp = rc.roundTrip(t, au).(*kmsg.SASLAuthenticateResponse)
		}
		require.Equal(t, kerr.SaslAuthenticationFailed.Code, resp.ErrorCode, "%q", first)
		require.NotNil(t, resp.ErrorMessage)
		require.Contains(t, *resp.ErrorMessage, want, "%q", first)
		_, _, err := rc.read(t)
		require.Error(t, err, "the connection closes after a failed authentication")
	}
}
