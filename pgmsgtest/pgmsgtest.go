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
package pgmsgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// Env is one test's pgmsg: a migrated schema and a Client on it.
type Env struct {
	// Client works in Schema through the caller's pool.
	Client *pgmsg.Client
	// Schema is the test's schema, for SQL the test runs itself
	// (pgx.Identifier{env.Schema, "topic"}.Sanitize() and the like).
	Schema string
}

// New migrates a new, uniquely named schema ("pgmsgtest_" and random hex)
// in pool's database and returns a Client on it, configured by cfg (nil for
// defaults; its Schema is replaced). When the test ends the client is
// closed and the schema dropped. It fails the test if the database cannot
// be migrated.
func New(tb testing.TB, pool *pgxpool.Pool, cfg *pgmsg.Config) *Env {
	tb.Helper()
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		tb.Fatalf("pgmsgtest: %v", err)
	}
	schema := "pgmsgtest_" + hex.EncodeToString(rnd[:])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
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
	c := pgmsg.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = schema
	client, err := pgmsg.NewClient(pool, &c)
	if err != nil {
		tb.Fatalf("pgmsgtest: %v", err)
	}
	tb.Cleanup(client.Close) // runs before the drop (cleanups run last-in first-out)
	return &Env{Client: client, Schema: schema}
}
