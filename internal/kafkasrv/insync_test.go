package kafkasrv_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pgmsg/pgmsg"
)

// With min_insync_replicas at 2 and no synchronous standby (the test
// server has none), a Produce is answered NOT_ENOUGH_REPLICAS, as a Kafka
// leader answers below min.insync.replicas, and nothing is stored; with
// the guard off the same batch is stored.
func TestProduceNotEnoughReplicas(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "guarded", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	cl := tb.kclient(t)
	require.NoError(t, tb.Client.SetMinInsyncReplicas(tb.Ctx, 2))

	batch := rawBatch(-1, -1, -1, time.Now().UnixMilli(), rawRecord{value: []byte("a")}, rawRecord{value: []byte("b")})
	p := produceOne(t, tb, cl, produceReq("guarded", 0, batch))
	require.Equal(t, kerr.NotEnoughReplicas.Code, p.ErrorCode)
	require.Equal(t, int64(0), endOffset(t, tb, "guarded", 0))

	require.NoError(t, tb.Client.SetMinInsyncReplicas(tb.Ctx, 1))
	p = produceOne(t, tb, cl, produceReq("guarded", 0, batch))
	require.Equal(t, int16(0), p.ErrorCode)
	require.Equal(t, int64(2), endOffset(t, tb, "guarded", 0))
}
