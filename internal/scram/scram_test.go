package scram_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sasl"
	fscram "github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/pgmsg/pgmsg/internal/scram"
)

// franz-go's SCRAM client against the server side, both mechanisms: the
// right password authenticates and the client accepts the server's
// signature; a wrong one is ErrProof.
func TestFranzGoClient(t *testing.T) {
	for _, mech := range scram.Mechanisms {
		t.Run(mech, func(t *testing.T) {
			v, err := scram.NewVerifier(mech, "pgm_secret,=x")
			require.NoError(t, err)
			require.Equal(t, scram.Iterations, v.Iterations)
			require.Len(t, v.Salt, scram.SaltBytes)
			parsed, err := scram.ParseVerifier(v.String())
			require.NoError(t, err)
			require.Equal(t, v, parsed)

			auth := fscram.Auth{User: "billing,a=b", Pass: "pgm_secret,=x"}
			m := auth.AsSha256Mechanism()
			if mech == scram.SHA512 {
				m = auth.AsSha512Mechanism()
			}
			require.Equal(t, mech, m.Name())
			final, err := exchange(t, m, v)
			require.NoError(t, err)
			require.NotEmpty(t, final)

			auth.Pass = "pgm_wrong"
			m = auth.AsSha256Mechanism()
			if mech == scram.SHA512 {
				m = auth.AsSha512Mechanism()
			}
			_, err = exchange(t, m, v)
			require.ErrorIs(t, err, scram.ErrProof)
		})
	}
}

// exchange runs a client mechanism against the server's conversation.
func exchange(t *testing.T, m sasl.Mechanism, v *scram.Verifier) ([]byte, error) {
	t.Helper()
	sess, clientFirst, err := m.Authenticate(context.Background(), "127.0.0.1:9092")
	require.NoError(t, err)
	first, err := scram.ParseClientFirst(clientFirst)
	require.NoError(t, err)
	require.Equal(t, "billing,a=b", first.User, "the escaped username")
	conv, serverFirst, err := scram.Start(first, v)
	require.NoError(t, err)
	done, clientFinal, err := sess.Challenge(serverFirst)
	require.NoError(t, err)
	require.False(t, done)
	serverFinal, err := conv.Finish(clientFinal)
	if err != nil {
		return nil, err
	}
	done, _, err = sess.Challenge(serverFinal)
	require.NoError(t, err, "the client checks the ServerSignature")
	require.True(t, done)
	return serverFinal, nil
}

// Malformed or unsupported client-first messages are refused with
// ErrMalformed, each with a message saying what is wrong.
func TestClientFirstRefused(t *testing.T) {
	for msg, want := range map[string]string{
		"":                                  "GS2 header",
		"p=tls-server-end-point,,n=u,r=abc": "channel binding",
		"x,,n=u,r=abc":                      "channel binding flag",
		"n,b=z,n=u,r=abc":                   "authzid",
		"n,a=other,n=u,r=abc":               "authzid must be the username",
		"n,,m=ext,n=u,r=abc":                "m= extension",
		"n,,u,r=abc":                        "n=USER",
		"n,,n=,r=abc":                       "empty username",
		"n,,n=a=2Xb,r=abc":                  "bad escape",
		"n,,n=u,r=":                         "nonce",
		"n,,n=u,r=a b":                      "nonce",
		"n,,n=u":                            "n=USER,r=NONCE",
		"n,,n=u,r=abc,junk":                 "extension",
	} {
		_, err := scram.ParseClientFirst([]byte(msg))
		require.ErrorIs(t, err, scram.ErrMalformed, "%q", msg)
		require.Contains(t, err.Error(), want, "%q", msg)
	}
	first, err := scram.ParseClientFirst([]byte("y,a=u,n=u,r=abc,tokenauth=true"))
	require.NoError(t, err, "y (no channel binding, server advertises none), authzid = user, an extension")
	require.Equal(t, "u", first.User)
}

// Malformed client-final messages: refused, never ErrProof's success.
func TestClientFinalRefused(t *testing.T) {
	v, err := scram.NewVerifier(scram.SHA256, "pgm_x")
	require.NoError(t, err)
	first, err := scram.ParseClientFirst([]byte("n,,n=u,r=abc"))
	require.NoError(t, err)
	conv, serverFirst, err := scram.Start(first, v)
	require.NoError(t, err)
	nonce := strings.TrimPrefix(strings.Split(string(serverFirst), ",")[0], "r=")
	for msg, want := range map[string]string{
		"c=biws,r=" + nonce: "p=PROOF",
		"p=AAAA":            "p=PROOF",
		",p=AAAA":           "c=BINDING",
		"c=biws,r=abc,p=" + strings.Repeat("A", 44):           "nonce",
		"c=eSws,r=" + nonce + ",p=" + strings.Repeat("A", 44): "channel binding",
		"c=biws,r=" + nonce + ",p=AAAA":                       "32 bytes",
		"x=biws,r=" + nonce + ",p=AAAA":                       "c=",
	} {
		_, err := conv.Finish([]byte(msg))
		require.ErrorIs(t, err, scram.ErrMalformed, "%q", msg)
		require.Contains(t, err.Error(), want, "%q", msg)
	}
	_, err = conv.Finish([]byte("c=biws,r=" + nonce + ",p=" + strings.Repeat("A", 43) + "="))
	require.ErrorIs(t, err, scram.ErrProof)
}

// Verifiers that are not usable are refused.
func TestParseVerifierRefused(t *testing.T) {
	good, err := scram.NewVerifier(scram.SHA512, "pgm_x")
	require.NoError(t, err)
	s := good.String()
	for _, bad := range []string{"", "SCRAM-SHA-1$4096:c2FsdA==$a:b", strings.Replace(s, "$4096:", "$4095:", 1),
		strings.Replace(s, "SCRAM-SHA-512", "SCRAM-SHA-256", 1), s + "x", strings.Replace(s, "$4096:", "$x:", 1)} {
		_, err := scram.ParseVerifier(bad)
		require.Error(t, err, "%q", bad)
	}
}

// FuzzScram feeds arbitrary client-first and client-final messages to
// the server side: it refuses them with an error or (for a well-formed
// exchange) answers, and never panics; a success needs the password.
//
//	go test -run '^$' -fuzz FuzzScram -fuzztime 60s ./internal/scram/
func FuzzScram(f *testing.F) {
	v, err := scram.NewVerifier(scram.SHA256, "pgm_fuzz")
	require.NoError(f, err)
	f.Add([]byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"), []byte("c=biws,r=rOprNGfwEbeRWgbNEkqO,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	f.Add([]byte("y,a=u=2C,n=u=2C,r=x,e=1"), []byte("c=eSxhPXU9MkMs,r=x,e=2,p="))
	f.Add([]byte("p=tls-unique,,n=u,r=x"), []byte(",p=,p="))
	f.Fuzz(func(t *testing.T, first, final []byte) {
		cf, err := scram.ParseClientFirst(first)
		if err != nil {
			require.ErrorIs(t, err, scram.ErrMalformed)
			return
		}
		conv, _, err := scram.Start(cf, v)
		require.NoError(t, err)
		out, err := conv.Finish(final)
		if err == nil {
			// Only a client that knows the password (or guessed a
			// 32-byte proof) gets here: the fuzzer cannot, since the
			// server's nonce is random.
			t.Fatalf("accepted %q then %q: %q", first, final, out)
		}
	})
}
