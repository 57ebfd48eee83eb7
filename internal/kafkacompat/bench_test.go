package kafkacompat

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/bench"
	"github.com/pgmsg/pgmsg/internal/kafkagroup"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// TestBenchKafkaSmoke runs pgmsg bench pubsub's kafka implementation
// briefly (franz-go producers and two consumer groups through an
// in-process listener): it writes, reads, measures an end-to-end latency
// and reports no error, and with KafkaServerPID (here this process) it
// reports the CPU per record.
func TestBenchKafkaSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the database")
	}
	b := pgtest.Schema(t, nil)
	env := &bench.Env{URL: b.URL, Schema: b.Schema + "_kbench"}
	t.Cleanup(func() {
		m, err := pgmsgmigrate.New(b.Pool, &pgmsgmigrate.Opts{Schema: env.Schema})
		if err == nil {
			err = m.Drop(context.Background())
		}
		if err != nil {
			t.Errorf("drop %s: %v", env.Schema, err)
		}
	})
	listener := func(_ context.Context, c *pgmsg.Client) (string, func(), error) {
		co, err := kafkagroup.New(kafkagroup.Config{Client: c})
		if err != nil {
			return "", nil, err
		}
		srv, err := kafkasrv.New(kafkasrv.Config{Client: c, Groups: co})
		if err != nil {
			return "", nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		return ln.Addr().String(), func() { _ = srv.Close(); <-done; co.Close() }, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := bench.RunPubSub(ctx, env, bench.ImplKafka, bench.PubSubOptions{Duration: 2 * time.Second, Warmup: time.Second,
		Producers: 2, Batch: 10, Groups: 2, ClaimBatch: 50, Partitions: 2, Rate: 500,
		KafkaListener: listener, KafkaServerPID: os.Getpid()})
	require.NoError(t, err)
	require.Zero(t, r.Errors, r.FirstError)
	require.Positive(t, r.WritesPerSec)
	require.Positive(t, r.ReadsPerSec)
	require.Positive(t, r.E2EP99MS)
	require.Positive(t, r.ListenerCPUPerRecordUS)
}
