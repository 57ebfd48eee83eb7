package pgmsgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Each test gets a working schema of its own, and nothing of it is left
// once the test ends.
func TestNew(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, nil) // a pool on the test server
	ctx := context.Background()
	var schema string
	t.Run("inner", func(t *testing.T) {
		env := pgmsgtest.New(t, b.Pool, &pgmsg.Config{Schema: "ignored"})
		schema = env.Schema
		require.Regexp(t, `^pgmsgtest_[0-9a-f]{12}$`, schema)
		_, err := env.Client.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 2})
		require.NoError(t, err)
		recs := []*pgmsg.Record{{Topic: "orders", Key: []byte("k"), Value: []byte("v")}}
		require.NoError(t, env.Client.Publish(ctx, recs, nil))
		var n int
		require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "topic"}.Sanitize()).Scan(&n))
		require.Equal(t, 1, n)
		other := pgmsgtest.New(t, b.Pool, nil)
		require.NotEqual(t, schema, other.Schema)
		_, err = other.Client.DescribeTopic(ctx, "orders")
		require.ErrorIs(t, err, pgmsg.ErrUnknownTopic, "schemas are isolated")
	})
	var left int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&left))
	require.Zero(t, left, "the schema was dropped")
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname LIKE $1 || '\_%'`, schema).Scan(&left))
	require.Zero(t, left, "its roles were dropped")
}
