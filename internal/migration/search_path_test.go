package migration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// hijackState is the SQLSTATE the planted functions raise: seeing it means
// a pgmsg function resolved a built-in against the caller's search_path.
const hijackState = "HJ001"

// A role that can create objects in a schema on the caller's search_path
// (public, on PostgreSQL 14 and older) plants format overloads that are a
// better match than pg_catalog's format(text, VARIADIC "any"). pgmsg's
// functions pin search_path, so none of them ever runs the planted code,
// on their error paths or their success paths.
func TestSearchPathHijack(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, nil)
	ctx := context.Background()
	evil := b.Schema + "_evil"
	admin, err := pgxpool.New(ctx, b.URL)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{evil}.Sanitize()+" CASCADE")
		admin.Close()
	})
	ev := pgx.Identifier{evil}.Sanitize()
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+ev)
	require.NoError(t, err)
	// format with two to six text arguments, and a variadic text[] one: each
	// beats pg_catalog.format(text, VARIADIC "any") for text arguments.
	for n := 1; n <= 5; n++ {
		params := strings.Repeat(", text", n)
		_, err = admin.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION %s.format(text%s) RETURNS text
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION USING ERRCODE = '%s', MESSAGE = 'hijacked format'; END $$`,
			ev, params, hijackState))
		require.NoError(t, err)
	}

	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.MaxConns = 2
	// What a careless deployment has: an attacker-writable schema first.
	cfg.ConnConfig.RuntimeParams["search_path"] = evil + ", " + b.Schema + ", public"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// The planted function is reachable from this session.
	_, err = pool.Exec(ctx, "SELECT format('%s', 'x'::text)")
	requireState(t, err, hijackState)

	s := pgx.Identifier{b.Schema}.Sanitize()
	calls := []struct {
		sql   string
		state string // expected SQLSTATE; "" means success
	}{
		{"SELECT " + s + ".topic_create('t', 2)", ""},
		{"SELECT " + s + ".topic_create('t', 2)", "PM002"},
		{"SELECT " + s + ".topic_create('u', 0)", "PM004"},
		{"SELECT " + s + ".topic_create('bad name', 1)", "PM003"},
		{"SELECT " + s + ".publish('nope', ARRAY['v'::bytea])", "PM001"},
		{"SELECT " + s + ".publish('t', ARRAY['v'::bytea], p_partition => 7)", "PM005"},
		{"SELECT " + s + ".publish('t', ARRAY['v'::bytea], ARRAY['k'::bytea])", ""},
		{"SELECT " + s + ".fetch('t', 9, 0, 10)", "PM005"},
		{"SELECT * FROM " + s + ".claim('t', 'g', 10, interval '30 seconds')", ""},
		{"SELECT * FROM " + s + ".claim('nope', 'g', 10, interval '30 seconds')", "PM001"},
		{"SELECT " + s + ".group_create('t', 'g2', 'bogus')", "PM011"},
		{"SELECT " + s + ".commit('t', 'nope', 0, 1, 0)", "PM007"},
		{"SELECT " + s + ".enqueue('nope', 'x'::bytea, p_create_queue => false)", "PM101"},
		{"SELECT " + s + ".queue_create('q')", ""},
		{"SELECT " + s + ".queue_create('q')", "PM102"},
		{"SELECT " + s + ".enqueue('q', 'x'::bytea)", ""},
		{"SELECT * FROM " + s + ".job_claim('q', 1, interval '30 seconds', 'w')", ""},
		{"SELECT " + s + ".job_complete(-1, 0)", "PM107"},
		{"SELECT * FROM " + s + ".job_get(-1)", "PM107"},
		{"SELECT " + s + ".token_revoke(-1)", "PMA01"},
		{"SELECT " + s + ".queue_delete('q')", "PM108"},
		{"SELECT " + s + ".topic_delete('t', true)", ""},
	}
	var hijacked []string
	for _, c := range calls {
		_, err := pool.Exec(ctx, c.sql)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == hijackState {
			hijacked = append(hijacked, c.sql)
			continue
		}
		if c.state == "" {
			require.NoError(t, err, c.sql)
			continue
		}
		requireState(t, err, c.state, c.sql)
	}
	require.Empty(t, hijacked, "calls that ran the planted format")
}

func requireState(t *testing.T, err error, state string, msg ...any) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want SQLSTATE %s, got %v %v", state, err, msg)
	require.Equal(t, state, pgErr.Code, "%s %v", pgErr.Message, msg)
}

// Every function in the schema runs with search_path pinned, so a migration
// that adds a function without SET search_path fails here.
func TestFunctionsPinSearchPath(t *testing.T) {
	t.Parallel()
	b := pgtest.Tx(t) // catalog queries only
	ctx := context.Background()
	rows, err := b.Query(ctx, `
		SELECT p.oid::regprocedure::text
		  FROM pg_catalog.pg_proc p
		 WHERE p.pronamespace = pg_catalog.to_regnamespace($1)
		   AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)
		 ORDER BY 1`, pgx.Identifier{b.Schema}.Sanitize())
	require.NoError(t, err)
	unpinned, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, unpinned, "functions without SET search_path = pg_catalog, pg_temp")

	var n int
	require.NoError(t, b.QueryRow(ctx,
		`SELECT count(*) FROM pg_catalog.pg_proc WHERE pronamespace = pg_catalog.to_regnamespace($1)`,
		pgx.Identifier{b.Schema}.Sanitize()).Scan(&n))
	require.Greater(t, n, 50, "the schema's functions were found")
}

// No SECURITY DEFINER function of the schema may be executable by PUBLIC:
// such a function runs as the
// schema's owner, so only roles granted EXECUTE on purpose may call it.
// A future definer function fails this test until its EXECUTE is revoked.
func TestDefinerFunctionsNotExecutableByPublic(t *testing.T) {
	t.Parallel()
	b := pgtest.Tx(t) // catalog queries only
	ctx := context.Background()
	rows, err := b.Query(ctx, `
		SELECT p.oid::regprocedure::text
		  FROM pg_catalog.pg_proc p
		 WHERE p.pronamespace = pg_catalog.to_regnamespace($1)
		   AND p.prosecdef
		   AND EXISTS (SELECT 1 FROM pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
		                WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
		 ORDER BY 1`, pgx.Identifier{b.Schema}.Sanitize())
	require.NoError(t, err)
	open, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, open, "SECURITY DEFINER functions executable by PUBLIC")

	var definers int
	require.NoError(t, b.QueryRow(ctx,
		`SELECT count(*) FROM pg_catalog.pg_proc WHERE pronamespace = pg_catalog.to_regnamespace($1) AND prosecdef`,
		pgx.Identifier{b.Schema}.Sanitize()).Scan(&definers))
	require.GreaterOrEqual(t, definers, 3, "the schema's definer functions were found")
}
