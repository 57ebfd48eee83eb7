package quickstart_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// snippetImports are the packages a documented Go snippet may use without
// importing them, by the name it uses.
var snippetImports = map[string]string{
	"context":      "context",
	"json":         "encoding/json",
	"errors":       "errors",
	"fmt":          "fmt",
	"os":           "os",
	"time":         "time",
	"pgx":          "github.com/jackc/pgx/v5",
	"pgxpool":      "github.com/jackc/pgx/v5/pgxpool",
	"pgmsg":        "github.com/pgmsg/pgmsg",
	"pgmsgmigrate": "github.com/pgmsg/pgmsg/pgmsgmigrate",
	"pgmsgkafka":   "github.com/pgmsg/pgmsg/pgmsgkafka",
	"pgmsgtest":    "github.com/pgmsg/pgmsg/pgmsgtest",
	"kgo":          "github.com/twmb/franz-go/pkg/kgo",
	"sdktrace":     "go.opentelemetry.io/otel/sdk/trace",
}

// snippetPrelude declares what the snippets take as given: the context,
// the pool and client of the README, and the values the prose names.
const snippetPrelude = `
var (
	ctx      context.Context
	pool     *pgxpool.Pool
	client   *pgmsg.Client
	backend  pgmsg.Backend
	consumer *pgmsg.Consumer
	rec      *pgmsg.Record
	recs     []*pgmsg.Record
	v        []byte
	payload  []byte
	msg      any
	brokers  []string
	exporter sdktrace.SpanExporter
)

func send(any) error { return nil }
`

// snippet is a documented Go block as a file: its top-level declarations
// (lines at the margin starting with "type " or "func ", and what is
// indented under them) at file scope, the rest in a function body.
func snippetFile(text string) string {
	var top, body strings.Builder
	inTop := false
	for _, line := range strings.Split(text, "\n") {
		atMargin := line != "" && line[0] != ' ' && line[0] != '\t'
		switch {
		case atMargin && (strings.HasPrefix(line, "type ") || strings.HasPrefix(line, "func ")):
			inTop = true
		case atMargin && line != "}" && line != ")":
			inTop = false
		}
		if inTop {
			top.WriteString(line + "\n")
			if line == "}" || line == ")" || (atMargin && (strings.HasSuffix(line, "}") || !strings.HasSuffix(line, "{"))) {
				inTop = false
			}
		} else {
			body.WriteString(line + "\n")
		}
	}
	var b strings.Builder
	b.WriteString("package snippet\n\nimport (\n")
	names := make([]string, 0, len(snippetImports))
	for name := range snippetImports {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&b, "\t%s %q\n", name, snippetImports[name])
	}
	b.WriteString(")\n" + snippetPrelude + "\n" + top.String() + "\nfunc _() {\n" + body.String() + "}\n")
	return b.String()
}

// exportData builds the snippet imports and returns where their export
// data is, for the type checker (go list -export: the build cache).
func exportData(t *testing.T) map[string]string {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}"}
	for _, p := range snippetImports {
		args = append(args, p)
	}
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	files := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, "=")
		files[path] = file
	}
	return files
}

// TestDocSnippetsCompile type-checks every Go block of README.md and
// docs/*.md against the current API, so a renamed method or a changed
// result breaks this test, not a reader's first try. Names a snippet
// declares and does not use, and imports it does not need, are allowed
// (a snippet shows a call, not a program).
func TestDocSnippetsCompile(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("go is needed: %v", err)
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	docs, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	require.NoError(t, err)
	exports := exportData(t)
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	n := 0
	for _, doc := range append([]string{filepath.Join(repo, "README.md")}, docs...) {
		for _, bl := range readBlocks(t, doc) {
			if bl.lang != "go" {
				continue
			}
			n++
			src := snippetFile(bl.text)
			where := fmt.Sprintf("%s:%d", bl.file, bl.line)
			f, err := parser.ParseFile(fset, where, src, parser.SkipObjectResolution)
			require.NoError(t, err, "%s does not parse as Go:\n%s", where, src)
			var problems []string
			conf := types.Config{Importer: imp, Error: func(err error) {
				msg := err.Error()
				if strings.HasSuffix(msg, "and not used") || strings.Contains(msg, "declared and not used") {
					return
				}
				problems = append(problems, msg)
			}}
			_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
			require.Empty(t, problems, "%s: the snippet does not compile:\n%s", where, src)
		}
	}
	require.Positive(t, n, "no Go snippets found")
}
