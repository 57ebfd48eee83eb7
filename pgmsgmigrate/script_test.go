package pgmsgmigrate_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// psqlRun runs a script with psql, as a user without the Go binary would.
func psqlRun(t *testing.T, script string) (string, error) {
	t.Helper()
	psql, err := exec.LookPath("psql")
	require.NoError(t, err, "psql (PostgreSQL's client) is needed to run the plain SQL install")
	file := filepath.Join(t.TempDir(), "install.sql")
	require.NoError(t, os.WriteFile(file, []byte(script), 0o600))
	out, err := exec.Command(psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", pgtest.URL(t), "-f", file).CombinedOutput()
	return string(out), err
}

// catalogState is what a schema holds, with its name replaced by <S> so
// that two schemas can be compared: tables and their columns, constraints,
// indexes, options and effective grants (a default ACL and the same
// privileges written out compare equal), sequences, functions with their
// grants.
func catalogState(t *testing.T, pool *pgxpool.Pool, schema string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT 'rel ' || c.relname, c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '') || ' ACL ' || coalesce((
         SELECT string_agg(format('%s:%s', (CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END), a.privilege_type), ',' ORDER BY (CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END), a.privilege_type)
           FROM aclexplode(coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a), '')
  FROM pg_class c WHERE c.relnamespace = $1::regnamespace
UNION ALL
SELECT 'col ' || c.relname || '.' || a.attname, format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' ' ||
       coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' ' ||
       -- The column's position among the live ones: a column dropped by a
       -- down step and added again takes a new attnum.
       (SELECT count(*) FROM pg_attribute b WHERE b.attrelid = a.attrelid AND b.attnum > 0 AND b.attnum <= a.attnum
                                              AND NOT b.attisdropped)
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'con ' || c.relname || '.' || k.conname, pg_get_constraintdef(k.oid)
  FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid WHERE c.relnamespace = $1::regnamespace
UNION ALL
SELECT 'idx ' || i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname::text = $1::text
UNION ALL
SELECT 'fn ' || p.oid::regprocedure::text, pg_get_functiondef(p.oid) || ' ACL ' || coalesce((
         SELECT string_agg(format('%s:%s', (CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END), a.privilege_type), ',' ORDER BY (CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END), a.privilege_type)
           FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a), '')
  FROM pg_proc p WHERE p.pronamespace = $1::regnamespace
UNION ALL
SELECT 'schema ACL', coalesce((SELECT string_agg(format('%s:%s', (CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END), a.privilege_type), ',' ORDER BY (CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END), a.privilege_type)
                                 FROM pg_namespace n, aclexplode(n.nspacl) a WHERE n.oid = $1::regnamespace), '')`, schema)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		require.NoError(t, rows.Scan(&k, &v))
		norm := strings.NewReplacer(`"`+schema+`"`, "<S>", schema, "<S>")
		out[norm.Replace(k)] = norm.Replace(v)
	}
	require.NoError(t, rows.Err())
	require.Greater(t, len(out), 100, "the catalog query read too little of %s", schema)
	return out
}

// `pgmsg migrate sql` (Script) run by psql alone installs the same schema
// as the Go migrator, and each upgrade step as well; a script meant for
// another version refuses to run and changes nothing.
func TestScriptMatchesMigrator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	suffix := time.Now().UnixNano() % 1e9
	viaGo, viaSQL, upgraded := fmt.Sprintf("pgmsg_sg_%d", suffix), fmt.Sprintf("pgmsg_ss_%d", suffix), fmt.Sprintf("pgmsg_su_%d", suffix)
	migrators := map[string]*pgmsgmigrate.Migrator{}
	for _, s := range []string{viaGo, viaSQL, upgraded} {
		m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: s})
		require.NoError(t, err)
		migrators[s] = m
		t.Cleanup(func() { require.NoError(t, m.Drop(context.Background())) })
	}
	_, err := migrators[viaGo].Up(ctx)
	require.NoError(t, err)
	want := catalogState(t, pool, viaGo)

	script, err := pgmsgmigrate.Script(viaSQL, 0)
	require.NoError(t, err)
	out, err := psqlRun(t, script)
	require.NoError(t, err, out)
	// Quiet under psql (-q hides only command tags): no NOTICE of an
	// IF NOT EXISTS or a cascade, and no result table.
	require.NotContains(t, out, "NOTICE")
	require.NotContains(t, out, "row)")
	require.NoError(t, migrators[viaSQL].RequireCurrent(ctx), "the Go migrator sees the script's install as current")
	require.Equal(t, want, catalogState(t, pool, viaSQL))
	res, err := migrators[viaSQL].Up(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Versions)

	// An upgrade step: the Go migrator installs all but the last version,
	// the script adds it and the functions.
	_, err = migrators[upgraded].Up(ctx)
	require.NoError(t, err)
	_, err = migrators[upgraded].Down(ctx, 1)
	require.NoError(t, err)
	st, err := migrators[upgraded].Status(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(st), 3)
	from := st[len(st)-2].Version
	wrong, err := pgmsgmigrate.Script(upgraded, st[len(st)-3].Version)
	require.NoError(t, err)
	out, err = psqlRun(t, wrong)
	require.Error(t, err, "a script for another version must refuse")
	require.Contains(t, out, "is not at version")
	require.ErrorIs(t, migrators[upgraded].RequireCurrent(ctx), pgmsgmigrate.ErrNotMigrated, "nothing was applied")
	step, err := pgmsgmigrate.Script(upgraded, from)
	require.NoError(t, err)
	out, err = psqlRun(t, step)
	require.NoError(t, err, out)
	require.NoError(t, migrators[upgraded].RequireCurrent(ctx))
	require.Equal(t, want, catalogState(t, pool, upgraded))

	_, err = pgmsgmigrate.Script(viaSQL, 9999)
	require.Error(t, err)
	_, err = pgmsgmigrate.Script("bad name", 0)
	require.Error(t, err)
}
