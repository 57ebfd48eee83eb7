package kafkacompat

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/kafkagroup"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// withGroups gives the listener its group coordinator (internal/kafkagroup)
// over the same Client, authorizing as the listener does, as pgmsg serve
// does; it is closed at the end.
func withGroups(t *testing.T, cfg *kafkasrv.Config, authorize func(ctx context.Context, kind, name, op string) bool) {
	t.Helper()
	co, err := kafkagroup.New(kafkagroup.Config{Client: cfg.Client, Authorize: authorize})
	require.NoError(t, err)
	t.Cleanup(co.Close)
	cfg.Groups = co
}
