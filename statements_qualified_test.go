package pgmsg_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sqlWords are the SQL keywords that may precede "(" in pgmsg's
// statements; they are syntax, not functions looked up on the search_path
// (COALESCE, GREATEST, EXTRACT, ... resolve to pg_catalog by the parser).
var sqlWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`select from where and or not in exists values insert into update set delete
		returning with as on join left right inner outer cross lateral case when then else end coalesce greatest
		least nullif cast array row filter over partition by order group having limit offset union all distinct
		any some is null true false interval extract position substring trim overlay using do nothing conflict for
		skip locked nowait of recursive materialized window rows range between like ilike similar escape table key
		default primary unique references check constraint index create alter drop if only returns language begin
		commit notify listen unlisten copy stdin binary format varchar numeric char character decimal timestamp
		time precision double zone at local ordinality exclude operator`) {
		sqlWords[w] = true
	}
}

var (
	// pgmsg writes SQL keywords in capitals; prose says "delete".
	sqlStatementRE = regexp.MustCompile(`\bSELECT\b|\bINSERT INTO\b|(?s)\bUPDATE\b.*\bSET\b|\bDELETE FROM\b|\bRETURNING\b`)
	sqlCallRE      = regexp.MustCompile(`(?:^|[^\w."])([A-Za-z_]\w*)\s*\(`)
	sqlAliasRE     = regexp.MustCompile(`(?i)\bAS\s*$`)
	sqlCommentRE   = regexp.MustCompile(`--[^\n]*`)
	sqlStringRE    = regexp.MustCompile(`'(?:[^']|'')*'`)
)

// unqualifiedCalls returns the functions sql calls without a schema.
func unqualifiedCalls(sql string) []string {
	sql = sqlStringRE.ReplaceAllString(sqlCommentRE.ReplaceAllString(sql, ""), "''")
	var out []string
	for _, m := range sqlCallRE.FindAllStringSubmatchIndex(sql, -1) {
		name := sql[m[2]:m[3]]
		// "AS u(v, k)": an alias's column names, not a call.
		if sqlWords[strings.ToLower(name)] || sqlAliasRE.MatchString(sql[:m[2]]) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// Every statement pgmsg sends names the functions it calls with their
// schema (pg_catalog or pgmsg's), so that none depends on the session's
// search_path (DESIGN.md, "Roles and trust"): the
// string constants of every Go file that sends SQL, and the sqlc queries.
// The seeds' SQL of internal/bench, run verbatim as a baseline, and the
// tests are not pgmsg's statements.
func TestStatementsQualifyFunctions(t *testing.T) {
	t.Parallel()
	var bad []string
	check := func(where, sql string) {
		if !sqlStatementRE.MatchString(sql) {
			return
		}
		for _, f := range unqualifiedCalls(sql) {
			bad = append(bad, where+": "+f+"(")
		}
	}
	var goFiles []string
	for _, root := range []string{".", "internal", "pgmsgmigrate", "pgmsgprom", "cmd"} {
		depth := root != "."
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != root && (!depth || d.Name() == "bench" || d.Name() == "testdata" || d.Name() == "dbsqlc") {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				goFiles = append(goFiles, path)
			}
			return nil
		})
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
	}
	require.Greater(t, len(goFiles), 50)
	fset := token.NewFileSet()
	for _, path := range goFiles {
		f, err := parser.ParseFile(fset, path, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err == nil {
				check(fset.Position(lit.Pos()).String(), s)
			}
			return true
		})
	}
	queries, err := filepath.Glob("internal/dbsqlc/queries/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, queries)
	for _, q := range queries {
		body, err := os.ReadFile(q)
		require.NoError(t, err)
		for i, stmt := range strings.Split(string(body), ";") {
			check(q+" statement "+strconv.Itoa(i+1), stmt)
		}
	}
	require.Empty(t, bad, "unqualified function calls in statements pgmsg sends")
	require.Equal(t, []string{"now", "unnest"}, unqualifiedCalls(
		"SELECT now(), pg_catalog.now(), coalesce(x, 1) -- f(\n, 'g()' FROM unnest($1) AS u(v)"))
}
