package kafkacompat

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/cli"
	"github.com/pgmsg/pgmsg/internal/conformance"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/testtls"
	"github.com/pgmsg/pgmsg/pgmsgkafka"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

// TestPgmsgKafkaOverListener runs the log interfaces' conformance suite
// with pgmsgkafka (franz-go underneath) against pgmsg's own Kafka listener
// with mutual TLS and SASL/PLAIN (an admin token): pgmsg's Kafka backend
// works against pgmsg speaking Kafka, through TLSConfig's CA file and
// client certificate and SASLConfig.
func TestPgmsgKafkaOverListener(t *testing.T) {
	certs := testtls.New(t)
	s := startPgmsgServer(t, kafkasrv.Config{TLS: certs.Server(true), RequireAuth: true}, 5*time.Minute)
	tlsCfg := &pgmsgkafka.TLSConfig{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}
	saslCfg := &pgmsgkafka.SASLConfig{Mechanism: "PLAIN", User: "conformance", Password: s.Token(t, "conformance", pgmsg.ScopeAdmin)}
	conformance.Run(t, conformance.Harness{
		New: func(t *testing.T) pgmsg.Backend {
			b, err := pgmsgkafka.New(&pgmsgkafka.Config{Brokers: []string{s.addr}, TLS: tlsCfg, SASL: saslCfg})
			require.NoError(t, err)
			return b
		},
		Consumer: pgmsg.LogConsumerOpts{HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second,
			RedeliveryBackoff: 10 * time.Millisecond},
	})
}

// TestMirrorIntoListenerTLS runs pgmsg mirror (the CLI, with its TLS
// flags) from one pgmsg schema into another through the second one's
// Kafka listener with mutual TLS: every record arrives at its partition
// and offset with its key, value, headers and timestamp. Without the
// client certificate the mirror fails and copies nothing.
func TestMirrorIntoListenerTLS(t *testing.T) {
	certs := testtls.New(t)
	dst := startPgmsgServer(t, kafkasrv.Config{TLS: certs.Server(true)}, 5*time.Minute)
	src := pgmsgtest.New(t, pgtest.Pool(t, &pgtest.Opts{MaxConns: 8}), nil)
	ctx := pgtest.Context(t, 2*time.Minute)
	_, err := src.Client.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 3})
	require.NoError(t, err)
	base := time.UnixMilli(1764979200000)
	var recs []*pgmsg.Record
	for i := range 300 {
		r := &pgmsg.Record{Topic: "orders", Key: []byte("customer-" + string(rune('a'+i%11))),
			Value: []byte("order-" + string(rune('A'+i%26))), Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
		if i%3 == 0 {
			r.Headers = map[string][]byte{"trace": []byte("t"), "n": {byte(i)}}
		}
		recs = append(recs, r)
	}
	require.NoError(t, src.Client.Publish(ctx, recs, nil))

	args := []string{"mirror", "--database-url", pgtest.URL(t), "--schema", src.Schema, "--brokers", dst.addr,
		"--topics", "orders", "--create-topics", "--drain", "--progress", "0", "--tls-ca", certs.CAFile}
	var stdout, stderr bytes.Buffer
	code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, 1, code, "no client certificate: %s", stderr.String())
	_, err = dst.Client.DescribeTopic(ctx, "orders")
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic, "nothing reached the listener")

	stderr.Reset()
	code = cli.Main(append(args, "--tls-cert", certs.ClientCertFile, "--tls-key", certs.ClientKeyFile),
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	for p := int32(0); p < 3; p++ {
		want, err := src.Client.Fetch(context.Background(), "orders", p, 0, 1000)
		require.NoError(t, err)
		got, err := dst.Client.Fetch(context.Background(), "orders", p, 0, 1000)
		require.NoError(t, err)
		require.Len(t, got, len(want), "partition %d", p)
		for i, w := range want {
			g := got[i]
			require.Equal(t, w.Offset, g.Offset)
			require.Equal(t, w.Key, g.Key)
			require.Equal(t, w.Value, g.Value)
			require.True(t, w.Timestamp.Equal(g.Timestamp), "partition %d offset %d: %s, mirrored %s", p, w.Offset, w.Timestamp, g.Timestamp)
			wantH := map[string][]byte{"pgmsg-offset": []byte(strconvI(w.Offset))}
			for k, v := range w.Headers {
				wantH[k] = v
			}
			require.Equal(t, wantH, g.Headers, "partition %d offset %d", p, w.Offset)
		}
	}
}

func strconvI(n int64) string { return strconv.FormatInt(n, 10) }

// TestMirrorIntoListenerSASL runs pgmsg mirror and pgmsg mirror groups
// (the CLI's TLS and SASL flags) into a listener that requires SASL/PLAIN
// with pgmsg tokens over TLS: a wrong token, and a token that may read but
// not write, copy nothing; a token with publish and consume scopes copies
// everything, and mirror groups commits the group's position, which the
// listener's side holds as its pgmsg cursor.
func TestMirrorIntoListenerSASL(t *testing.T) {
	certs := testtls.New(t)
	dst := startPgmsgServer(t, kafkasrv.Config{TLS: certs.Server(false), RequireAuth: true}, 5*time.Minute)
	src := pgmsgtest.New(t, pgtest.Pool(t, &pgtest.Opts{MaxConns: 8}), nil)
	ctx := pgtest.Context(t, 2*time.Minute)
	for _, c := range []*pgmsg.Client{src.Client, dst.Client} {
		_, err := c.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 2})
		require.NoError(t, err)
	}
	var recs []*pgmsg.Record
	for i := range 200 {
		recs = append(recs, &pgmsg.Record{Topic: "orders", Key: []byte(strconv.Itoa(i % 7)), Value: []byte(strconv.Itoa(i))})
	}
	require.NoError(t, src.Client.Publish(ctx, recs, nil))
	dir := t.TempDir()
	secretFile := func(name, secret string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(secret+"\n"), 0o600))
		return p
	}
	good := secretFile("good", dst.Token(t, "mirror", "publish:orders", "consume:orders"))
	readOnly := secretFile("read-only", dst.Token(t, "reader", "consume:orders"))
	wrong := secretFile("wrong", "pgmsg_not_a_token")
	mirror := func(passwordFile string, extra ...string) (int, string, string) {
		args := append([]string{"mirror"}, extra...)
		args = append(args, "--database-url", pgtest.URL(t), "--schema", src.Schema, "--brokers", dst.addr,
			"--topics", "orders", "--tls-ca", certs.CAFile, "--sasl-mechanism", "PLAIN", "--sasl-user", "mirror",
			"--sasl-password-file", passwordFile)
		var stdout, stderr bytes.Buffer
		code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	nothingCopied := func() {
		t.Helper()
		for p := int32(0); p < 2; p++ {
			got, err := dst.Client.Fetch(ctx, "orders", p, 0, 10)
			require.NoError(t, err)
			require.Empty(t, got, "partition %d", p)
		}
	}
	code, _, stderr := mirror(wrong, "--drain", "--progress", "0")
	require.Equal(t, 1, code, "a wrong token: %s", stderr)
	require.Contains(t, stderr, "SASL_AUTHENTICATION_FAILED")
	require.Contains(t, stderr, "[MR006]")
	nothingCopied()
	// The mirror stops at the first refused produce request instead of
	// retrying the claim for ever.
	code, _, stderr = mirror(readOnly, "--drain", "--progress", "0")
	require.Equal(t, 1, code, "a token without publish: %s", stderr)
	require.Contains(t, stderr, "TOPIC_AUTHORIZATION_FAILED")
	require.Contains(t, stderr, "[MR006]")
	nothingCopied()

	code, _, stderr = mirror(good, "--drain", "--progress", "0")
	require.Equal(t, 0, code, stderr)
	for p := int32(0); p < 2; p++ {
		want, err := src.Client.Fetch(ctx, "orders", p, 0, 1000)
		require.NoError(t, err)
		got, err := dst.Client.Fetch(ctx, "orders", p, 0, 1000)
		require.NoError(t, err)
		require.Len(t, got, len(want))
		for i := range want {
			require.Equal(t, want[i].Offset, got[i].Offset)
			require.Equal(t, want[i].Value, got[i].Value)
		}
	}

	// billing read 40 records of partition 0 and 10 of partition 1.
	for p, n := range map[int32]int{0: 40, 1: 10} {
		cl, err := src.Client.Claim(ctx, "orders", "billing", &pgmsg.ClaimOpts{Partition: &p, MaxRecords: n})
		require.NoError(t, err)
		require.NoError(t, src.Client.Commit(ctx, cl))
	}
	code, _, stderr = mirror(good, "groups", "--groups", "billing")
	require.Equal(t, 0, code, stderr)
	d, err := dst.Client.DescribeGroup(ctx, "orders", "billing")
	require.NoError(t, err)
	at := map[int32]int64{}
	for _, gp := range d.Partitions {
		at[gp.Partition] = gp.NextOffset
	}
	require.Equal(t, map[int32]int64{0: 40, 1: 10}, at, "the Kafka group's commit is the listener side's pgmsg cursor")
}
