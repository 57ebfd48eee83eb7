package kafkacompat

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/cli"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

// TestKcatSCRAM drives librdkafka (Debian's kcat) through SASL/SCRAM-SHA-256
// and SCRAM-SHA-512 with a pgmsg token (username the token's name,
// password its secret) against the listener: it produces and consumes
// back what pgmsg stores. A wrong password is refused, and so is a token
// created before SCRAM verifiers existed, with the listener's message
// saying to re-create it or use PLAIN, which then works.
func TestKcatSCRAM(t *testing.T) {
	kcat := needTool(t, "kcat", "-V")
	s := startPgmsgServer(t, kafkasrv.Config{RequireAuth: true}, 5*time.Minute)
	const topic = "kcat-scram"
	_, err := s.Client.CreateTopic(s.Ctx, topic, pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	secret := s.Token(t, "kcat", "publish:"+topic, "consume:"+topic)
	sasl := func(mech, user, pass string) []string {
		return []string{"-b", s.addr, "-q", "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=" + mech,
			"-X", "sasl.username=" + user, "-X", "sasl.password=" + pass}
	}
	wrote := 0
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		var in strings.Builder
		for i := range 20 {
			fmt.Fprintf(&in, "%s-%d\n", mech, i)
		}
		wrote += 20
		runTool(t, time.Minute, in.String(), kcat, append([]string{"-P", "-t", topic, "-X", "acks=all", "-m", "30"},
			sasl(mech, "kcat", secret)...)...)
		out := runTool(t, time.Minute, "", kcat, append([]string{"-C", "-t", topic, "-o", "beginning", "-e", "-J", "-m", "30"},
			sasl(mech, "kcat", secret)...)...)
		var got []rec
		for _, k := range jsonLines[kcatRecord](t, out) {
			got = append(got, k.rec())
		}
		require.Len(t, got, wrote, mech)
		var native []rec
		for p := range int32(2) {
			recs, err := s.Client.Fetch(s.Ctx, topic, p, 0, 1000)
			require.NoError(t, err)
			for _, r := range recs {
				native = append(native, nativeRec(r))
			}
		}
		require.ElementsMatch(t, native, got, "%s: kcat read what pgmsg stores", mech)
	}

	// Refused: a wrong password; a token without verifiers (SCRAM only).
	refused := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, kcat, append([]string{"-L", "-t", topic, "-m", "10", "-d", "security"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		require.Error(t, err, "kcat %s: refused", strings.Join(args, " "))
		return stderr.String()
	}
	stderr := refused(sasl("SCRAM-SHA-256", "kcat", "pgm_wrong")...)
	require.Contains(t, stderr, "SASL authentication error", stderr)
	old := "pgm_oldtoken-before-scram-verifiers-0123456789ab"
	_, err = s.Client.Pool().Exec(s.Ctx, "SELECT token_id FROM "+pgx.Identifier{s.Client.Schema()}.Sanitize()+
		".token_create($1, $2, $3, $4)", "old", pgmsg.HashToken(old), old[:10], []string{"consume:" + topic})
	require.NoError(t, err)
	stderr = refused(sasl("SCRAM-SHA-512", "old", old)...)
	require.Contains(t, stderr, "re-create the token", stderr)
	out := runTool(t, time.Minute, "", kcat, append([]string{"-C", "-t", topic, "-o", "beginning", "-e", "-J", "-m", "30"},
		sasl("PLAIN", "old", old)...)...)
	require.Len(t, jsonLines[kcatRecord](t, out), wrote, "PLAIN still accepts the old token")
}

// TestMirrorIntoListenerSCRAM is TestMirrorIntoListenerSASL with
// SASL/SCRAM-SHA-512 (the CLI's --sasl-mechanism, --sasl-user = the
// token's name): a wrong secret copies nothing, the token's secret copies
// every record to its partition and offset.
func TestMirrorIntoListenerSCRAM(t *testing.T) {
	dst := startPgmsgServer(t, kafkasrv.Config{RequireAuth: true}, 5*time.Minute)
	src := pgmsgtest.New(t, pgtest.Pool(t, &pgtest.Opts{MaxConns: 8}), nil)
	ctx := pgtest.Context(t, 2*time.Minute)
	for _, c := range []*pgmsg.Client{src.Client, dst.Client} {
		_, err := c.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 2})
		require.NoError(t, err)
	}
	var recs []*pgmsg.Record
	for i := range 150 {
		recs = append(recs, &pgmsg.Record{Topic: "orders", Key: []byte(strconv.Itoa(i % 5)), Value: []byte(strconv.Itoa(i))})
	}
	require.NoError(t, src.Client.Publish(ctx, recs, nil))
	dir := t.TempDir()
	secretFile := func(name, secret string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(secret+"\n"), 0o600))
		return p
	}
	good := secretFile("good", dst.Token(t, "mirror", "publish:orders", "consume:orders"))
	wrong := secretFile("wrong", "pgm_not_the_secret")
	mirror := func(passwordFile string) (int, string) {
		args := []string{"mirror", "--database-url", pgtest.URL(t), "--schema", src.Schema, "--brokers", dst.addr,
			"--topics", "orders", "--drain", "--progress", "0", "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", "mirror",
			"--sasl-password-file", passwordFile}
		var stdout, stderr bytes.Buffer
		code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
		return code, stderr.String()
	}
	code, stderr := mirror(wrong)
	require.Equal(t, 1, code, "a wrong secret: %s", stderr)
	require.Contains(t, stderr, "SASL_AUTHENTICATION_FAILED")
	for p := range int32(2) {
		got, err := dst.Client.Fetch(ctx, "orders", p, 0, 10)
		require.NoError(t, err)
		require.Empty(t, got, "partition %d", p)
	}
	code, stderr = mirror(good)
	require.Equal(t, 0, code, stderr)
	for p := range int32(2) {
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
}
