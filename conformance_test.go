package pgmsg_test

import (
	"testing"
	"time"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/conformance"
)

// TestConformance runs the log interfaces' suite against PostgreSQL (the
// same suite runs against Kafka in pgmsgkafka).
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New: func(t *testing.T) pgmsg.Backend {
			return pgmsg.NewBackend(setup(t, nil).client)
		},
		Consumer: pgmsg.LogConsumerOpts{HeartbeatInterval: 100 * time.Millisecond, RedeliveryBackoff: 10 * time.Millisecond},
	})
}
