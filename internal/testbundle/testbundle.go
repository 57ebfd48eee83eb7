// Package testbundle is the test setup pgmsg's packages share: a freshly
// migrated schema of the test's own (pgtest.Schema), a Client on it, and a
// context that bounds the test. The root package's tests, internal/httpapi's
// and internal/dashboard's build their bundles on it.
//
// It imports the root package, so the root's in-package tests (package
// pgmsg) cannot use it: they call pgtest.Schema or pgtest.Tx directly.
// pgtest itself stays free of the root package for the same reason.
package testbundle

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// Bundle is one test's pgmsg: the schema and its pool, a Client, and the
// test's context.
type Bundle struct {
	*pgtest.Bundle
	// Client works in Schema through Pool; it is closed when the test ends.
	Client *pgmsg.Client
	// Ctx is cancelled when the test ends, or after Opts.Timeout.
	Ctx context.Context
}

// Opts tune New; nil means defaults.
type Opts struct {
	// MaxConns of the schema's pool. Default pgtest's.
	MaxConns int32
	// Config of the Client; its Schema is replaced, and a zero
	// PollInterval becomes 50ms (tests should not wait for the default).
	Config *pgmsg.Config
	// Timeout of Ctx. Default 2 minutes.
	Timeout time.Duration
}

// New gives the test a migrated schema and a Client on it.
func New(tb testing.TB, opts *Opts) *Bundle {
	tb.Helper()
	if opts == nil {
		opts = &Opts{}
	}
	b := pgtest.Schema(tb, &pgtest.Opts{MaxConns: opts.MaxConns})
	c := pgmsg.Config{}
	if opts.Config != nil {
		c = *opts.Config
	}
	c.Schema = b.Schema
	if c.PollInterval == 0 {
		c.PollInterval = 50 * time.Millisecond
	}
	client, err := pgmsg.NewClient(b.Pool, &c)
	require.NoError(tb, err)
	tb.Cleanup(client.Close)
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	tb.Cleanup(cancel)
	return &Bundle{Bundle: b, Client: client, Ctx: ctx}
}

// Topic creates a topic with small segments (64 records), so that tests
// cross segment boundaries with few records.
func (b *Bundle) Topic(tb testing.TB, name string, partitions int) {
	tb.Helper()
	_, err := b.Client.CreateTopic(b.Ctx, name, pgmsg.TopicConfig{Partitions: partitions, SegmentRecords: 64})
	require.NoError(tb, err)
}

// Token creates a token with scopes and returns its secret.
func (b *Bundle) Token(tb testing.TB, name string, scopes ...string) string {
	tb.Helper()
	secret, _, err := b.Client.CreateToken(b.Ctx, name, scopes, nil)
	require.NoError(tb, err)
	return secret
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
