package pgmsgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

func TestMain(m *testing.M) { pgtest.Main(pgmsgtest.WithMain(m)) }

// useEnvs gets two Envs on pool in a subtest, checks that they work and
// are isolated, and returns their schemas.
func useEnvs(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	ctx := context.Background()
	var schemas []string
	t.Run("inner", func(t *testing.T) {
		env := pgmsgtest.New(t, pool, &pgmsg.Config{Schema: "ignored"})
		schema := env.Schema
		require.Regexp(t, `^pgmsgtest_[0-9a-f]{12}$`, schema)
		_, err := env.Client.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 2})
		require.NoError(t, err)
		recs := []*pgmsg.Record{{Topic: "orders", Key: []byte("k"), Value: []byte("v")}}
		require.NoError(t, env.Client.Publish(ctx, recs, nil))
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "topic"}.Sanitize()).Scan(&n))
		require.Equal(t, 1, n)
		other := pgmsgtest.New(t, pool, nil)
		require.NotEqual(t, schema, other.Schema)
		_, err = other.Client.DescribeTopic(ctx, "orders")
		require.ErrorIs(t, err, pgmsg.ErrUnknownTopic, "schemas are isolated")
		schemas = []string{schema, other.Schema}
	})
	return schemas
}

// left counts what is left of schema: itself and its roles (-1 on error).
// It may run outside the test's goroutine.
func left(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = $1)
  + (SELECT count(*) FROM pg_roles WHERE rolname LIKE $1 || '\_%')`, schema).Scan(&n); err != nil {
		t.Error(err)
		return -1
	}
	return n
}

// Without Main, each test gets a working schema of its own, and nothing of
// it is left once the test ends.
func TestNew(t *testing.T) {
	defer pgmsgtest.WithoutMain()() // not parallel: Main's state is global
	b := pgtest.Schema(t, nil)      // a pool on the test server
	for _, schema := range useEnvs(t, b.Pool) {
		require.Zero(t, left(t, b.Pool, schema), "schema %s and its roles were dropped", schema)
	}
}

// Under Main too, and the schemas are dropped in the background.
func TestNewMain(t *testing.T) {
	b := pgtest.Schema(t, nil)
	for _, schema := range useEnvs(t, b.Pool) {
		require.Eventually(t, func() bool { return left(t, b.Pool, schema) == 0 }, time.Minute, 20*time.Millisecond,
			"schema %s and its roles were dropped", schema)
	}
}
