package pgmsg_test

import (
	"context"
	"testing"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/testbundle"
)

// testBundle is a test's schema, pool, client and context
// (internal/testbundle), with the short names the tests use.
type testBundle struct {
	*testbundle.Bundle
	client *pgmsg.Client
	ctx    context.Context
}

// setup gives a test a migrated schema of its own and a client on it
// configured by cfg (nil for defaults; Schema is replaced, PollInterval
// defaults to 50ms).
func setup(t *testing.T, cfg *pgmsg.Config) *testBundle {
	t.Helper()
	b := testbundle.New(t, &testbundle.Opts{MaxConns: 24, Config: cfg})
	return &testBundle{Bundle: b, client: b.Client, ctx: b.Ctx}
}

// topic creates a topic with 64-record segments.
func (tb *testBundle) topic(t *testing.T, name string, partitions int) { tb.Topic(t, name, partitions) }
