// Package migration holds pgmsg's SQL and renders it for a schema.
// pgmsgmigrate runs it; nothing else reads these files.
//
// Two kinds of file, one migration policy:
//
//   - Versioned migrations (NNN_name.up.sql / .down.sql) hold tables,
//     indexes, sequences, roles and data changes. Each runs once, in
//     version order, and is recorded in pgmsg_migration.
//   - Function files (functions/*.sql) hold every function, each written
//     once, with its grants. After the versioned migrations, the migrator
//     applies all of them, in Code order, whenever any of them (or any
//     version) changed since it last did; their checksums are recorded in
//     pgmsg_migration_code. A change to a function is therefore a diff of
//     the lines that changed. CREATE OR REPLACE keeps a function's grants;
//     a function whose arguments or result type change, or that goes away,
//     is dropped by a versioned migration first.
//
// Down migrations revert versions only: the migrator drops the functions
// first (they depend on the tables' row types), and `migrate up` by the
// binary of the version left restores that version's functions.
//
// Every function must say SET search_path = pg_catalog, pg_temp and name
// pgmsg's objects {{schema}}-qualified. TestFunctionsPinSearchPath (root
// package) fails on an unpinned function.
package migration

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
)

//go:embed *.sql
var files embed.FS

//go:embed functions/*.sql
var functionFiles embed.FS

// codeOrder is the order the function files are applied in: shared
// helpers, the log, the queue, then tokens and the roles' grants, which
// cover everything before them.
var codeOrder = []string{"common", "log", "queue", "auth"}

// Code is one function file: its name (without directory and extension),
// its still templated SQL with the statement files it includes spliced
// in (statement.go), and the checksum the migrator records.
type Code struct {
	Name     string
	SQL      string
	Checksum string
}

// AllCode returns the function files in the order they are applied.
func AllCode() []Code {
	entries, err := fs.ReadDir(functionFiles, "functions")
	if err != nil {
		panic(err)
	}
	if len(entries) != len(codeOrder) {
		panic(fmt.Sprintf("migration: %d function files, %d in codeOrder", len(entries), len(codeOrder)))
	}
	out := make([]Code, 0, len(codeOrder))
	for _, name := range codeOrder {
		raw, err := functionFiles.ReadFile("functions/" + name + ".sql")
		if err != nil {
			panic("migration: function file " + name + " listed in codeOrder: " + err.Error())
		}
		body := splice(string(raw), 0) // statement files (statement.go)
		sum := sha256.Sum256([]byte(body))
		out = append(out, Code{Name: name, SQL: body, Checksum: hex.EncodeToString(sum[:])})
	}
	return out
}

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
