package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// schemaGuard remembers whether the run created pgmsg's schema, so that
// it drops exactly what it created.
type schemaGuard struct {
	pool    *pgxpool.Pool
	schema  string
	created bool
}

// ensureSchema makes schema ready for a run. A schema that does not exist
// is created, migrated and dropped again at the end. An existing pgmsg
// schema is used only when it holds no topics or queues, unless force.
func ensureSchema(ctx context.Context, pool *pgxpool.Pool, schema string, force bool) (*schemaGuard, error) {
	if err := pgmsgmigrate.ValidateSchema(schema); err != nil {
		return nil, err
	}
	g := &schemaGuard{pool: pool, schema: schema}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return nil, err
	}
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	if err != nil {
		return nil, err
	}
	if !exists {
		if _, err := m.Up(ctx); err != nil {
			return nil, fmt.Errorf("bench: migrate schema %s: %w", schema, err)
		}
		g.created = true
		return g, nil
	}
	var isPgmsg bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{schema, "topic"}.Sanitize()).Scan(&isPgmsg); err != nil {
		return nil, err
	}
	if !isPgmsg {
		return nil, fmt.Errorf("bench: schema %q exists and is not a pgmsg schema: choose another --schema", schema)
	}
	if err := m.RequireCurrent(ctx); err != nil {
		return nil, fmt.Errorf("bench: schema %q: %w", schema, err)
	}
	if force {
		return g, nil
	}
	held, err := otherData(ctx, pool, schema)
	if err != nil {
		return nil, err
	}
	if len(held) > 0 {
		return nil, fmt.Errorf("bench: schema %q holds other pgmsg data (%s); a benchmark loads the database heavily: "+
			"use a schema of its own (--schema), or --force to run anyway (it only creates and drops its own topic or queue)",
			schema, strings.Join(held, ", "))
	}
	return g, nil
}

// otherData describes what the schema holds: topics, and queues or jobs
// when the queue migration is installed.
func otherData(ctx context.Context, pool *pgxpool.Pool, schema string) ([]string, error) {
	var out []string
	var topics int64
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, pgx.Identifier{schema, "topic"}.Sanitize())).Scan(&topics); err != nil {
		return nil, err
	}
	if topics > 0 {
		out = append(out, fmt.Sprintf("%d topics", topics))
	}
	// The queue tables, whichever of them exist.
	for _, table := range []string{"queue", "job", "job_archive"} {
		var exists bool
		id := pgx.Identifier{schema, table}.Sanitize()
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p'))`, schema, table).Scan(&exists); err != nil {
			return nil, err
		}
		if !exists {
			continue
		}
		var any bool
		if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s)`, id)).Scan(&any); err != nil {
			return nil, err
		}
		if any {
			out = append(out, "rows in "+table)
		}
	}
	return out, nil
}

func (g *schemaGuard) release(ctx context.Context) {
	if g.created {
		// The migrator's Drop: the schema and the roles its migration
		// created (DROP SCHEMA alone leaves the cluster-wide roles).
		if m, err := pgmsgmigrate.New(g.pool, &pgmsgmigrate.Opts{Schema: g.schema}); err == nil {
			_ = m.Drop(ctx)
		}
	}
}

// scratchSchema creates a fresh schema for tables of a baseline (the
// seed baseline's SQL, the COPY ceiling); dropScratch removes it.
func scratchSchema(ctx context.Context, pool *pgxpool.Pool, prefix string) (string, error) {
	name := prefix + "_" + randomSuffix()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	return name, nil
}

func dropScratch(ctx context.Context, pool *pgxpool.Pool, name string) {
	if name != "" {
		_, _ = pool.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{name}.Sanitize()+` CASCADE`)
	}
}
