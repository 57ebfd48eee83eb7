package pgmsgkafka_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/conformance"
	"github.com/pgmsg/pgmsg/pgmsgkafka"
)

// brokers returns KAFKA_BROKERS (comma-separated) when set, else the
// address of an in-process kfake cluster for this test.
func brokers(t *testing.T) []string {
	t.Helper()
	if v := os.Getenv("KAFKA_BROKERS"); v != "" {
		return strings.Split(v, ",")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func newBackend(t *testing.T) *pgmsgkafka.Backend {
	t.Helper()
	b, err := pgmsgkafka.New(&pgmsgkafka.Config{Brokers: brokers(t)})
	require.NoError(t, err)
	return b
}

// TestConformance runs the log interfaces' suite against Kafka: kfake, or
// the cluster in KAFKA_BROKERS.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, conformance.Harness{
		New: func(t *testing.T) pgmsg.Backend { return newBackend(t) },
		Consumer: pgmsg.LogConsumerOpts{HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second,
			RedeliveryBackoff: 10 * time.Millisecond},
	})
}
