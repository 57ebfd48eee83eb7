package kafkacompat

import (
	"testing"

	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// withGroups sets the listener's group coordinator (internal/kafkagroup),
// once it exists; until then the group APIs answer with Kafka's error code.
func withGroups(t *testing.T, cfg *kafkasrv.Config) {}
