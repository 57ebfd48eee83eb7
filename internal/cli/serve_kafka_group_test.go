package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// `pgmsg serve --kafka-listen` coordinates Kafka groups: a franz-go group
// consumer's committed offsets are the pgmsg group's cursors, which
// `pgmsg group list` shows.
func TestServeKafkaGroupCursors(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.ok("", "topic", "create", "orders", "--partitions", "2")
	var stdout, stderr strings.Builder
	g := &globals{databaseURL: s.b.URL, schema: s.b.Schema, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, output: "table"}
	kafkac := make(chan string, 1)
	served := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		served <- g.serve(sctx, serveOpts{listen: "127.0.0.1:0", maxConns: 8, authBurst: 10, insecureNoAuth: true,
			kafka: kafkaOpts{listen: "127.0.0.1:0", maxRequestBytes: kafkasrv.MaxRequestBytesDefault,
				autoPartitions: 1, ready: func(a string) { kafkac <- a }}})
	}()
	var addr string
	select {
	case addr = <-kafkac:
	case err := <-served:
		t.Fatalf("serve: %v", err)
	}
	p, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer p.Close()
	for i := range 5 {
		r := &kgo.Record{Topic: "orders", Partition: int32(i % 2), Value: []byte("v")}
		require.NoError(t, p.ProduceSync(ctx, r).FirstErr())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit())
	require.NoError(t, err)
	for got := 0; got < 5; {
		fs := cl.PollFetches(ctx)
		require.NoError(t, fs.Err())
		got += fs.NumRecords()
	}
	require.NoError(t, cl.CommitUncommittedOffsets(ctx))
	cl.Close()

	out := s.ok("", "group", "list", "orders", "-o", "json")
	require.Contains(t, out, `"group": "billing"`)
	require.Contains(t, out, `"next_offset": 3`)
	require.Contains(t, out, `"next_offset": 2`)
	require.Contains(t, out, `"lag": 0`)

	stop()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}
