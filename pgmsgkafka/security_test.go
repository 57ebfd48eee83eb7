package pgmsgkafka_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/testtls"
	"github.com/pgmsg/pgmsg/pgmsgkafka"
)

// secureCluster is a kfake cluster with TLS that requires a client
// certificate of certs' authority, and SASL with a user per mechanism
// (password "secret-<mechanism>").
func secureCluster(t *testing.T, certs *testtls.Certs) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(certs.Server(true)), kfake.EnableSASL(),
		kfake.Superuser(pgmsgkafka.SASLPlain, "plain-user", "secret-PLAIN"),
		kfake.Superuser(pgmsgkafka.SASLScramSHA256, "scram256-user", "secret-SCRAM-SHA-256"),
		kfake.Superuser(pgmsgkafka.SASLScramSHA512, "scram512-user", "secret-SCRAM-SHA-512"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

var roundTrips atomic.Int64

// roundTrip creates a topic through the backend, publishes two records
// and reads them back with a client of the same security options.
func roundTrip(t *testing.T, brokers []string, tlsCfg *pgmsgkafka.TLSConfig, saslCfg *pgmsgkafka.SASLConfig) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := pgmsgkafka.New(&pgmsgkafka.Config{Brokers: brokers, TLS: tlsCfg, SASL: saslCfg,
		Opts: []kgo.Opt{kgo.RequestRetries(1), kgo.RetryTimeout(3 * time.Second)}})
	if err != nil {
		return err
	}
	defer b.Close()
	topic := fmt.Sprintf("secure-%d", roundTrips.Add(1))
	if _, err := b.CreateTopic(ctx, topic, pgmsg.TopicConfig{Partitions: 1}); err != nil {
		return err
	}
	recs := []*pgmsg.Record{
		{Topic: topic, Key: []byte("k1"), Value: []byte("v1"), Headers: map[string][]byte{"h": []byte("1")}},
		{Topic: topic, Key: []byte("k2"), Value: []byte("v2")},
	}
	if err := b.Publish(ctx, recs, nil); err != nil {
		return err
	}
	sec, err := pgmsgkafka.SecurityOpts(tlsCfg, saslCfg)
	require.NoError(t, err)
	cl, err := kgo.NewClient(append(sec, kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	require.NoError(t, err)
	defer cl.Close()
	var got []string
	for len(got) < len(recs) {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Key)+"="+string(r.Value)) })
	}
	require.Equal(t, []string{"k1=v1", "k2=v2"}, got)
	return nil
}

// TestSecurityTLSAndSASL connects to a broker that requires mutual TLS and
// SASL with each of PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, as Confluent
// Cloud (PLAIN over TLS), MSK (SCRAM-SHA-512 over TLS, or mutual TLS) and
// Aiven (a CA file and a client certificate, or SCRAM) ask.
func TestSecurityTLSAndSASL(t *testing.T) {
	t.Parallel()
	certs := testtls.New(t)
	c := secureCluster(t, certs)
	tlsCfg := &pgmsgkafka.TLSConfig{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}
	for _, m := range []struct{ mech, user string }{
		{"PLAIN", "plain-user"}, {"SCRAM-SHA-256", "scram256-user"}, {"scram-sha-512", "scram512-user"},
	} {
		t.Run(m.mech, func(t *testing.T) {
			pass := "secret-" + strings.ToUpper(m.mech)
			require.NoError(t, roundTrip(t, c.ListenAddrs(), tlsCfg,
				&pgmsgkafka.SASLConfig{Mechanism: m.mech, User: m.user, Password: pass}))
			err := roundTrip(t, c.ListenAddrs(), tlsCfg,
				&pgmsgkafka.SASLConfig{Mechanism: m.mech, User: m.user, Password: "wrong"})
			// kfake closes the connection (Kafka answers
			// SASL_AUTHENTICATION_FAILED): an error either way.
			require.Error(t, err, "a wrong password")
		})
	}
}

// TestSecurityTLSRefusals: the server's certificate is verified (against
// the CA file, for the name in ServerName or the broker's host), and a
// broker that requires a client certificate refuses a client without one.
func TestSecurityTLSRefusals(t *testing.T) {
	t.Parallel()
	certs := testtls.New(t, "kafka.example.test") // not 127.0.0.1
	c := secureCluster(t, certs)
	sasl := &pgmsgkafka.SASLConfig{Mechanism: "PLAIN", User: "plain-user", Password: "secret-PLAIN"}
	full := pgmsgkafka.TLSConfig{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}

	// The certificate names kafka.example.test, the address is 127.0.0.1.
	err := roundTrip(t, c.ListenAddrs(), &full, sasl)
	var hostErr x509.HostnameError
	require.ErrorAs(t, err, &hostErr, "a certificate for another host: %v", err)

	named := full
	named.ServerName = "kafka.example.test"
	require.NoError(t, roundTrip(t, c.ListenAddrs(), &named, sasl))

	noCA := named
	noCA.CAFile = ""
	err = roundTrip(t, c.ListenAddrs(), &noCA, sasl)
	require.ErrorContains(t, err, "certificate signed by unknown authority")

	insecure := noCA
	insecure.InsecureSkipVerify = true
	require.NoError(t, roundTrip(t, c.ListenAddrs(), &insecure, sasl))

	noCert := named
	noCert.CertFile, noCert.KeyFile = "", ""
	require.Error(t, roundTrip(t, c.ListenAddrs(), &noCert, sasl), "the broker requires a client certificate")

	// Plain TCP to a TLS broker fails too.
	require.Error(t, roundTrip(t, c.ListenAddrs(), nil, sasl))
}

// TestSecurityOAuthBearer: OAUTHBEARER sends the static token, or the
// token file's current content on each new connection. kfake has no
// OAUTHBEARER, so the test answers SASLHandshake and SASLAuthenticate
// itself and records the tokens that arrive.
func TestSecurityOAuthBearer(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	var mu sync.Mutex
	var tokens []string
	valid := map[string]bool{"token-static": true, "token-one": true, "token-two": true}
	c.ControlKey(int16(kmsg.SASLHandshake), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.SASLHandshakeRequest)
		resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
		if req.Mechanism != pgmsgkafka.SASLOAuthBearer {
			resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		}
		resp.SupportedMechanisms = []string{pgmsgkafka.SASLOAuthBearer}
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.SASLAuthenticateRequest)
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		// RFC 7628: "n,,\x01auth=Bearer <token>\x01\x01"
		_, rest, _ := strings.Cut(string(req.SASLAuthBytes), "auth=Bearer ")
		tok, _, _ := strings.Cut(rest, "\x01")
		mu.Lock()
		tokens = append(tokens, tok)
		mu.Unlock()
		if !valid[tok] {
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			msg := "invalid token"
			resp.ErrorMessage = &msg
		}
		return resp, nil, true
	})
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), tokens...)
	}

	require.NoError(t, roundTrip(t, c.ListenAddrs(), nil, &pgmsgkafka.SASLConfig{Mechanism: "OAUTHBEARER", Token: "token-static"}))
	require.Contains(t, seen(), "token-static")

	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte("token-one\n"), 0o600))
	cfg := &pgmsgkafka.SASLConfig{Mechanism: "OAUTHBEARER", TokenFile: file}
	require.NoError(t, roundTrip(t, c.ListenAddrs(), nil, cfg))
	require.Contains(t, seen(), "token-one")
	// The renewed token is read for the next connection.
	require.NoError(t, os.WriteFile(file, []byte("token-two"), 0o600))
	require.NoError(t, roundTrip(t, c.ListenAddrs(), nil, cfg))
	require.Contains(t, seen(), "token-two")

	err = roundTrip(t, c.ListenAddrs(), nil, &pgmsgkafka.SASLConfig{Mechanism: "OAUTHBEARER", Token: "expired"})
	require.ErrorIs(t, err, kerr.SaslAuthenticationFailed)
}

// TestSecurityConfigChecks: a wrong combination is refused by New with
// ErrInvalidArgument before anything dials.
func TestSecurityConfigChecks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	for name, tc := range map[string]struct {
		tls  *pgmsgkafka.TLSConfig
		sasl *pgmsgkafka.SASLConfig
		msg  string
	}{
		"unknown mechanism":   {sasl: &pgmsgkafka.SASLConfig{Mechanism: "GSSAPI", User: "u", Password: "p"}, msg: "not one of"},
		"plain without pass":  {sasl: &pgmsgkafka.SASLConfig{Mechanism: "PLAIN", User: "u"}, msg: "needs a user and a password"},
		"scram with a token":  {sasl: &pgmsgkafka.SASLConfig{Mechanism: "SCRAM-SHA-256", User: "u", Password: "p", Token: "t"}, msg: "not a token"},
		"oauth with a user":   {sasl: &pgmsgkafka.SASLConfig{Mechanism: "OAUTHBEARER", User: "u", Password: "p"}, msg: "not a user"},
		"oauth without token": {sasl: &pgmsgkafka.SASLConfig{Mechanism: "OAUTHBEARER"}, msg: "needs a token"},
		"oauth both":          {sasl: &pgmsgkafka.SASLConfig{Mechanism: "OAUTHBEARER", Token: "t", TokenFile: empty}, msg: "not both"},
		"oauth empty file":    {sasl: &pgmsgkafka.SASLConfig{Mechanism: "OAUTHBEARER", TokenFile: empty}, msg: "is empty"},
		"oauth missing file":  {sasl: &pgmsgkafka.SASLConfig{Mechanism: "OAUTHBEARER", TokenFile: filepath.Join(dir, "nope")}, msg: "token file"},
		"credentials no mech": {sasl: &pgmsgkafka.SASLConfig{User: "u", Password: "p"}, msg: "without a SASL mechanism"},
		"missing CA":          {tls: &pgmsgkafka.TLSConfig{CAFile: filepath.Join(dir, "nope")}, msg: "CA file"},
		"CA not PEM":          {tls: &pgmsgkafka.TLSConfig{CAFile: empty}, msg: "no PEM certificate"},
		"cert without key":    {tls: &pgmsgkafka.TLSConfig{CertFile: empty}, msg: "both files or neither"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pgmsgkafka.New(&pgmsgkafka.Config{Brokers: []string{"127.0.0.1:1"}, TLS: tc.tls, SASL: tc.sasl})
			require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.msg)
			var pe *pgmsg.Error
			require.True(t, errors.As(err, &pe))
		})
	}
}
