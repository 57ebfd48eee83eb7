// Package pgmsgmigrate installs, upgrades and removes pgmsg's schema.
//
// Migrations are embedded in the binary, versioned, and each runs in a
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

// Result lists the versions a call applied or reverted.
type Result struct {
	Versions []int `json:"versions"`
}

// Latest is the highest version this binary knows.
func Latest() int {
	all := migration.All()
	return all[len(all)-1].Version
}

func (m *Migrator) render(sql string) string { return migration.Render(sql, m.schema) }

// locked runs fn in a transaction that holds the schema's migration lock and
// has created the schema and the version table.
func (m *Migrator) locked(ctx context.Context, fn func(tx pgx.Tx, applied map[int]time.Time) error) error {
	return pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "pgmsg.migrate."+m.schema); err != nil {
			return fmt.Errorf("pgmsgmigrate: take migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, m.render(`CREATE SCHEMA IF NOT EXISTS {{schema}};
CREATE TABLE IF NOT EXISTS {{schema}}.pgmsg_migration (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`)); err != nil {
			return fmt.Errorf("pgmsgmigrate: create schema %s: %w", m.schema, err)
		}
		rows, err := tx.Query(ctx, m.render("SELECT version, applied_at FROM {{schema}}.pgmsg_migration"))
		if err != nil {
			return err
		}
		applied := map[int]time.Time{}
		for rows.Next() {
			var v int
			var at time.Time
			if err := rows.Scan(&v, &at); err != nil {
				return err
			}
			applied[v] = at
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return fn(tx, applied)
	})
}

// Up applies every pending migration, in one transaction.
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
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Down reverts the newest steps applied migrations (all of them when steps
// is 0 or more than are applied), dropping what they created, records
// included. Reverting every version also drops the schema if nothing else
// is left in it.
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
			if _, err := tx.Exec(ctx, m.render("DROP TABLE {{schema}}.pgmsg_migration")); err != nil {
				return err
			}
			var left int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace`, m.schema).Scan(&left); err != nil {
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
	if err := m.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL",
		pgx.Identifier{m.schema, "pgmsg_migration"}.Sanitize()).Scan(&exists); err != nil {
		return nil, err
	}
	applied := map[int]time.Time{}
	if exists {
		rows, err := m.pool.Query(ctx, m.render("SELECT version, applied_at FROM {{schema}}.pgmsg_migration"))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var v int
			var at time.Time
			if err := rows.Scan(&v, &at); err != nil {
				return nil, err
			}
			applied[v] = at
		}
		if err := rows.Err(); err != nil {
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

// Script returns the migrations after version from (0: a new install) as
// one plain SQL script for the schema, which psql alone can run (psql -v
// ON_ERROR_STOP=1 -f FILE): in one transaction, under the migration lock
// Up takes, it refuses a schema that is not at version from, applies
// each migration and records it, exactly as Up does, so that the Go
// migrator and the script can take turns on the same schema.
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
	r := func(sql string) string { return migration.Render(sql, schema) }
	fmt.Fprintf(&b, "SELECT pg_advisory_xact_lock(hashtext(%s));\n", migration.QuoteLiteral("pgmsg.migrate."+schema))
	b.WriteString(r(`CREATE SCHEMA IF NOT EXISTS {{schema}};
CREATE TABLE IF NOT EXISTS {{schema}}.pgmsg_migration (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
`))
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
    IF (SELECT coalesce(array_agg(version ORDER BY version), '{}') FROM {{schema}}.pgmsg_migration) <> %s THEN
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
			mig.Version, migration.QuoteLiteral(mig.Name))))
	}
	b.WriteString("\nCOMMIT;\n")
	return b.String(), nil
}

// roleSuffixes name the roles the migrations create for a schema,
// "<schema>_<suffix>" (migration 017; docs/operations.md).
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

// RequireCurrent returns ErrNotMigrated unless every known migration is applied.
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
	return nil
}
