package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Tests get distinct, migrated schemas, on pools whose search_path is
// empty.
func TestSchema(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.Schema(t, nil), pgtest.Schema(t, &pgtest.Opts{MaxConns: 2})
	require.NotEqual(t, a.Schema, b.Schema)
	for _, x := range []*pgtest.Bundle{a, b} {
		m, err := pgmsgmigrate.New(x.Pool, &pgmsgmigrate.Opts{Schema: x.Schema})
		require.NoError(t, err)
		require.NoError(t, m.RequireCurrent(ctx))
		var path string
		require.NoError(t, x.Pool.QueryRow(ctx, "SHOW search_path").Scan(&path))
		require.Empty(t, path)
	}
	require.EqualValues(t, 2, b.Pool.Config().MaxConns)
}

// A Tx's work is rolled back, sequences included, and the next Tx gets
// the schema back in its migrated state; a committed Tx's schema is not
// lent again.
func TestTx(t *testing.T) {
	ctx := context.Background()
	var schema, seq string
	var first int64
	t.Run("first", func(t *testing.T) {
		tx := pgtest.Tx(t)
		schema = tx.Schema
		require.NoError(t, tx.QueryRow(ctx, `SELECT format('%I.%I', schemaname, sequencename) FROM pg_sequences
WHERE schemaname = $1 ORDER BY sequencename LIMIT 1`, schema).Scan(&seq))
		require.NoError(t, tx.QueryRow(ctx, "SELECT nextval($1)", seq).Scan(&first))
		var n int64
		require.NoError(t, tx.QueryRow(ctx, "SELECT nextval($1)", seq).Scan(&n))
		require.Equal(t, first+1, n)
		_, err := tx.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "scratch"}.Sanitize()+" (x int)")
		require.NoError(t, err)
		var path string
		require.NoError(t, tx.QueryRow(ctx, "SHOW search_path").Scan(&path))
		require.Empty(t, path)
	})
	t.Run("again", func(t *testing.T) {
		tx := pgtest.Tx(t)
		require.Equal(t, schema, tx.Schema, "the free schema is lent again")
		var n int64
		require.NoError(t, tx.QueryRow(ctx, "SELECT nextval($1)", seq).Scan(&n))
		require.Equal(t, first, n, "the sequence was set back")
		var exists bool
		require.NoError(t, tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL",
			pgx.Identifier{schema, "scratch"}.Sanitize()).Scan(&exists))
		require.False(t, exists, "the table was rolled back")
		require.NoError(t, tx.Commit(ctx))
	})
	t.Run("after commit", func(t *testing.T) {
		tx := pgtest.Tx(t)
		require.NotEqual(t, schema, tx.Schema, "a committed schema is not lent again")
	})
}
