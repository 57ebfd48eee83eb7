// Package pgtest gives pgmsg's own tests a real PostgreSQL: the server in
// PGMSG_TEST_DATABASE_URL (or DATABASE_URL) when set, else a throwaway
// cluster started from the machine's binaries once per test binary and
// stopped by Main. Each test gets its own freshly migrated schema, dropped
// when the test ends, and a pool whose search_path is empty so an
// unqualified query fails.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/pgmsg/pgmsg/internal/pgcluster"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

var (
	once    sync.Once
	url     string
	cluster *pgcluster.Cluster
	urlErr  error
	counter atomic.Int64
)

// Main runs the tests of a package, stops the throwaway cluster if one was
// started, and fails if goroutines leaked. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stop cluster:", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// URL returns the URL of the test server, starting a throwaway cluster on
// first use when no URL is configured.
func URL(tb testing.TB) string {
	tb.Helper()
	once.Do(func() {
		for _, env := range []string{"PGMSG_TEST_DATABASE_URL", "DATABASE_URL"} {
			if v := os.Getenv(env); v != "" {
				url = v
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cluster, urlErr = pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{
			// A throwaway server: durability across OS crashes is not under test.
			"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off",
		}})
		if urlErr == nil {
			url = cluster.URL
		}
	})
	if urlErr != nil {
		tb.Fatalf("pgtest: no test database: %v", urlErr)
	}
	return url
}

// Bundle is what a test gets: a pool on an isolated, migrated schema.
type Bundle struct {
	Pool   *pgxpool.Pool
	Schema string
	URL    string
}

// Opts tune Schema; nil means defaults.
type Opts struct {
	// MaxConns of the test's pool. Default 16.
	MaxConns int32
}

// Schema creates a uniquely named schema, migrates it, and returns a pool
// for it. Both are removed when the test ends.
func Schema(tb testing.TB, opts *Opts) *Bundle {
	tb.Helper()
	base := URL(tb)
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	schema := fmt.Sprintf("pgmsg_t%d_%s", counter.Add(1), hex.EncodeToString(rnd[:]))

	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		tb.Fatalf("pgtest: parse URL: %v", err)
	}
	cfg.MaxConns = 16
	if opts != nil && opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		pool.Close()
		tb.Fatalf("pgtest: migrate %s: %v", schema, err)
	}
	tb.Cleanup(func() {
		// A connection never released (leaked by the test or the code under
		// test) would make pool.Close wait forever: report it instead.
		// (A connection may still be on its way back, e.g. after a
		// cancelled query, so only a Close that does not finish counts.)
		closed := make(chan struct{})
		go func() {
			pool.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			tb.Errorf("pgtest: closing the pool of schema %s timed out: %d connection(s) never released (leaked)",
				schema, pool.Stat().AcquiredConns())
		}
		admin, err := pgxpool.New(ctx, base)
		if err != nil {
			tb.Errorf("pgtest: drop schema: %v", err)
			return
		}
		defer admin.Close()
		m, err := pgmsgmigrate.New(admin, &pgmsgmigrate.Opts{Schema: schema})
		if err == nil {
			err = m.Drop(ctx)
		}
		if err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	return &Bundle{Pool: pool, Schema: schema, URL: base}
}
