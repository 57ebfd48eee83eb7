package mirror_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/cli"
	"github.com/pgmsg/pgmsg/internal/mirror"
	"github.com/pgmsg/pgmsg/internal/testtls"
)

// TestMirrorSecureCLI runs pgmsg mirror and pgmsg mirror groups against a
// broker that requires mutual TLS and SASL/SCRAM-SHA-512 (as MSK and Aiven
// may), with the CLI's flags: the CA file, the client certificate, the
// user, and the password in a file. Without the SASL flags, or with a
// wrong password, the mirror fails and copies nothing.
func TestMirrorSecureCLI(t *testing.T) {
	t.Parallel()
	certs := testtls.New(t)
	b := setupWith(t,
		[]kfake.Opt{kfake.TLS(certs.Server(true)), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "mirror", "s3cret")},
		[]kgo.Opt{kgo.DialTLSConfig(certs.Client(t)), kgo.SASL(scram.Auth{User: "mirror", Pass: "s3cret"}.AsSha512Mechanism())})
	ctx := context.Background()
	createTopic(t, b, "orders", 3)
	publish(t, b.client, "orders", 0, 600, 32)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "password"), filepath.Join(dir, "wrong")
	require.NoError(t, os.WriteFile(good, []byte("s3cret\n"), 0o600))
	require.NoError(t, os.WriteFile(bad, []byte("nope\n"), 0o600))
	db := []string{"--database-url", b.pg.URL, "--schema", b.pg.Schema}
	conn := []string{"--brokers", strings.Join(b.brokers, ","), "--topics", "orders",
		"--tls-ca", certs.CAFile, "--tls-cert", certs.ClientCertFile, "--tls-key", certs.ClientKeyFile}
	sasl := []string{"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", "mirror"}
	cmd := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	join := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}

	// Refusals first: nothing reaches Kafka.
	code, _, stderr := cmd(join([]string{"mirror", "--drain", "--create-topics", "--progress", "0"}, db, conn)...)
	require.Equal(t, 1, code, "no SASL: %s", stderr)
	code, _, stderr = cmd(join([]string{"mirror", "--drain", "--create-topics", "--progress", "0"}, db, conn, sasl, []string{"--sasl-password-file", bad})...)
	require.Equal(t, 1, code, "a wrong password: %s", stderr)
	code, _, stderr = cmd(join([]string{"mirror", "--drain"}, db, conn, sasl)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "needs a password: --sasl-password-file or PGMSG_KAFKA_SASL_PASSWORD")
	d, err := b.client.DescribeGroup(ctx, "orders", mirror.GroupDefault)
	if err == nil {
		for _, gp := range d.Partitions {
			require.Zero(t, gp.NextOffset, "the refused runs copied nothing")
		}
	} else {
		require.ErrorIs(t, err, pgmsg.ErrUnknownGroup)
	}

	code, _, stderr = cmd(join([]string{"mirror", "--drain", "--create-topics", "--progress", "0"}, db, conn, sasl, []string{"--sasl-password-file", good})...)
	require.Equal(t, 0, code, stderr)
	requireMirrored(t, b, "orders")

	// billing has read 100 records of each partition: mirror groups
	// commits that for the Kafka group billing over the same connection.
	for p := int32(0); p < 3; p++ {
		cl, err := b.client.Claim(ctx, "orders", "billing", &pgmsg.ClaimOpts{Partition: &p, MaxRecords: 100})
		require.NoError(t, err)
		require.NoError(t, b.client.Commit(ctx, cl))
	}
	code, stdout, stderr := cmd(join([]string{"mirror", "groups", "--groups", "billing", "-o", "json"}, db, conn, sasl, []string{"--sasl-password-file", good})...)
	require.Equal(t, 0, code, stderr)
	var offs []mirror.GroupOffset
	require.NoError(t, json.Unmarshal([]byte(stdout), &offs))
	require.Len(t, offs, 3)
	requireGroupStartsAt(t, b, "orders", "billing", map[int32]int64{0: 100, 1: 100, 2: 100})
}

// TestMirrorRefusedStops: a principal that may describe and read a topic
// but not write to the cluster (kfake's ACLs) makes the mirror stop with MR005 at the
// first refused produce request, instead of retrying the claim for ever;
// nothing is committed.
func TestMirrorRefusedStops(t *testing.T) {
	t.Parallel()
	allow := func(op kmsg.ACLOperation, res kmsg.ACLResourceType, name string) kfake.ACL {
		return kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	b := setupWith(t,
		[]kfake.Opt{kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin"),
			kfake.User("PLAIN", "reader", "reader",
				allow(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, "orders"),
				allow(kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, "orders"))},
		[]kgo.Opt{kgo.SASL(plain.Auth{User: "admin", Pass: "admin"}.AsMechanism())})
	createTopic(t, b, "orders", 1)
	publish(t, b.client, "orders", 0, 50, 16)
	resp, err := b.adm.CreateTopics(context.Background(), 1, 1, nil, "orders")
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	m, err := mirror.New(mirror.Config{Client: b.client, Topics: []string{"orders"}, Drain: true,
		Kafka: []kgo.Opt{kgo.SeedBrokers(b.brokers...), kgo.SASL(plain.Auth{User: "reader", Pass: "reader"}.AsMechanism())}})
	require.NoError(t, err)
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = m.Run(ctx)
	require.ErrorIs(t, err, mirror.ErrKafkaRefused)
	// kfake refuses the idempotent producer first (no IdempotentWrite on
	// the cluster); pgmsg's listener answers TOPIC_AUTHORIZATION_FAILED
	// (kafkacompat's TestMirrorIntoListenerSASL).
	require.ErrorContains(t, err, "CLUSTER_AUTHORIZATION_FAILED")
	require.ErrorContains(t, err, "[MR006]")
	require.Zero(t, m.Stats().Mirrored)
}
