package pgmsg_test

import (
	"log"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// The examples run against the test database (PGMSG_TEST_DATABASE_URL, or
// a throwaway cluster), each on a freshly migrated schema of its own. In
// your code the two helpers below are:
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // after `pgmsg migrate up`
//	client, err := pgmsg.NewClient(pool, nil)
//	defer client.Close()

// exampleTB lets the examples use pgtest (which wants a testing.TB)
// outside a test: cleanups run when the example calls done.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (e *exampleTB) Helper()                        {}
func (e *exampleTB) Cleanup(f func())               { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) Fatal(args ...any)              { log.Fatal(args...) }
func (e *exampleTB) Fatalf(format string, a ...any) { log.Fatalf(format, a...) }
func (e *exampleTB) Errorf(format string, a ...any) { log.Printf(format, a...) }
func (e *exampleTB) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// exampleDB returns a pool on a fresh, migrated schema of the test
// database, the schema's name, and a function that drops it.
func exampleDB() (*pgxpool.Pool, string, func()) {
	tb := &exampleTB{}
	b := pgtest.Schema(tb, nil)
	return b.Pool, b.Schema, tb.done
}

// exampleClient returns a client on a fresh, migrated schema of the test
// database and a function that closes it and drops the schema.
func exampleClient() (*pgmsg.Client, func()) {
	return exampleClientConfig(nil)
}

// exampleClientConfig is exampleClient with a Config (its Schema is set).
func exampleClientConfig(cfg *pgmsg.Config) (*pgmsg.Client, func()) {
	pool, schema, drop := exampleDB()
	c := pgmsg.Config{PollInterval: 50 * time.Millisecond}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = schema
	client, err := pgmsg.NewClient(pool, &c)
	if err != nil {
		log.Fatal(err)
	}
	return client, func() {
		client.Close()
		drop()
	}
}
