package migration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

// The SQL API against PostgreSQL: its rules, its functions' privileges
// and search_path, and the roles the migrations create. Each test has a
// freshly migrated schema of its own; a test that checks what a Go call
// gets from the SQL API calls it through a pgmsg.Client on that schema.

func TestMain(m *testing.M) { pgtest.Main(pgmsgtest.WithMain(m)) }

// testBundle is a test's pgmsg (pgmsgtest.Env: a migrated schema of its
// own, the pool, a Client on it), the test server's URL and a context that
// ends after two minutes.
type testBundle struct {
	*pgmsgtest.Env
	URL    string
	client *pgmsg.Client
	ctx    context.Context
}

// setup gives a test a migrated schema of its own and a client on it
// configured by cfg (nil for defaults; Schema is replaced, PollInterval
// defaults to pgmsgtest.PollInterval).
func setup(t *testing.T, cfg *pgmsg.Config) *testBundle {
	t.Helper()
	env := pgmsgtest.New(t, pgtest.Pool(t, &pgtest.Opts{MaxConns: 24}), cfg)
	return &testBundle{Env: env, URL: pgtest.URL(t), client: env.Client, ctx: pgtest.Context(t, 2*time.Minute)}
}

// topic creates a topic with 64-record segments, so that a test crosses
// segment boundaries with few records.
func (tb *testBundle) topic(t *testing.T, name string, partitions int) {
	t.Helper()
	_, err := tb.client.CreateTopic(tb.ctx, name, pgmsg.TopicConfig{Partitions: partitions, SegmentRecords: 64})
	require.NoError(t, err)
}

func ptr[T any](v T) *T { return &v }

// requireCode checks that err is sentinel with the stable code.
func requireCode(t *testing.T, err error, sentinel error, code string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, sentinel)
	require.Equal(t, code, pgmsg.ErrorCode(err))
}

// queue creates a queue with cfg.
func (tb *testBundle) queue(t *testing.T, name string, cfg pgmsg.QueueConfig) *pgmsg.Queue {
	t.Helper()
	q, err := tb.client.CreateQueue(tb.ctx, name, cfg)
	require.NoError(t, err)
	return q
}

// stats returns the queue's stats.
func (tb *testBundle) stats(t *testing.T, queue string) *pgmsg.QueueStats {
	t.Helper()
	s, err := tb.client.QueueStats(tb.ctx, queue)
	require.NoError(t, err)
	return s
}
