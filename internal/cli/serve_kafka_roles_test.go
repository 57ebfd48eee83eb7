package cli

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// pgmsg serve's Kafka listener works when the server logs in as the
// schema's admin role, which may not write the record table (only
// through the publishing functions): a plain produce large enough for
// COPY, an idempotent producer's batches (each in its own transaction)
// and a consumer group's join and commits.
func TestServeKafkaAsAdminRole(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "topic", "create", "k", "--partitions", "2")
	secret := secretRE.FindString(s.ok("", "token", "create", "ops", "--scope", "admin", "-o", "json"))
	require.NotEmpty(t, secret)
	admin := loginAs(t, s, "admin")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr strings.Builder
	g := &globals{databaseURL: admin, schema: s.b.Schema, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, output: "table"}
	kafkac := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- g.serve(ctx, serveOpts{listen: "127.0.0.1:0", maxConns: 8, authBurst: 10,
			maxRecords: 100, maxBodyBytes: 1 << 20, maxAnswerBytes: 1 << 20, maxWait: time.Second,
			kafka: kafkaOpts{listen: "127.0.0.1:0", maxRequestBytes: kafkasrv.MaxRequestBytesDefault, autoPartitions: 1,
				ready: func(a string) { kafkac <- a }}})
	}()
	var addr string
	select {
	case addr = <-kafkac:
	case err := <-served:
		t.Fatalf("serve as the admin role: %v", err)
	}
	auth := kgo.SASL(plain.Auth{User: "ops", Pass: secret}.AsMechanism())
	body := bytes.Repeat([]byte("x"), 100)
	var recs []*kgo.Record
	for i := range 300 {
		recs = append(recs, &kgo.Record{Topic: "k", Partition: int32(i % 2), Key: []byte(strconv.Itoa(i)), Value: body})
	}
	for _, idem := range []bool{false, true} {
		opts := []kgo.Opt{kgo.SeedBrokers(addr), auth, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(50 * time.Millisecond)}
		if !idem {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl, err := kgo.NewClient(opts...)
		require.NoError(t, err)
		require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr(), "idempotent %v: %s", idem, stderr.String())
		cl.Close()
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), auth, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("k"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	require.NoError(t, err)
	defer cons.Close()
	pctx, pcancel := context.WithTimeout(ctx, time.Minute)
	defer pcancel()
	n := 0
	for n < 600 {
		fs := cons.PollFetches(pctx)
		require.NoError(t, pctx.Err())
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		n += fs.NumRecords()
	}
	require.Equal(t, 600, n)
	require.NoError(t, cons.CommitUncommittedOffsets(pctx))

	pc, err := pgmsg.NewClient(s.b.Pool, &pgmsg.Config{Schema: s.b.Schema})
	require.NoError(t, err)
	defer pc.Close()
	for p := range int32(2) {
		got, err := pc.Fetch(ctx, "k", p, 0, 1000)
		require.NoError(t, err)
		require.Len(t, got, 300, "partition %d: 150 plain, 150 idempotent", p)
	}
	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	require.Contains(t, s.ok("", "group", "list", "-o", "json"), `"g"`)
	require.NotContains(t, stderr.String(), "permission denied")
	require.NotContains(t, stderr.String(), "produce failed")
}
