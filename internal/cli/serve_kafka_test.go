package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// `pgmsg serve --kafka-listen` serves Kafka beside HTTP: a franz-go
// producer's record is the topic's, read back by the native API.
func TestServeKafka(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr strings.Builder
	g := &globals{databaseURL: s.b.URL, schema: s.b.Schema, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, output: "table"}
	kafkac := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- g.serve(ctx, serveOpts{listen: "127.0.0.1:0", maxConns: 4, authBurst: 10, insecureNoAuth: true,
			kafka: kafkaOpts{listen: "127.0.0.1:0", maxRequestBytes: kafkasrv.MaxRequestBytesDefault, autoCreate: true,
				autoPartitions: 2, ready: func(a string) { kafkac <- a }}})
	}()
	var addr string
	select {
	case addr = <-kafkac:
	case err := <-served:
		t.Fatalf("serve: %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer cl.Close()
	r := &kgo.Record{Topic: "via-kafka", Key: []byte("k"), Value: []byte("v")}
	require.NoError(t, cl.ProduceSync(ctx, r).FirstErr())

	pc, err := pgmsg.NewClient(s.b.Pool, &pgmsg.Config{Schema: s.b.Schema})
	require.NoError(t, err)
	defer pc.Close()
	d, err := pc.DescribeTopic(ctx, "via-kafka")
	require.NoError(t, err)
	require.Equal(t, 2, d.Partitions, "auto-created with --kafka-auto-create-partitions")
	got, err := pc.Fetch(ctx, "via-kafka", r.Partition, r.Offset, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "v", string(got[0].Value))

	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	require.Contains(t, stdout.String(), "pgmsg serving Kafka on "+addr)
	require.Contains(t, stdout.String(), "advertised as "+addr+")", "the listener's own address, not :0")
}

// The Kafka flags are checked before serve connects: without
// authentication the listener binds loopback only.
func TestServeKafkaFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kafka-listen", "0.0.0.0:9092", "--insecure-no-auth"}, "--kafka-listen 0.0.0.0:9092 is refused with --insecure-no-auth"},
		{[]string{"--kafka-listen", "0.0.0.0:9092"}, "--kafka-listen 0.0.0.0:9092 needs --kafka-tls-cert"},
		{[]string{"--kafka-tls-cert", "x"}, "--kafka-tls-cert and --kafka-tls-key need --kafka-listen"},
		{[]string{"--kafka-listen", "0.0.0.0:0", "--kafka-tls-cert", "/nonexistent.crt"}, "--kafka-tls-cert and --kafka-tls-key go together"},
		{[]string{"--kafka-listen", "0.0.0.0:0", "--kafka-tls-cert", "/nonexistent.crt", "--kafka-tls-key", "/nonexistent.key"}, "cannot load --kafka-tls-cert"},
		{[]string{"--kafka-advertise", "h:1"}, "--kafka-advertise needs --kafka-listen"},
		{[]string{"--kafka-listen", "127.0.0.1:0", "--kafka-advertise", "nohost"}, "--kafka-advertise must be host:port"},
		{[]string{"--kafka-listen", "127.0.0.1:0", "--kafka-max-request-bytes", "0"}, "--kafka-max-request-bytes must be positive"},
	} {
		var stdout, stderr strings.Builder
		args := append([]string{"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "serve"}, tc.args...)
		code := Main(args, strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, 1, code, tc.args)
		require.Contains(t, stderr.String(), tc.want, tc.args)
	}
}

// Without --insecure-no-auth, serve's Kafka listener wants SASL/PLAIN with
// a token, here over TLS (--kafka-tls-cert/--kafka-tls-key).
func TestServeKafkaAuthTLS(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	out := s.ok("", "token", "create", "pub", "--scope", "publish:orders", "-o", "json")
	secret := secretRE.FindString(out)
	require.NotEmpty(t, secret, out)
	s.ok("", "topic", "create", "orders")
	certFile, keyFile, cert := selfSigned(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr strings.Builder
	g := &globals{databaseURL: s.b.URL, schema: s.b.Schema, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, output: "table"}
	kafkac := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- g.serve(ctx, serveOpts{listen: "127.0.0.1:0", maxConns: 4, authBurst: 10,
			kafka: kafkaOpts{listen: "127.0.0.1:0", maxRequestBytes: kafkasrv.MaxRequestBytesDefault, autoPartitions: 1,
				tlsCert: certFile, tlsKey: keyFile, nodeID: -1, ready: func(a string) { kafkac <- a }}})
	}()
	var addr string
	select {
	case addr = <-kafkac:
	case err := <-served:
		t.Fatalf("serve: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
		kgo.SASL(plain.Auth{User: "pub", Pass: secret}.AsMechanism()), kgo.DisableIdempotentWrite())
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("v")}).FirstErr())
	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	require.Contains(t, stdout.String(), "(TLS, SASL/PLAIN or SCRAM-SHA-256/512 with a token as the password")
}
