package pgmsg_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/conformance"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// TestConformance runs the log interfaces' suite against PostgreSQL (the
// same suite runs against Kafka in pgmsgkafka).
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, conformance.Harness{
		New: func(t *testing.T) pgmsg.Backend {
			// A small pool: the suite's tests run in parallel on a
			// server other test runs share.
			b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 8})
			client, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema, PollInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			t.Cleanup(client.Close)
			return pgmsg.NewBackend(client)
		},
		Consumer: pgmsg.LogConsumerOpts{HeartbeatInterval: 100 * time.Millisecond, RedeliveryBackoff: 10 * time.Millisecond},
	})
}
