// Package pgmsgtest helps applications test their code that uses pgmsg
// against a real PostgreSQL, the way pgmsg tests itself: each test gets a
// freshly migrated schema of its own in the database the caller's pool
// points at, so tests can run in parallel, and the schema (with the roles
// the migrations created for it) is dropped when the test ends.
//
//	func TestOrderEvents(t *testing.T) {
//		pool := myTestPool(t) // your pgxpool on a test database
//		env := pgmsgtest.New(t, pool, nil)
//		_, err := env.Client.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 3})
//		...
//	}
//
// Migrating a schema takes a few hundred milliseconds. Call Main from the
// package's TestMain and New stops waiting for it: schemas are then
// migrated in the background, a few at a time, ahead of the tests that
// will ask for them, and dropped in the background after their test; Main
// waits for the drops before the test binary exits. Each schema is still
// used by one test only.
//
//	func TestMain(m *testing.M) { pgmsgtest.Main(m) }
package pgmsgtest

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

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/schemapool"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// Env is one test's pgmsg: a migrated schema and a Client on it.
type Env struct {
	// Client works in Schema through Pool.
	Client *pgmsg.Client
	// Schema is the test's schema, for SQL the test runs itself
	// (pgx.Identifier{env.Schema, "topic"}.Sanitize() and the like).
	Schema string
	// Pool is the pool New was given.
	Pool *pgxpool.Pool
}

// PollInterval is what a zero Config.PollInterval becomes in New: a test
// should not wait for pgmsg.PollIntervalDefault, which is made for
// production.
const PollInterval = 50 * time.Millisecond

var (
	inMain   atomic.Bool
	mu       sync.Mutex
	closed   bool
	supplies = map[string]*schemapool.Pool{} // by the pools' connection string
)

// Runner is what TestMain runs: a *testing.M.
type Runner interface{ Run() int }

type mainRunner struct{ m Runner }

func (r mainRunner) Run() int { return run(r.m) }

// WithMain wraps m to run as Main runs it, without exiting: for a TestMain
// that hands m to another wrapper too (one that checks for leaked
// goroutines, say), which must call the returned Runner's Run.
func WithMain(m Runner) Runner { return mainRunner{m} }

// Main runs the package's tests (call it from TestMain), with New taking
// schemas migrated ahead in the background, then drops every schema still
// left and exits. The binary fails if a schema could not be dropped.
//
// The schemas of pools with the same connection string come from one
// supply, which migrates and drops them over connections of its own (at
// most four per connection string, configured like the first pool New was
// given with it).
func Main(m *testing.M) { os.Exit(run(m)) }

// run is Main without the exit.
func run(m Runner) int {
	inMain.Store(true)
	code := m.Run()
	mu.Lock()
	closed = true
	mu.Unlock()
	for _, sp := range supplies {
		if err := sp.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgmsgtest:", err)
			code = 1
		}
	}
	return code
}

// schemaName returns a new schema name: "pgmsgtest_" and random hex.
func schemaName() (string, error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	return "pgmsgtest_" + hex.EncodeToString(rnd[:]), nil
}

// supply returns the schema supply of pool's connection string, nil
// without Main.
func supply(pool *pgxpool.Pool) (*schemapool.Pool, error) {
	if !inMain.Load() {
		return nil, nil
	}
	mu.Lock()
	defer mu.Unlock()
	if closed {
		return nil, nil
	}
	cfg := pool.Config()
	key := cfg.ConnString()
	if sp := supplies[key]; sp != nil {
		return sp, nil
	}
	sp, err := schemapool.New(context.Background(), cfg, schemapool.Options{Name: func() string {
		s, err := schemaName()
		if err != nil {
			panic("pgmsgtest: " + err.Error()) // crypto/rand does not fail
		}
		return s
	}})
	if err != nil {
		return nil, err
	}
	supplies[key] = sp
	return sp, nil
}

// New migrates a new, uniquely named schema ("pgmsgtest_" and random hex)
// in pool's database and returns a Client on it, configured by cfg (nil for
// defaults; its Schema is replaced, a zero PollInterval becomes
// PollInterval). When the test ends the client is
// closed and the schema dropped. It fails the test if the database cannot
// be migrated. Under Main, the schema was migrated ahead and is dropped
// after the test in the background.
func New(tb testing.TB, pool *pgxpool.Pool, cfg *pgmsg.Config) *Env {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sp, err := supply(pool)
	if err != nil {
		tb.Fatalf("pgmsgtest: %v", err)
	}
	var schema string
	if sp != nil {
		if schema, err = sp.Take(ctx); err != nil {
			tb.Fatalf("pgmsgtest: %v", err)
		}
		tb.Cleanup(func() { sp.Release(schema) })
	} else {
		if schema, err = schemaName(); err != nil {
			tb.Fatalf("pgmsgtest: %v", err)
		}
		m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
		if err != nil {
			tb.Fatalf("pgmsgtest: %v", err)
		}
		tb.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := m.Drop(ctx); err != nil {
				tb.Errorf("pgmsgtest: %v", err)
			}
		})
		if _, err := m.Up(ctx); err != nil {
			tb.Fatalf("pgmsgtest: migrate schema %s: %v", schema, err)
		}
	}
	c := pgmsg.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = schema
	if c.PollInterval == 0 {
		c.PollInterval = PollInterval
	}
	client, err := pgmsg.NewClient(pool, &c)
	if err != nil {
		tb.Fatalf("pgmsgtest: %v", err)
	}
	tb.Cleanup(client.Close) // runs before the drop (cleanups run last-in first-out)
	return &Env{Client: client, Schema: schema, Pool: pool}
}

// Token creates an API token (for the HTTP API, the dashboard or the Kafka
// listener) named name with scopes, and returns its secret. It fails the
// test if the token cannot be created.
func (e *Env) Token(tb testing.TB, name string, scopes ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	secret, _, err := e.Client.CreateToken(ctx, name, scopes, nil)
	if err != nil {
		tb.Fatalf("pgmsgtest: create token %s: %v", name, err)
	}
	return secret
}
