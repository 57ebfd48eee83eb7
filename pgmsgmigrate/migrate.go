// Package pgmsgmigrate installs, upgrades and removes pgmsg's schema.
//
// Migrations are embedded in the binary: versioned migrations for tables
// and data, applied once each, and function files, applied whenever they
// changed (internal/migration documents the policy). Each run is one
// transaction. Every run takes a transaction-level advisory lock keyed on the
// schema name first, so any number of processes may run Up at once: one
// applies the pending versions, the others wait and then find nothing to do.
package pgmsgmigrate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/migration"
	"github.com/pgmsg/pgmsg/internal/schemaname"
)

// SchemaDefault is the schema pgmsg installs into when none is given.
const SchemaDefault = schemaname.Default

// ValidateSchema reports whether name can be used as pgmsg's schema: a
// letter or underscore then up to 47 letters, digits or underscores (the
// notification channel name adds a suffix and must fit in 63 bytes).
func ValidateSchema(name string) error {
	if err := schemaname.Validate(name); err != nil {
		return fmt.Errorf("pgmsgmigrate: %w", err)
	}
	return nil
}

// Migrator applies migrations to one schema of one database.
type Migrator struct {
	pool   *pgxpool.Pool
	schema string
}

// Opts configures a Migrator; nil means defaults.
type Opts struct {
	// Schema to install into. Default SchemaDefault.
	Schema string
}

// New returns a Migrator for the schema in opts (default "pgmsg").
func New(pool *pgxpool.Pool, opts *Opts) (*Migrator, error) {
	schema := SchemaDefault
	if opts != nil && opts.Schema != "" {
		schema = opts.Schema
	}
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	return &Migrator{pool: pool, schema: schema}, nil
}

// Version is one migration and whether (and when) it is applied.
type Version struct {
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	AppliedAt *time.Time `json:"applied_at"`
}

// Result lists the versions a call applied or reverted, and the function
// files it applied.
type Result struct {
	Versions  []int    `json:"versions"`
	Functions []string `json:"functions,omitempty"`
}

// FunctionFile is one function file and whether the schema holds this
// binary's version of it.
type FunctionFile struct {
	Name      string     `json:"name"`
	Current   bool       `json:"current"`
	AppliedAt *time.Time `json:"applied_at"`
}

// Latest is the highest version this binary knows.
func Latest() int {
	all := migration.All()
	return all[len(all)-1].Version
}

func (m *Migrator) render(sql string) string { return schemaname.Render(sql, m.schema) }

// bookkeeping creates the schema and the tables that record what was
// applied: the versions, and the checksum of each function file.
const bookkeeping = `CREATE SCHEMA IF NOT EXISTS {{schema}};
CREATE TABLE IF NOT EXISTS {{schema}}.pgmsg_migration (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE TABLE IF NOT EXISTS {{schema}}.pgmsg_migration_code (
    name       text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT pg_catalog.now()
)`

// recordCode is the statement that records a function file's checksum.
const recordCode = `INSERT INTO {{schema}}.pgmsg_migration_code (name, checksum) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = pg_catalog.now()`

// locked runs fn in a transaction that holds the schema's migration lock and
// has created the schema and the bookkeeping tables.
func (m *Migrator) locked(ctx context.Context, fn func(tx pgx.Tx, applied map[int]time.Time) error) error {
	return pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext($1))", "pgmsg.migrate."+m.schema); err != nil {
			return fmt.Errorf("pgmsgmigrate: take migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, m.render(bookkeeping)); err != nil {
			return fmt.Errorf("pgmsgmigrate: create schema %s: %w", m.schema, err)
		}
		applied, err := m.readApplied(ctx, tx)
		if err != nil {
			return err
		}
		return fn(tx, applied)
	})
}

// ErrIncompatibleHistory is returned when a schema records a version of
// this binary's under another name: it was migrated by another migration
// history (before the history was folded on 2026-12-02, or by a fork), and
// this binary cannot tell what it holds.
var ErrIncompatibleHistory = errors.New("pgmsgmigrate: schema was migrated by another migration history")

// readApplied reads the applied versions, and checks that each one this
// binary knows was applied under its name.
func (m *Migrator) readApplied(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (map[int]time.Time, error) {
	rows, err := q.Query(ctx, m.render("SELECT version, name, applied_at FROM {{schema}}.pgmsg_migration"))
	if err != nil {
		return nil, err
	}
	names := map[int]string{}
	for _, mig := range migration.All() {
		names[mig.Version] = mig.Name
	}
	applied := map[int]time.Time{}
	for rows.Next() {
		var v int
		var name string
		var at time.Time
		if err := rows.Scan(&v, &name, &at); err != nil {
			return nil, err
		}
		if want, ok := names[v]; ok && want != name {
			rows.Close()
			return nil, fmt.Errorf("%w: schema %s has version %d as %q, this binary's version %d is %q (a schema installed before the fold: reinstall it, or migrate it with the binary that installed it)",
				ErrIncompatibleHistory, m.schema, v, name, v, want)
		}
		applied[v] = at
	}
	return applied, rows.Err()
}

// Up applies every pending migration, then the function files if any of
// them, or any version, changed since they were last applied; all in one
// transaction.
func (m *Migrator) Up(ctx context.Context) (*Result, error) {
	res := &Result{}
	err := m.locked(ctx, func(tx pgx.Tx, applied map[int]time.Time) error {
		for _, mig := range migration.All() {
			if _, ok := applied[mig.Version]; ok {
				continue
			}
			if _, err := tx.Exec(ctx, m.render(mig.Up)); err != nil {
				return fmt.Errorf("pgmsgmigrate: apply %03d_%s: %w", mig.Version, mig.Name, err)
			}
			if _, err := tx.Exec(ctx, m.render("INSERT INTO {{schema}}.pgmsg_migration (version, name) VALUES ($1, $2)"),
				mig.Version, mig.Name); err != nil {
				return err
			}
			res.Versions = append(res.Versions, mig.Version)
		}
		current, err := codeCurrent(ctx, tx, m.render)
		if err != nil {
			return err
		}
		if current && len(res.Versions) == 0 {
			return nil
		}
		// Every file, in order, whichever changed: they are idempotent, and
		// the last one grants on what the others created.
		for _, code := range migration.AllCode() {
			if _, err := tx.Exec(ctx, m.render(code.SQL)); err != nil {
				return fmt.Errorf("pgmsgmigrate: apply functions/%s.sql: %w", code.Name, err)
			}
			if _, err := tx.Exec(ctx, m.render(recordCode), code.Name, code.Checksum); err != nil {
				return err
			}
			res.Functions = append(res.Functions, code.Name)
		}
		_, err = tx.Exec(ctx, m.render("DELETE FROM {{schema}}.pgmsg_migration_code WHERE name <> ALL($1)"), codeNames())
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func codeNames() []string {
	var names []string
	for _, c := range migration.AllCode() {
		names = append(names, c.Name)
	}
	return names
}

// codeCurrent reports whether the recorded checksums are exactly this
// binary's function files.
func codeCurrent(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, render func(string) string) (bool, error) {
	rows, err := q.Query(ctx, render("SELECT name, checksum FROM {{schema}}.pgmsg_migration_code"))
	if err != nil {
		return false, err
	}
	recorded, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Name, Checksum string }])
	if err != nil {
		return false, err
	}
	code := migration.AllCode()
	if len(recorded) != len(code) {
		return false, nil
	}
	sums := map[string]string{}
	for _, r := range recorded {
		sums[r.Name] = r.Checksum
	}
	for _, c := range code {
		if sums[c.Name] != c.Checksum {
			return false, nil
		}
	}
	return true, nil
}

// dropFunctions drops every function of the schema (they depend on its
// tables' row types, so they go before any table), and first the triggers
// that call them (the function files create both), and forgets the
// function files' checksums.
func (m *Migrator) dropFunctions(ctx context.Context, tx pgx.Tx) error {
	trows, err := tx.Query(ctx, `SELECT pg_catalog.format('DROP TRIGGER IF EXISTS %I ON %s', t.tgname, t.tgrelid::regclass)
  FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
 WHERE NOT t.tgisinternal AND p.pronamespace = $1::regnamespace ORDER BY t.oid`, m.schema)
	if err != nil {
		return err
	}
	drops, err := pgx.CollectRows(trows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, d := range drops {
		if _, err := tx.Exec(ctx, d); err != nil {
			return fmt.Errorf("pgmsgmigrate: %s: %w", d, err)
		}
	}
	rows, err := tx.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p
WHERE p.pronamespace = $1::regnamespace AND p.prokind = 'f' ORDER BY p.oid`, m.schema)
	if err != nil {
		return err
	}
	fns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, fn := range fns {
		if _, err := tx.Exec(ctx, "DROP FUNCTION IF EXISTS "+fn); err != nil {
			return fmt.Errorf("pgmsgmigrate: drop function %s: %w", fn, err)
		}
	}
	_, err = tx.Exec(ctx, m.render("DELETE FROM {{schema}}.pgmsg_migration_code"))
	return err
}

// Down reverts the newest steps applied migrations (all of them when steps
// is 0 or more than are applied), dropping what they created, records
// included. The schema's functions are dropped first: after a partial Down,
// `migrate up` by the binary of the version left restores its functions
// (RequireCurrent fails until then). Reverting every version also drops
// the schema if nothing else is left in it.
func (m *Migrator) Down(ctx context.Context, steps int) (*Result, error) {
	res := &Result{}
	err := m.locked(ctx, func(tx pgx.Tx, applied map[int]time.Time) error {
		all := migration.All()
		for i := len(all) - 1; i >= 0; i-- {
			mig := all[i]
			if _, ok := applied[mig.Version]; !ok {
				continue
			}
			if steps > 0 && len(res.Versions) == steps {
				break
			}
			if len(res.Versions) == 0 {
				if err := m.dropFunctions(ctx, tx); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, m.render(mig.Down)); err != nil {
				return fmt.Errorf("pgmsgmigrate: revert %03d_%s: %w", mig.Version, mig.Name, err)
			}
			if _, err := tx.Exec(ctx, m.render("DELETE FROM {{schema}}.pgmsg_migration WHERE version = $1"), mig.Version); err != nil {
				return err
			}
			res.Versions = append(res.Versions, mig.Version)
			delete(applied, mig.Version)
		}
		if len(applied) == 0 {
			if _, err := tx.Exec(ctx, m.render("DROP TABLE {{schema}}.pgmsg_migration, {{schema}}.pgmsg_migration_code")); err != nil {
				return err
			}
			var left int
			if err := tx.QueryRow(ctx, `SELECT pg_catalog.count(*) FROM pg_class WHERE relnamespace = $1::regnamespace`, m.schema).Scan(&left); err != nil {
				return err
			}
			if left == 0 {
				if _, err := tx.Exec(ctx, m.render("DROP SCHEMA {{schema}}")); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Status lists every known migration and when it was applied (nil: pending).
// It does not create anything.
func (m *Migrator) Status(ctx context.Context) ([]Version, error) {
	var exists bool
	if err := m.pool.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL",
		pgx.Identifier{m.schema, "pgmsg_migration"}.Sanitize()).Scan(&exists); err != nil {
		return nil, err
	}
	applied := map[int]time.Time{}
	if exists {
		var err error
		if applied, err = m.readApplied(ctx, m.pool); err != nil {
			return nil, err
		}
	}
	var out []Version
	for _, mig := range migration.All() {
		v := Version{Version: mig.Version, Name: mig.Name}
		if at, ok := applied[mig.Version]; ok {
			at := at
			v.AppliedAt = &at
		}
		out = append(out, v)
	}
	return out, nil
}

// Functions lists the function files of this binary and whether the
// schema holds them as they are (AppliedAt nil: never applied). It does
// not create anything.
func (m *Migrator) Functions(ctx context.Context) ([]FunctionFile, error) {
	var exists bool
	if err := m.pool.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL",
		pgx.Identifier{m.schema, "pgmsg_migration_code"}.Sanitize()).Scan(&exists); err != nil {
		return nil, err
	}
	type recorded struct {
		checksum string
		at       time.Time
	}
	applied := map[string]recorded{}
	if exists {
		rows, err := m.pool.Query(ctx, m.render("SELECT name, checksum, applied_at FROM {{schema}}.pgmsg_migration_code"))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var name string
			var r recorded
			if err := rows.Scan(&name, &r.checksum, &r.at); err != nil {
				return nil, err
			}
			applied[name] = r
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	var out []FunctionFile
	for _, c := range migration.AllCode() {
		f := FunctionFile{Name: c.Name}
		if r, ok := applied[c.Name]; ok {
			at := r.at
			f.AppliedAt, f.Current = &at, r.checksum == c.Checksum
		}
		out = append(out, f)
	}
	return out, nil
}

// Script returns the migrations after version from (0: a new install) as
// one plain SQL script for the schema, which psql alone can run (psql -v
// ON_ERROR_STOP=1 -f FILE): in one transaction, under the migration lock
// Up takes, it refuses a schema that is not at version from, applies
// each migration and records it, then the function files, exactly as Up
// does, so that the Go migrator and the script can take turns on one schema.
func Script(schema string, from int) (string, error) {
	if err := ValidateSchema(schema); err != nil {
		return "", err
	}
	all := migration.All()
	known := from == 0
	var b strings.Builder
	fmt.Fprintf(&b, "-- pgmsg: migrations after version %d (to %d) for schema %s.\n", from, Latest(), schema)
	b.WriteString("-- Run with: psql -v ON_ERROR_STOP=1 -f THIS_FILE (one transaction; nothing is left half done).\n\n")
	b.WriteString("BEGIN;\n")
	// Quiet under psql: no NOTICE per IF NOT EXISTS or cascade, no result
	// table (the lock is taken in a DO block, which prints nothing).
	b.WriteString("SET LOCAL client_min_messages = warning;\n")
	r := func(sql string) string { return schemaname.Render(sql, schema) }
	fmt.Fprintf(&b, "DO $lock$ BEGIN PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(%s)); END $lock$;\n",
		schemaname.QuoteLiteral("pgmsg.migrate."+schema))
	b.WriteString(r(bookkeeping + ";\n"))
	var want []int
	for _, mig := range all {
		if mig.Version <= from {
			want = append(want, mig.Version)
		}
		known = known || mig.Version == from
	}
	if !known {
		return "", fmt.Errorf("pgmsgmigrate: no migration %d to upgrade from (this binary has 1..%d)", from, Latest())
	}
	wantSQL := "'{}'::integer[]"
	if len(want) > 0 {
		parts := make([]string, len(want))
		for i, v := range want {
			parts[i] = fmt.Sprint(v)
		}
		wantSQL = "ARRAY[" + strings.Join(parts, ",") + "]"
	}
	b.WriteString(r(fmt.Sprintf(`DO $check$
BEGIN
    IF (SELECT coalesce(pg_catalog.array_agg(version ORDER BY version), '{}') FROM {{schema}}.pgmsg_migration) OPERATOR(pg_catalog.<>) %s THEN
        RAISE EXCEPTION 'pgmsg: schema %% is not at version %d: this script upgrades from it (pgmsg migrate status says where it is)', %s;
    END IF;
END $check$;
`, wantSQL, from, "{{schema_lit}}")))
	for _, mig := range all {
		if mig.Version <= from {
			continue
		}
		fmt.Fprintf(&b, "\n-- %03d_%s\n", mig.Version, mig.Name)
		b.WriteString(r(mig.Up))
		b.WriteString(r(fmt.Sprintf("\n;\nINSERT INTO {{schema}}.pgmsg_migration (version, name) VALUES (%d, %s);\n",
			mig.Version, schemaname.QuoteLiteral(mig.Name))))
	}
	// The function files, always: Up applies them whenever anything
	// changed, and applying them again is harmless.
	var names []string
	for _, code := range migration.AllCode() {
		fmt.Fprintf(&b, "\n-- functions/%s.sql\n", code.Name)
		b.WriteString(r(code.SQL))
		b.WriteString(r(fmt.Sprintf(`
;
INSERT INTO {{schema}}.pgmsg_migration_code (name, checksum) VALUES (%s, %s)
ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = pg_catalog.now();
`, schemaname.QuoteLiteral(code.Name), schemaname.QuoteLiteral(code.Checksum))))
		names = append(names, schemaname.QuoteLiteral(code.Name))
	}
	b.WriteString(r(fmt.Sprintf("DELETE FROM {{schema}}.pgmsg_migration_code WHERE name NOT IN (%s);\n", strings.Join(names, ", "))))
	b.WriteString("\nCOMMIT;\n")
	return b.String(), nil
}

// roleSuffixes name the roles the migrations create for a schema,
// "<schema>_<suffix>" (docs/operations.md).
var roleSuffixes = []string{"producer", "consumer", "worker", "admin"}

// Drop removes the schema with all its data and the roles the migrations
// created for it, in one transaction, without running the down
// migrations: for tests and throwaway installs. Other schemas' objects
// that depend on it (grants to other roles, foreign keys) are dropped too.
func (m *Migrator) Drop(ctx context.Context) error {
	return pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{m.schema}.Sanitize()+" CASCADE"); err != nil {
			return fmt.Errorf("pgmsgmigrate: drop schema %s: %w", m.schema, err)
		}
		for _, r := range roleSuffixes {
			role := pgx.Identifier{m.schema + "_" + r}.Sanitize()
			if _, err := tx.Exec(ctx, "DROP ROLE IF EXISTS "+role); err != nil {
				return fmt.Errorf("pgmsgmigrate: drop role %s: %w", role, err)
			}
		}
		return nil
	})
}

// ErrNotMigrated is returned by RequireCurrent when the schema lacks
// migrations this binary needs.
var ErrNotMigrated = errors.New("pgmsgmigrate: schema is not migrated to this version: run `pgmsg migrate up`")

// RequireCurrent returns ErrNotMigrated unless every known migration is
// applied and the schema's functions are this binary's.
func (m *Migrator) RequireCurrent(ctx context.Context) error {
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	for _, v := range st {
		if v.AppliedAt == nil {
			return fmt.Errorf("%w (version %03d_%s pending in schema %s)", ErrNotMigrated, v.Version, v.Name, m.schema)
		}
	}
	fns, err := m.Functions(ctx)
	if err != nil {
		return err
	}
	for _, f := range fns {
		if !f.Current {
			return fmt.Errorf("%w (functions/%s.sql of this binary not applied in schema %s)", ErrNotMigrated, f.Name, m.schema)
		}
	}
	return nil
}
