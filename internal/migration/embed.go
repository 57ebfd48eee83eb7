// Package migration holds pgmsg's versioned SQL migrations and renders them
// for a schema. pgmsgmigrate runs them; nothing else reads these files.
//
// Every function a migration creates or replaces in the schema must say
// SET search_path = pg_catalog, pg_temp (since 012; CREATE OR REPLACE drops
// a setting it does not restate) and name pgmsg's objects {{schema}}-qualified.
// TestFunctionsPinSearchPath (root package) fails on an unpinned function.
package migration

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed *.sql
var files embed.FS

// Migration is one version: its up and down SQL, still templated.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

var fileRE = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)

// All returns every migration in version order.
func All() []Migration {
	byVersion := map[int]*Migration{}
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil {
			panic("migration: unexpected file " + e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := files.ReadFile(e.Name())
		if err != nil {
			panic(err)
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			panic(fmt.Sprintf("migration %03d lacks an up or a down file", m.Version))
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// Render substitutes the schema into templated SQL: {{schema}} becomes the
// quoted identifier and {{schema_lit}} the quoted string literal. This is the
// one place SQL text is built from the schema name.
func Render(sql, schema string) string {
	return strings.NewReplacer(
		"{{schema}}", pgx.Identifier{schema}.Sanitize(),
		"{{schema_lit}}", QuoteLiteral(schema),
	).Replace(sql)
}

// QuoteLiteral quotes s as a standard-conforming SQL string literal.
func QuoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
