package cli

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgcluster"
)

// mainOut runs the CLI without a database and returns stdout, stderr and
// the exit code.
func mainOut(args ...string) (string, string, int) {
	var stdout, stderr bytes.Buffer
	code := Main(args, strings.NewReader(""), &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

// A typo in a command at any level fails, with a suggestion, instead of
// printing help and exiting 0; a group alone still prints its help.
func TestUnknownSubcommandsFail(t *testing.T) {
	t.Parallel()
	_, errOut, code := mainOut("topic", "crate", "orders")
	require.Equal(t, 1, code)
	require.Equal(t, "pgmsg: error: unknown command \"crate\" for \"pgmsg topic\"; did you mean \"create\"? (run 'pgmsg topic --help' for its commands)\n", errOut)
	_, errOut, code = mainOut("queue", "periodic", "ad")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `did you mean "add"?`)
	_, _, code = mainOut("nosuch")
	require.Equal(t, 1, code)
	out, _, code := mainOut("topic")
	require.Equal(t, 0, code)
	require.Contains(t, out, "Available Commands:")
}

// pgmsg version and pgmsg --version print the version, the commit and the
// schema version; release builds set the first two with -ldflags.
func TestVersion(t *testing.T) {
	out, _, code := mainOut("--version")
	require.Equal(t, 0, code)
	require.Regexp(t, `^pgmsg \S+ \(commit \S+, schema version \d+, go\S+ \w+/\w+\)\n$`, out)
	out2, _, _ := mainOut("version")
	require.Equal(t, out, out2)
	Version, Commit = "v1.2.3", "abc123"
	defer func() { Version, Commit = "", "" }()
	out, _, _ = mainOut("version")
	require.True(t, strings.HasPrefix(out, "pgmsg v1.2.3 (commit abc123, "), out)
}

// pgmsg dev keeps its PostgreSQL's port in the data directory, so the URL
// it printed stays valid; --port wins, and a kept port taken meanwhile is
// given up with a warning.
func TestDevPortIsKept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.Zero(t, devPort(0, dir, os.Stderr), "first run: a free port")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, keepDevPort(dir, port))
	require.Equal(t, 5555, devPort(5555, dir, os.Stderr), "--port wins")
	var warn bytes.Buffer
	require.Zero(t, devPort(0, dir, &warn), "the kept port is taken")
	require.Contains(t, warn.String(), "port "+strconv.Itoa(port)+", kept from the last run, is taken")
	require.NoError(t, l.Close())
	require.Equal(t, port, devPort(0, dir, os.Stderr))

	_, err = devURL(dir)
	require.ErrorContains(t, err, "run pgmsg dev first", "no password yet")
	require.NoError(t, os.WriteFile(filepath.Join(dir, pgcluster.PasswordFile), []byte("ab12\n"), 0o600))
	url, err := devURL(dir)
	require.NoError(t, err)
	require.Equal(t, pgcluster.URL(port, "ab12"), url)
}

// pgmsg dev checks --listen before the demo, and names the flag.
func TestDevRefusesATakenListenAddress(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, errOut, code := mainOut("dev", "--database-url", "postgres://127.0.0.1:1/x", "--listen", l.Addr().String())
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "cannot listen on "+l.Addr().String()+" (another program listens there): choose another address with --listen")
	require.NotContains(t, errOut, "connect", "checked before the database")
}

// pgmsg dev checks its Kafka listener's address (--kafka-listen,
// 127.0.0.1:9092 by default) before the demo too, and names that flag.
func TestDevRefusesATakenKafkaListenAddress(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, errOut, code := mainOut("dev", "--database-url", "postgres://127.0.0.1:1/x", "--listen", "127.0.0.1:0", "--kafka-listen", l.Addr().String())
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "cannot listen on "+l.Addr().String()+" (another program listens there): choose another address with --kafka-listen")
	require.NotContains(t, errOut, "connect", "checked before the database")
}

// A connection error is one line with the cause once and a hint.
func TestConnectionErrorIsOneLineWithAHint(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	_, errOut, code := mainOut("topic", "list", "--database-url", "postgres://ann@"+addr+"/app")
	require.Equal(t, 1, code)
	require.Equal(t, "pgmsg: error: cannot connect to PostgreSQL at "+addr+" (user ann, database app): connect: connection refused"+
		" (is PostgreSQL running there? `pgmsg dev` starts one and prints its URL)\n", errOut)
}

// The demo's output stays short however much the demo groups have to
// catch up on (records published over HTTP between runs).
func TestDemoOutputStaysShort(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	demo := func() string {
		var out bytes.Buffer
		g := &globals{databaseURL: s.b.URL, schema: s.b.Schema, stdout: &out, stderr: &out}
		require.NoError(t, runDemo(t.Context(), g))
		return out.String()
	}
	first := demo()
	lines := strings.Count(first, "\n")
	var many strings.Builder
	for i := range 500 {
		many.WriteString("k" + strconv.Itoa(i) + ":v\n")
	}
	s.ok(many.String(), "publish", "demo", "--key-separator", ":")
	second := demo()
	require.Contains(t, second, "... and 500 more")
	require.LessOrEqual(t, strings.Count(second, "\n"), lines+4, "second run:\n%s", second)
}
