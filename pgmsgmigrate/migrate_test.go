package pgmsgmigrate_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/migration"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// dropAll drops schema and its roles (a DROP SCHEMA alone leaves the
// roles, which are cluster-wide, on the server).
func dropAll(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	if err == nil {
		err = m.Drop(context.Background())
	}
	if err != nil {
		t.Errorf("drop %s: %v", schema, err)
	}
}

// Eight processes' worth of migrators run Up at once on a new schema: all
// succeed, each version is applied exactly once.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_mig_%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { dropAll(t, pool, schema) })

	var wg sync.WaitGroup
	applied := make([][]int, 8)
	errs := make([]error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
			if err != nil {
				errs[i] = err
				return
			}
			res, err := m.Up(ctx)
			errs[i] = err
			if res != nil {
				applied[i] = res.Versions
			}
		}()
	}
	wg.Wait()
	total := 0
	for i := range 8 {
		require.NoError(t, errs[i])
		total += len(applied[i])
	}
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	require.NoError(t, err)
	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, len(st), total, "each version applied exactly once")
	require.NoError(t, m.RequireCurrent(ctx))
}

// Down reverts everything (the schema disappears), Up brings it back, and
// status reports pending versions in between.
func TestDownUpRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_rt_%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { dropAll(t, pool, schema) })
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	require.NoError(t, err)

	require.ErrorIs(t, m.RequireCurrent(ctx), pgmsgmigrate.ErrNotMigrated)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "SELECT "+schema+".topic_create('t', 2)")
	require.NoError(t, err)

	res, err := m.Down(ctx, 1)
	require.NoError(t, err)
	require.Len(t, res.Versions, 1)
	require.ErrorIs(t, m.RequireCurrent(ctx), pgmsgmigrate.ErrNotMigrated)
	_, err = m.Up(ctx)
	require.NoError(t, err)

	// Count the migrations rather than assume versions 1..Latest(): the
	// migrator takes them in order and accepts gaps in the numbering.
	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, pgmsgmigrate.Latest(), st[len(st)-1].Version)
	res, err = m.Down(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, len(st), len(res.Versions))
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	require.False(t, exists, "down to zero drops the schema")
	res, err = m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, len(st), len(res.Versions))
	res, err = m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Versions, "a second up has nothing to do")
}

func TestInvalidSchema(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "1abc", `a"b`, "a;b", "with space", "x234567890123456789012345678901234567890123456789"} {
		if s == "" {
			continue // empty means the default
		}
		_, err := pgmsgmigrate.New(nil, &pgmsgmigrate.Opts{Schema: s})
		require.Error(t, err, "schema %q", s)
	}
}

// The function files are applied with the versions, again whenever one of
// them differs from what the schema recorded (a new binary with a changed
// function and no new version), and never otherwise; re-applying keeps the
// grants given on the functions. RequireCurrent tells a schema whose
// functions are not this binary's.
func TestFunctionFilesReapplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_fn_%d", time.Now().UnixNano()%1e9)
	role := schema + "_app"
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, m.Drop(context.Background()))
		_, _ = pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	var names []string
	for _, c := range migration.AllCode() {
		names = append(names, c.Name)
	}

	res, err := m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, res.Versions, len(migration.All()))
	require.Equal(t, names, res.Functions)
	res, err = m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Versions)
	require.Empty(t, res.Functions, "nothing changed: nothing applied")

	_, err = pool.Exec(ctx, `CREATE ROLE `+role+` NOLOGIN;
GRANT USAGE ON SCHEMA `+schema+` TO `+role+`;
GRANT EXECUTE ON FUNCTION `+schema+`.topic_create(text, integer, jsonb) TO `+role)
	require.NoError(t, err)
	validName := func() bool {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT "+schema+".valid_name('orders')").Scan(&ok))
		return ok
	}
	require.True(t, validName())

	// What an older binary left: another body, another checksum.
	_, err = pool.Exec(ctx, `CREATE OR REPLACE FUNCTION `+schema+`.valid_name(p_name text) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS 'SELECT false';
UPDATE `+schema+`.pgmsg_migration_code SET checksum = 'older' WHERE name = 'log'`)
	require.NoError(t, err)
	require.False(t, validName())
	require.ErrorIs(t, m.RequireCurrent(ctx), pgmsgmigrate.ErrNotMigrated)
	fns, err := m.Functions(ctx)
	require.NoError(t, err)
	for _, f := range fns {
		require.NotNil(t, f.AppliedAt, f.Name)
		require.Equal(t, f.Name != "log", f.Current, f.Name)
	}

	res, err = m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Versions)
	require.Equal(t, names, res.Functions)
	require.True(t, validName(), "the binary's body is back")
	require.NoError(t, m.RequireCurrent(ctx))
	var can bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT has_function_privilege($1, $2, 'EXECUTE')`,
		role, schema+".topic_create(text, integer, jsonb)").Scan(&can))
	require.True(t, can, "re-applying kept the role's grant")
}

// A partial Down reverts the newest versions and drops the functions (they
// depend on the tables' row types); the older versions' tables keep their
// rows, and Up restores the rest.
func TestPartialDownDropsFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_pd_%d", time.Now().UnixNano()%1e9)
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Drop(context.Background())) })
	_, err = m.Up(ctx)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "SELECT "+schema+".topic_create('kept', 2)")
	require.NoError(t, err)

	res, err := m.Down(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []int{pgmsgmigrate.Latest()}, res.Versions)
	var fns, topics int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE pronamespace = $1::regnamespace", schema).Scan(&fns))
	require.Zero(t, fns)
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".topic WHERE name = 'kept'").Scan(&topics))
	require.Equal(t, 1, topics)
	require.ErrorIs(t, m.RequireCurrent(ctx), pgmsgmigrate.ErrNotMigrated)
	st, err := m.Functions(ctx)
	require.NoError(t, err)
	for _, f := range st {
		require.Nil(t, f.AppliedAt, f.Name)
	}

	res, err = m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{pgmsgmigrate.Latest()}, res.Versions)
	require.NotEmpty(t, res.Functions)
	require.NoError(t, m.RequireCurrent(ctx))
	var partitions int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".topic_describe('kept')").Scan(&partitions))
	require.Equal(t, 2, partitions)
}

// A schema that records one of this binary's versions under another name
// was migrated by another history (before the fold, or a fork): Up, Down,
// Status and RequireCurrent refuse it and change nothing.
func TestIncompatibleHistoryRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_ih_%d", time.Now().UnixNano()%1e9)
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Drop(context.Background())) })
	_, err = m.Up(ctx)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE `+schema+`.pgmsg_migration SET name = 'log_ops' WHERE version = 4`)
	require.NoError(t, err)

	_, err = m.Up(ctx)
	require.ErrorIs(t, err, pgmsgmigrate.ErrIncompatibleHistory)
	require.Contains(t, err.Error(), `version 4 as "log_ops"`)
	_, err = m.Down(ctx, 1)
	require.ErrorIs(t, err, pgmsgmigrate.ErrIncompatibleHistory)
	_, err = m.Status(ctx)
	require.ErrorIs(t, err, pgmsgmigrate.ErrIncompatibleHistory)
	require.ErrorIs(t, m.RequireCurrent(ctx), pgmsgmigrate.ErrIncompatibleHistory)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.pgmsg_migration`).Scan(&n))
	require.Equal(t, len(migration.All()), n, "nothing reverted")
}

// min_insync_replicas survives the function files being applied again (the
// setting is a row; the files put back the triggers it asks for), and
// reverting its migration turns the guard off with the triggers gone.
func TestMinInsyncReplicasKeptAcrossMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_insync_%d", time.Now().UnixNano()%1e9)
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Drop(context.Background())) })
	_, err = m.Up(ctx)
	require.NoError(t, err)
	triggers := func() int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
			WHERE c.relnamespace = $1::regnamespace AND t.tgname LIKE 'insync\_%'`, schema).Scan(&n))
		return n
	}
	_, err = pool.Exec(ctx, "SELECT "+schema+".min_insync_replicas_set(2)")
	require.NoError(t, err)
	require.Equal(t, 4, triggers())

	// Triggers lost (as a down migration's dropFunctions drops them), and
	// the function files applied again: the setting brings them back.
	for _, tr := range []string{"insync_record ON %[1]s.record", "insync_producer_state ON %[1]s.producer_state",
		"insync_job ON %[1]s.job", "insync_kafka_offset ON %[1]s.kafka_offset"} {
		_, err = pool.Exec(ctx, "DROP TRIGGER "+fmt.Sprintf(tr, schema))
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, "DELETE FROM "+schema+".pgmsg_migration_code")
	require.NoError(t, err)
	res, err := m.Up(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, res.Functions)
	require.Equal(t, 4, triggers())
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT "+schema+".min_insync_replicas()").Scan(&n))
	require.Equal(t, 2, n)

	// Reverting the migration that holds the setting (029, and the ones
	// after it) turns the guard off.
	st, err := m.Status(ctx)
	require.NoError(t, err)
	steps := 0
	for _, v := range st {
		if v.Version >= 29 {
			steps++
		}
	}
	_, err = m.Down(ctx, steps)
	require.NoError(t, err)
	require.Zero(t, triggers())
	_, err = m.Up(ctx)
	require.NoError(t, err)
	require.Zero(t, triggers())
	require.NoError(t, pool.QueryRow(ctx, "SELECT "+schema+".min_insync_replicas()").Scan(&n))
	require.Equal(t, 1, n)
}
