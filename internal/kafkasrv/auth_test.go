package kafkasrv_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkagroup"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// SASL/PLAIN with pgmsg tokens over TLS, and each request authorized by
// the token's scopes: publish → Write, consume → Read on topics and the
// groups it names, admin → create/delete/alter. A wrong password is
// SASL_AUTHENTICATION_FAILED; a client that does not authenticate loses
// its connection before any request but ApiVersions.
func TestAuth(t *testing.T) {
	t.Parallel()
	b := newEnv(t, 16, 2*time.Minute)
	ctx := b.Ctx
	for _, name := range []string{"orders", "other"} {
		_, err := b.Client.CreateTopic(ctx, name, pgmsg.TopicConfig{Partitions: 1})
		require.NoError(t, err)
	}
	token := func(name string, scopes ...string) string {
		secret, _, err := b.Client.CreateToken(ctx, name, scopes, nil)
		require.NoError(t, err)
		return secret
	}
	admin := token("admin", pgmsg.ScopeAdmin)
	pub := token("pub", "publish:orders")
	cons := token("cons", "consume:orders/group:billing")

	cert := selfSignedTLS(t)
	var srv *kafkasrv.Server
	groups, err := kafkagroup.New(kafkagroup.Config{Client: b.Client,
		Authorize: func(ctx context.Context, kind, name, op string) bool { return srv.Authorize(ctx, kind, name, op) }})
	require.NoError(t, err)
	t.Cleanup(groups.Close)
	srv, err = kafkasrv.New(kafkasrv.Config{Client: b.Client, RequireAuth: true, Groups: groups,
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	roots := x509.NewCertPool()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	require.NoError(t, err)
	roots.AddCert(leaf)
	client := func(secret string, opts ...kgo.Opt) *kgo.Client {
		o := []kgo.Opt{kgo.SeedBrokers(ln.Addr().String()), kgo.DialTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
			kgo.RequestRetries(1), kgo.RetryTimeout(2 * time.Second)}
		if secret != "" {
			o = append(o, kgo.SASL(plain.Auth{User: "u", Pass: secret}.AsMechanism()))
		}
		cl, err := kgo.NewClient(append(o, opts...)...)
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return cl
	}
	rec := func(topic string) *kgo.Record { return &kgo.Record{Topic: topic, Value: []byte("v")} }

	// publish:orders writes orders, not other.
	p := client(pub, kgo.DisableIdempotentWrite())
	require.NoError(t, p.ProduceSync(ctx, rec("orders")).FirstErr())
	require.ErrorIs(t, p.ProduceSync(ctx, rec("other")).FirstErr(), kerr.TopicAuthorizationFailed)

	// A wrong password, and no SASL at all.
	require.ErrorIs(t, client("pgmsg_wrong").Ping(ctx), kerr.SaslAuthenticationFailed)
	none := client("")
	require.Error(t, none.Ping(ctx))

	// consume:orders/group:billing reads orders in group billing, not in
	// another group, and cannot write.
	c := client(cons, kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fs := c.PollFetches(ctx)
	require.NoError(t, fs.Err())
	require.Equal(t, 1, fs.NumRecords())
	require.NoError(t, c.CommitUncommittedOffsets(ctx))
	gs, err := b.Client.ListGroups(ctx, "orders", "billing")
	require.NoError(t, err)
	require.Len(t, gs, 1)
	require.Equal(t, int64(1), gs[0].NextOffset, "the Kafka commit is the pgmsg cursor")
	require.ErrorIs(t, client(cons, kgo.DisableIdempotentWrite()).ProduceSync(ctx, rec("orders")).FirstErr(), kerr.TopicAuthorizationFailed)
	adm := kadm.NewClient(client(cons))
	_, err = adm.FetchOffsets(ctx, "other-group")
	require.ErrorIs(t, err, kerr.GroupAuthorizationFailed)

	// Only admin creates topics.
	_, err = kadm.NewClient(client(pub)).CreateTopic(ctx, 1, 1, nil, "made")
	require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
	_, err = kadm.NewClient(client(admin)).CreateTopic(ctx, 1, 1, nil, "made")
	require.NoError(t, err)

	// A revoked token: refused at the next authentication.
	toks, err := b.Client.ListTokens(ctx)
	require.NoError(t, err)
	for _, tk := range toks {
		if tk.Name == "pub" {
			require.NoError(t, b.Client.RevokeToken(ctx, tk.ID))
		}
	}
	require.ErrorIs(t, client(pub).Ping(ctx), kerr.SaslAuthenticationFailed)
}

func selfSignedTLS(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pgmsg test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
