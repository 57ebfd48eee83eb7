// Package quickstart_test runs the first hour of a newcomer as the docs
// write it: the README's quick start (the binary, pgmsg dev, its curl and
// CLI examples), then clients/python/README.md's and
// clients/node/README.md's install steps and examples, in order, in one
// shell session, against pgmsg dev serving a fresh database. The commands
// are read from the markdown's code blocks, so the docs and the test
// cannot drift: a documented command that fails fails the test.
//
// A block is run unless the line before its fence is
// "<!-- quickstart: skip (why) -->"; "<!-- quickstart: background -->"
// runs it in the background until the end (pgmsg dev). sh blocks run as
// written; python blocks are written to a file and run with the session's
// python (the venv the Python README creates); js blocks are written to
// quickstart.js and run with node; other languages are not run here (the
// Go snippets type-check in TestDocSnippetsCompile, beside this test).
//
// What the test changes, each said where it is done: the README's
// `go install ...@latest` (which needs the published module) becomes
// `make install` in this checkout, into a GOBIN of the test's own;
// port 8080 becomes a free port, because other programs (and tests) may
// hold 8080; and the clients' directories are copies, so that npm ci and
// the venv write nothing into the source tree.
//
// It needs bash, curl, jq, make, /usr/bin/python3 with psycopg, node and
// npm (and npm's registry for `npm install pg`). A missing tool skips the
// test with a loud message, or fails it when PGMSG_REQUIRE_CLIENTS is set,
// as .ci/run sets it.
package quickstart_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// block is one fenced code block of a markdown file.
type block struct {
	file, lang, mode string // mode: "", "skip" or "background"
	line             int
	text             string
}

// readBlocks returns the fenced code blocks of path, in order.
func readBlocks(t *testing.T, path string) []block {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []block
	var cur *block
	var prev string
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{file: filepath.Base(path), lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), line: n}
			if m, ok := strings.CutPrefix(strings.TrimSpace(prev), "<!-- quickstart: "); ok {
				cur.mode = strings.Fields(m)[0]
			}
		case cur != nil && strings.HasPrefix(line, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
		prev = line
	}
	require.NoError(t, sc.Err())
	require.Nil(t, cur, "%s: a code block is not closed", path)
	return out
}

// missing skips the test loudly, or fails it under PGMSG_REQUIRE_CLIENTS.
func missing(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("PGMSG_REQUIRE_CLIENTS") != "" {
		t.Fatalf("%s (PGMSG_REQUIRE_CLIENTS is set: .ci/run installs it)", what)
	}
	fmt.Fprintf(os.Stderr, "\n*** %s: SKIPPING %s (not tested; bash .ci/run installs what it needs) ***\n\n", what, t.Name())
	t.Skip(what)
}

// script turns the blocks into one bash script. port replaces 8080.
func script(t *testing.T, blocks []block, port int) string {
	t.Helper()
	p := strconv.Itoa(port)
	var b strings.Builder
	for i, bl := range blocks {
		if bl.mode == "skip" {
			continue
		}
		text := strings.ReplaceAll(bl.text, "localhost:8080", "localhost:"+p)
		text = strings.ReplaceAll(text, "127.0.0.1:8080", "127.0.0.1:"+p)
		text = strings.ReplaceAll(text, "go install github.com/pgmsg/pgmsg/cmd/pgmsg@latest", `make -s -C "$PGMSG_REPO" install`)
		if bl.mode == "" && bl.lang != "sh" && bl.lang != "python" && bl.lang != "js" {
			continue
		}
		fmt.Fprintf(&b, "\necho '### %s block at line %d (%s)'\n", bl.file, bl.line, bl.lang)
		switch {
		case bl.mode == "background":
			require.Equal(t, "pgmsg dev\n", text, "%s:%d: the background block is pgmsg dev alone", bl.file, bl.line)
			fmt.Fprintf(&b, "pgmsg dev --listen 127.0.0.1:%s > \"$QS_DIR/dev.log\" 2>&1 &\n", p)
			fmt.Fprintf(&b, "QS_DEV=$!; trap 'kill $QS_DEV 2>/dev/null; wait $QS_DEV 2>/dev/null' EXIT\n")
			// Up when it answers readiness; dead is a failure at once.
			fmt.Fprintf(&b, "until curl -sf localhost:%s/readyz >/dev/null; do kill -0 $QS_DEV || { cat \"$QS_DIR/dev.log\"; exit 1; }; sleep 0.2; done\n", p)
			b.WriteString("cat \"$QS_DIR/dev.log\"\n")
		case bl.mode != "":
			t.Fatalf("%s:%d: unknown quickstart mode %q", bl.file, bl.line, bl.mode)
		case bl.lang == "sh":
			b.WriteString(text)
		case bl.lang == "python":
			name := fmt.Sprintf("block%d.py", i)
			fmt.Fprintf(&b, "cat > %q <<'QS_EOF'\n%sQS_EOF\npython %q\n", "$QS_DIR/"+name, text, "$QS_DIR/"+name)
		case bl.lang == "js":
			fmt.Fprintf(&b, "cat > quickstart.js <<'QS_EOF'\n%sQS_EOF\nnode quickstart.js\n", text)
		}
	}
	return b.String()
}

// copyTree copies src to dst, leaving out build output and dependencies.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "dist" || d.Name() == "__pycache__" || d.Name() == "build") {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	}))
}

// freshDatabase creates a database of the test's own on the test server
// and returns its URL; it is dropped when the test ends.
func freshDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin := pgtest.URL(t)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := "pgmsg_quickstart_" + hex.EncodeToString(r[:])
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestQuickStartsRunAsWritten(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq", "make", "node", "npm", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, tool+" is not installed")
		}
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import psycopg, venv, ensurepip").CombinedOutput(); err != nil {
		missing(t, fmt.Sprintf("/usr/bin/python3 cannot import psycopg and venv (apt-get install python3-psycopg python3-venv): %v %s", err, out))
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)

	var blocks []block
	for _, doc := range []string{"README.md", "clients/python/README.md", "clients/node/README.md"} {
		blocks = append(blocks, readBlocks(t, filepath.Join(repo, doc))...)
	}
	work := t.TempDir()
	checkout := filepath.Join(work, "checkout")
	copyTree(t, filepath.Join(repo, "clients", "python"), filepath.Join(checkout, "clients", "python"))
	copyTree(t, filepath.Join(repo, "clients", "node"), filepath.Join(checkout, "clients", "node"))
	port := freePort(t)
	body := script(t, blocks, port)
	pre := "set -euo pipefail\nexport PATH=\"$GOBIN:$PATH\"\ncd \"$QS_CHECKOUT\"\n"
	scriptPath := filepath.Join(work, "quickstart.sh")
	require.NoError(t, os.WriteFile(scriptPath, []byte(pre+body), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", scriptPath)
	cmd.Dir = checkout
	env := []string{}
	for _, kv := range os.Environ() {
		// The session starts as a newcomer's: no database, no schema,
		// no Python path of its own.
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "DATABASE_URL", "PGMSG_SCHEMA", "PYTHONPATH", "VIRTUAL_ENV", "GOBIN", "NODE_PATH":
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env,
		"DATABASE_URL="+freshDatabase(t), // pgmsg dev serves it instead of starting a server
		"GOBIN="+filepath.Join(work, "bin"),
		"PGMSG_REPO="+repo,
		"QS_CHECKOUT="+checkout,
		"QS_DIR="+work,
		"PYTHONDONTWRITEBYTECODE=1",
		"npm_config_audit=false", "npm_config_fund=false", "npm_config_loglevel=error", "npm_config_update_notifier=false",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if trace := os.Getenv("PGMSG_QUICKSTART_TRACE"); trace != "" {
		// Debugging a hang: the output as it comes, in a file of your own.
		f, err := os.Create(trace)
		require.NoError(t, err)
		defer f.Close()
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, f), io.MultiWriter(&out, f)
	}
	cmd.WaitDelay = 10 * time.Second // pgmsg dev, if left behind, holds no pipe of ours
	err = cmd.Run()
	dev, _ := os.ReadFile(filepath.Join(work, "dev.log"))
	require.NoError(t, err, "a documented step failed; the script's output (each block starts with ###):\n%s\n--- pgmsg dev's log:\n%s\n--- the script:\n%s", out.String(), dev, body)
	t.Logf("output:\n%s", out.String())

	// A few results each step must have shown, beyond exiting 0.
	got := out.String()
	// curl -s exits 0 on an HTTP error: no answer may be an error body.
	require.NotContains(t, got, `{"error":{"code":`)
	for _, want := range []string{
		`"committed":true`,       // the curl commit of the claim
		`"state":"completed"`,    // the curl ack of the job
		`created topic "orders"`, // the CLI examples
		`deleted topic "orders"`,
	} {
		require.Contains(t, got, want)
	}
	require.Equal(t, 2, strings.Count(got, "sending welcome"), "the Python and the Node quick starts each worked a job")
}
