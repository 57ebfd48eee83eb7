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

// Eight processes' worth of migrators run Up at once on a new schema: all
// succeed, each version is applied exactly once.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_mig_%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })

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
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
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

// Migration 012 pins search_path on every function; reverting it leaves it
// pinned only on the three SECURITY DEFINER segment functions, as before,
// and the murmur2 it restated still matches Kafka's vectors either way.
func TestSearchPathMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_sp_%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	require.NoError(t, err)
	pinned := func() (pinned, unpinned int, names []string) {
		rows, err := pool.Query(ctx, `
			SELECT p.proname, coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)
			  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			 WHERE n.nspname = $1 ORDER BY 1`, schema)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var name string
			var ok bool
			require.NoError(t, rows.Scan(&name, &ok))
			if ok {
				pinned++
				names = append(names, name)
			} else {
				unpinned++
			}
		}
		require.NoError(t, rows.Err())
		return pinned, unpinned, names
	}
	murmur := func() int32 {
		var h int32
		require.NoError(t, pool.QueryRow(ctx, "SELECT "+schema+".murmur2('a-little-bit-long-string')").Scan(&h))
		return h
	}

	_, err = m.Up(ctx)
	require.NoError(t, err)
	p, u, _ := pinned()
	require.Zero(t, u, "unpinned functions after Up")
	require.Greater(t, p, 50)
	require.Equal(t, int32(-985981536), murmur())

	// Down to 011: every migration after it, 012 included.
	all := migration.All()
	_, err = m.Down(ctx, all[len(all)-1].Version-11)
	require.NoError(t, err)
	p, _, names := pinned()
	require.Equal(t, 3, p)
	require.Equal(t, []string{"_segment_create", "_segment_ensure", "_segment_lock"}, names)
	require.Equal(t, int32(-985981536), murmur())

	_, err = m.Up(ctx)
	require.NoError(t, err)
	_, u, _ = pinned()
	require.Zero(t, u)
}

// Migration 015 revokes PUBLIC's EXECUTE on the three SECURITY DEFINER
// segment functions and makes them check their arguments; reverting it
// restores exactly what 014 left: every function of the schema with the
// same definition, and the same effective privileges (grants to other
// roles kept).
func TestDefinerHardeningMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_dh_%d", time.Now().UnixNano()%1e9)
	role := schema + "_app"
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		_, _ = pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	require.NoError(t, err)

	// Up to 014 only: mark 015 and later as applied, migrate, unmark.
	_, err = pool.Exec(ctx, `CREATE SCHEMA `+schema+`;
CREATE TABLE `+schema+`.pgmsg_migration (version integer PRIMARY KEY, name text NOT NULL,
                                         applied_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	later := 0
	for _, mig := range migration.All() {
		if mig.Version >= 15 {
			_, err = pool.Exec(ctx, `INSERT INTO `+schema+`.pgmsg_migration (version, name) VALUES ($1, $2)`, mig.Version, mig.Name)
			require.NoError(t, err)
			later++
		}
	}
	_, err = m.Up(ctx)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM `+schema+`.pgmsg_migration WHERE version >= 15`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE ROLE `+role+` NOLOGIN; GRANT USAGE ON SCHEMA `+schema+` TO `+role+`;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA `+schema+` TO `+role)
	require.NoError(t, err)

	state := func() map[string]string { return functionStates(t, pool, schema) }
	publicCan := func(fn string) bool {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
WHERE p.pronamespace = $1::regnamespace AND p.proname = $2 AND a.grantee = 0 AND a.privilege_type = 'EXECUTE')`, schema, fn).Scan(&ok))
		return ok
	}
	fns := []string{"_segment_lock", "_segment_create", "_segment_ensure"}
	before := state()
	require.Greater(t, len(before), 50)
	for _, fn := range fns {
		require.True(t, publicCan(fn), fn)
	}

	_, err = m.Up(ctx)
	require.NoError(t, err)
	for _, fn := range fns {
		require.False(t, publicCan(fn), "%s after 015", fn)
	}
	var roleCan bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT has_function_privilege($1, $2, 'EXECUTE')`,
		role, schema+"._segment_ensure(integer, integer, bigint, bigint, bigint)").Scan(&roleCan))
	require.True(t, roleCan, "015 kept the role's grant")

	_, err = m.Down(ctx, later)
	require.NoError(t, err)
	require.Equal(t, before, state())
	_, err = m.Up(ctx)
	require.NoError(t, err)
	require.NoError(t, m.RequireCurrent(ctx))
}

// Migration 020 moves job payloads into job_payload and back: jobs waiting,
// running, dead and archived keep their payloads through up and down, and
// down restores 019's functions exactly.
func TestJobPayloadMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_jp_%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	latest := migration.All()[len(migration.All())-1].Version
	_, err = m.Down(ctx, latest-19)
	require.NoError(t, err)
	functions := func() map[string]string { return functionStates(t, pool, schema) }
	before := functions()

	// Under 019: a waiting, a running, a dead and two archived jobs.
	s := schema
	var ids []int64
	rows, err := pool.Query(ctx, `SELECT id FROM `+s+`.enqueue_many('q', ARRAY['\x01'::bytea, '\x02', '\x03', '\x04', '\x05', NULL])`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, 6)
	_, err = pool.Exec(ctx, `SELECT * FROM `+s+`.job_claim('q', 3)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT `+s+`.job_complete(id, lease_token) FROM `+s+`.job WHERE id = $1`, ids[0])
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT f.* FROM `+s+`.job j, LATERAL `+s+`.job_fail(j.id, j.lease_token, 'x', p_dead => true) f WHERE j.id = $1`, ids[1])
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT `+s+`.job_cancel($1)`, ids[3])
	require.NoError(t, err)
	payloads := func() []string {
		var out []string
		for _, id := range ids {
			var p *string
			require.NoError(t, pool.QueryRow(ctx, `SELECT encode(payload, 'hex') FROM `+s+`.job_get($1)`, id).Scan(&p))
			if p == nil {
				out = append(out, "NULL")
			} else {
				out = append(out, *p)
			}
		}
		return out
	}
	want := []string{"01", "02", "03", "04", "05", "NULL"}
	require.Equal(t, want, payloads())

	_, err = m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, want, payloads(), "after 020")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.job_payload`).Scan(&n))
	require.Equal(t, 6, n)
	// A job enqueued and archived under 020 keeps its payload; purging the
	// dead job deletes its payload.
	var id7 int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM `+s+`.enqueue('q', '\x07')`).Scan(&id7))
	_, err = pool.Exec(ctx, `SELECT `+s+`.job_cancel($1)`, id7)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT `+s+`.dead_purge('q')`)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.job_payload WHERE id = $1`, ids[1]).Scan(&n))
	require.Zero(t, n, "the purged dead job's payload")
	ids = append(ids[:1], ids[2:]...)
	ids = append(ids, id7)
	want = []string{"01", "03", "04", "05", "NULL", "07"}
	require.Equal(t, want, payloads())

	_, err = m.Down(ctx, latest-19)
	require.NoError(t, err)
	require.Equal(t, want, payloads(), "after 020 down")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relname = 'job_payload'`,
		schema).Scan(&n))
	require.Zero(t, n)
	require.Equal(t, before, functions(), "020 down restores 019's functions")
}

// functionStates maps each function of schema to its definition and its
// privileges, to compare a schema's functions before and after migrations.
func functionStates(t *testing.T, pool *pgxpool.Pool, schema string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT p.oid::regprocedure::text,
       pg_get_functiondef(p.oid) || ' ACL ' || coalesce((
         SELECT string_agg(format('%s:%s:%s:%s', a.grantor::regrole, a.grantee, a.privilege_type, a.is_grantable),
                           ',' ORDER BY a.grantee, a.privilege_type)
           FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a), '')
  FROM pg_proc p WHERE p.pronamespace = $1::regnamespace`, schema)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var name, def string
		require.NoError(t, rows.Scan(&name, &def))
		out[name] = def
	}
	require.NoError(t, rows.Err())
	return out
}
