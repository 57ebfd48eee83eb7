package cli

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// session runs CLI commands against one test schema and records a
// transcript of each command, its exit code and output, normalised so that
// it does not depend on time, secrets or the schema name.
type session struct {
	t      *testing.T
	b      *pgtest.Bundle
	out    strings.Builder
	scrubs []func(string) string
	// goldenJSON records -o json output too (by default it is checked by
	// the test itself, as the library's structs grow fields).
	goldenJSON bool
}

func newSession(t *testing.T) *session {
	t.Helper()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 4})
	return &session{t: t, b: b}
}

var (
	timeRE   = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})`)
	dateRE   = regexp.MustCompile(`expires \d{4}-\d{2}-\d{2}`)
	secretRE = regexp.MustCompile(`pgm_[A-Za-z0-9_-]{43}`)
	prefixRE = regexp.MustCompile(`pgm_[A-Za-z0-9_-]{6}`)
	bytesRE  = regexp.MustCompile(`"approx_bytes": \d+`)
	ageRE    = regexp.MustCompile(`"(oldest_available_age|throughput)": [0-9.e+-]+`)
)

func (s *session) normalise(out string) string {
	out = strings.ReplaceAll(out, s.b.Schema, "<SCHEMA>")
	out = timeRE.ReplaceAllString(out, "<TIME>")
	out = dateRE.ReplaceAllString(out, "expires <DATE>")
	out = secretRE.ReplaceAllString(out, "<TOKEN>")
	out = prefixRE.ReplaceAllString(out, "<PREFIX>")
	out = bytesRE.ReplaceAllString(out, `"approx_bytes": <N>`)
	out = ageRE.ReplaceAllString(out, `"$1": <N>`)
	for _, f := range s.scrubs {
		out = f(out)
	}
	return out
}

// run runs pgmsg with args (and stdin) and returns its stdout, stderr and
// exit code, recording them in the transcript.
func (s *session) run(stdin string, args ...string) (string, string, int) {
	return s.runRecorded(true, stdin, args...)
}

func (s *session) runRecorded(record bool, stdin string, args ...string) (string, string, int) {
	s.t.Helper()
	var stdout, stderr bytes.Buffer
	full := append([]string{"--database-url", s.b.URL, "--schema", s.b.Schema}, args...)
	code := Main(full, strings.NewReader(stdin), &stdout, &stderr)
	if !record || (len(args) > 1 && args[len(args)-2] == "-o" && args[len(args)-1] == "json" && !s.goldenJSON) {
		return stdout.String(), stderr.String(), code
	}
	shown := "pgmsg " + strings.Join(args, " ")
	if stdin != "" {
		shown = fmt.Sprintf("printf %q | %s", stdin, shown)
	}
	fmt.Fprintf(&s.out, "$ %s\n", shown)
	if code != 0 {
		fmt.Fprintf(&s.out, "[exit %d]\n", code)
	}
	s.out.WriteString(s.normalise(stdout.String()))
	if stderr.Len() > 0 {
		fmt.Fprintf(&s.out, "[stderr] %s", s.normalise(stderr.String()))
	}
	s.out.WriteString("\n")
	return stdout.String(), stderr.String(), code
}

// ok runs a command that must succeed.
func (s *session) ok(stdin string, args ...string) string {
	s.t.Helper()
	out, errOut, code := s.run(stdin, args...)
	require.Zero(s.t, code, "pgmsg %v: %s", args, errOut)
	return out
}

// fail runs a command that must fail with a one-line error.
func (s *session) fail(stdin string, args ...string) string {
	s.t.Helper()
	out, errOut, code := s.run(stdin, args...)
	require.Equal(s.t, 1, code, "pgmsg %v should fail; out: %s", args, out)
	require.True(s.t, strings.HasPrefix(errOut, "pgmsg: error: "), errOut)
	require.Equal(s.t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	return errOut
}

// check compares the transcript with testdata/NAME.golden.
func (s *session) check(name string) {
	s.t.Helper()
	path := filepath.Join("testdata", name+".golden")
	got := s.out.String()
	if *update {
		require.NoError(s.t, os.MkdirAll("testdata", 0o755))
		require.NoError(s.t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(s.t, err, "missing golden file: run go test ./internal/cli -run %s -update", s.t.Name())
	require.Equal(s.t, string(want), got, "golden %s differs: rerun with -update and review the diff", path)
}
