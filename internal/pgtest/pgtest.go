// Package pgtest gives pgmsg's own tests a real PostgreSQL: the server in
// PGMSG_TEST_DATABASE_URL (or DATABASE_URL) when set, else a throwaway
// cluster started from the machine's binaries once per test binary and
// stopped by Main. Each test gets its own freshly migrated schema, dropped
// when the test ends, and a pool whose search_path is empty so an
// unqualified query fails.
//
// Schemas come from a per-binary schemapool.Pool: migrated in the
// background ahead of demand, two at a time, and dropped in the background
// after their test; Main waits for the drops and fails the binary if one
// failed. A test therefore rarely waits for a migration, and never for a
// drop. Tests that only run SQL can take a Tx instead: a transaction on a
// migrated schema, rolled back when the test ends, which costs no
// migration at all once the binary has one such schema free.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/pgmsg/pgmsg/internal/pgcluster"
	"github.com/pgmsg/pgmsg/internal/schemapool"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

var (
	once    sync.Once
	url     string
	cluster *pgcluster.Cluster
	urlErr  error

	// inMain is set by Main: only then does something wait for background
	// drops, so only then are schemas dropped in the background.
	inMain      atomic.Bool
	supplyOnce  sync.Once
	supply      *schemapool.Pool
	supplyErr   error
	supplyMu    sync.Mutex // guards supplyDone
	supplyDone  bool       // Main closed the supply
	syncCounter atomic.Int64
)

// Main runs the tests of a package, drops the schemas still around and
// waits for the background drops, stops the throwaway cluster if one was
// started, and fails if goroutines leaked or a schema could not be
// dropped. Call it from TestMain; m is a *testing.M, or one wrapped to do
// more around its Run.
func Main(m interface{ Run() int }) {
	inMain.Store(true)
	// The goroutines running before the tests are not theirs to stop.
	// (goleak.IgnoreCurrent records them when it is called: called after
	// the tests, it would ignore every leak.)
	before := goleak.IgnoreCurrent()
	code := m.Run()
	if err := closeSupply(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		code = 1
	}
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stop cluster:", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(before); err != nil {
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

// pool returns the pool of the running binary's schemas, creating it on
// first use; nil when Main does not run (nothing would wait for the
// background drops) or after Main closed it.
func pool(tb testing.TB) *schemapool.Pool {
	tb.Helper()
	if !inMain.Load() {
		return nil
	}
	base := URL(tb)
	supplyOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(base)
		if err != nil {
			supplyErr = err
			return
		}
		supply, supplyErr = schemapool.New(context.Background(), cfg, schemapool.Options{Prefix: "pgmsg_t"})
	})
	if supplyErr != nil {
		tb.Fatalf("pgtest: %v", supplyErr)
	}
	supplyMu.Lock()
	defer supplyMu.Unlock()
	if supplyDone {
		return nil
	}
	return supply
}

// closeSupply drops the free Tx schemas, then closes the pool of schemas,
// waiting for every drop.
func closeSupply() error {
	supplyMu.Lock()
	supplyDone = true
	supplyMu.Unlock()
	if supply == nil {
		return nil
	}
	txMu.Lock()
	for _, s := range txFree {
		supply.Release(s.name)
	}
	txFree = nil
	txMu.Unlock()
	return supply.Close()
}

// take returns a freshly migrated schema, and the function that drops it
// (in the background when it can).
func take(tb testing.TB) (string, func() error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if sp := pool(tb); sp != nil {
		schema, err := sp.Take(ctx)
		if err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
		return schema, func() error { sp.Release(schema); return nil }
	}
	// No Main: migrate here and drop in the test's cleanup.
	base := URL(tb)
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	schema := fmt.Sprintf("pgmsg_t%d_%s", syncCounter.Add(1), hex.EncodeToString(rnd[:]))
	m, err := pgmsgmigrate.New(admin, &pgmsgmigrate.Opts{Schema: schema})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		tb.Fatalf("pgtest: migrate %s: %v", schema, err)
	}
	return schema, func() error {
		admin, err := pgxpool.New(context.Background(), base)
		if err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		defer admin.Close()
		return schemapool.Drop(context.Background(), admin, schema)
	}
}

// Schema gives the test a freshly migrated schema of its own and returns
// a pool for it (Pool's). The pool is closed and the schema dropped when
// the test ends.
func Schema(tb testing.TB, opts *Opts) *Bundle {
	tb.Helper()
	base := URL(tb)
	schema, drop := take(tb)
	tb.Cleanup(func() { // after the pool's close (cleanups run last-in first-out)
		if err := drop(); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	return &Bundle{Pool: Pool(tb, opts), Schema: schema, URL: base}
}

// Pool returns a pool of the test's own on the test server (URL), with an
// empty search_path so that an unqualified query fails. It is closed when
// the test ends; a connection never released fails the test.
func Pool(tb testing.TB, opts *Opts) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(URL(tb))
	if err != nil {
		tb.Fatalf("pgtest: parse URL: %v", err)
	}
	cfg.MaxConns = 16
	if opts != nil && opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
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
			tb.Errorf("pgtest: closing a test's pool timed out: %d connection(s) never released (leaked)",
				pool.Stat().AcquiredConns())
		}
	})
	return pool
}

// Context returns a context that ends after timeout, or when the test
// ends (before the test's earlier cleanups run).
func Context(tb testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	tb.Cleanup(cancel)
	return ctx
}

// Serve serves h over HTTP for the test's duration. When the test ends,
// drain (if not nil) runs first, then the server is closed.
func Serve(tb testing.TB, h http.Handler, drain func()) *httptest.Server {
	tb.Helper()
	ts := httptest.NewServer(h)
	tb.Cleanup(ts.Close)
	if drain != nil {
		tb.Cleanup(drain) // cleanups run last-in first-out
	}
	return ts
}
