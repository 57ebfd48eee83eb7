package schemapool_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/schemapool"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Schemas taken at once are distinct and migrated; once the pool is
// closed, none of them, none of those it migrated ahead, and none of their
// roles is left.
func TestTakeReleaseClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	prefix := "pgmsg_sp" + hex.EncodeToString(rnd[:]) + "_"
	sp, err := schemapool.New(ctx, cfg, schemapool.Options{Prefix: prefix, Workers: 2, Ahead: 2})
	require.NoError(t, err)
	check, err := pgxpool.New(ctx, pgtest.URL(t))
	require.NoError(t, err)
	defer check.Close()

	const n = 5
	names := make([]string, n)
	var wg sync.WaitGroup
	for i := range names {
		wg.Go(func() {
			s, err := sp.Take(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			names[i] = s
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, s := range names {
		require.Regexp(t, "^"+prefix+`\d+_[0-9a-f]{8}$`, s)
		require.False(t, seen[s], "schema %s handed out twice", s)
		seen[s] = true
		m, err := pgmsgmigrate.New(check, &pgmsgmigrate.Opts{Schema: s})
		require.NoError(t, err)
		require.NoError(t, m.RequireCurrent(ctx), "schema %s", s)
	}
	for _, s := range names[:n-1] {
		sp.Release(s)
	}
	// The last one is released after Close: Close waits for drops started
	// before it only, so drop it here.
	require.NoError(t, sp.Close())
	_, err = sp.Take(ctx)
	require.Error(t, err, "Take after Close")
	require.NoError(t, schemapool.Drop(ctx, check, names[n-1]))

	var left []string
	rows, err := check.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)
UNION ALL SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1)`, prefix)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		left = append(left, s)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, left, "schemas and roles left after Close")
}

// A Take that waits gives up with its context.
func TestTakeContext(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	sp, err := schemapool.New(context.Background(), cfg, schemapool.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, sp.Close()) }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = sp.Take(ctx)
	require.ErrorIs(t, err, context.Canceled)
}
