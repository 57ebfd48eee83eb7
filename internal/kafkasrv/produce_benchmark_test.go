package kafkasrv_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
)

// The listener's produce target: a franz-go producer (1 KiB records,
// linger 5 ms, acks=all, 8 producers, 4 partitions) through the listener
// against native Publish of 100-record batches by 8 callers. Run both in
// one invocation and compare records/s:
//
//	go test -run '^$' -bench 'Produce(Kafka|Native)' -benchtime 240000x ./internal/kafkasrv/
//
// BENCH_IDEMPOTENT=0 turns franz-go's idempotence off (and BENCH_INFLIGHT
// then sets its produce requests in flight per broker); BENCH_BATCH and
// BENCH_CALLERS change the native side's batch size and callers.
const (
	benchProducers  = 8
	benchPartitions = 4
)

var benchValue = bytes.Repeat([]byte{'v'}, 1024)

func BenchmarkProduceKafka(b *testing.B) {
	tb := setupB(b)
	var clients []*kgo.Client
	opts := []kgo.Opt{kgo.SeedBrokers(tb.addr), kgo.ProducerLinger(5 * time.Millisecond),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression())}
	if os.Getenv("BENCH_IDEMPOTENT") == "0" { // franz-go's default is idempotent
		opts = append(opts, kgo.DisableIdempotentWrite())
		if n, _ := strconv.Atoi(os.Getenv("BENCH_INFLIGHT")); n > 0 {
			opts = append(opts, kgo.MaxProduceRequestsInflightPerBroker(n))
		}
	}
	for range benchProducers {
		cl, err := kgo.NewClient(opts...)
		require.NoError(b, err)
		defer cl.Close()
		clients = append(clients, cl)
	}
	per := b.N / benchProducers
	b.SetBytes(1024)
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				cl.Produce(tb.Ctx, &kgo.Record{Topic: "bench", Value: benchValue}, func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
				})
			}
			if err := cl.Flush(tb.Ctx); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(per*benchProducers)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkProduceNative(b *testing.B) {
	tb := setupB(b)
	batch, _ := strconv.Atoi(os.Getenv("BENCH_BATCH"))
	if batch == 0 {
		batch = 100
	}
	withTS := os.Getenv("BENCH_TS") != ""
	callers := benchProducers
	if n, _ := strconv.Atoi(os.Getenv("BENCH_CALLERS")); n > 0 {
		callers = n
	}
	per := b.N / callers / batch
	b.SetBytes(1024)
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				recs := make([]*pgmsg.Record, batch)
				for j := range recs {
					recs[j] = &pgmsg.Record{Topic: "bench", Partition: int32(i % benchPartitions), Value: benchValue}
					if withTS {
						recs[j].Timestamp = time.UnixMilli(time.Now().UnixMilli())
					}
				}
				if err := tb.Client.Publish(tb.Ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(per*callers*batch)/b.Elapsed().Seconds(), "records/s")
}

func setupB(b *testing.B) *testBundle {
	tb := setupTB(b)
	_, err := tb.Client.CreateTopic(context.Background(), "bench", pgmsg.TopicConfig{Partitions: benchPartitions})
	require.NoError(b, err)
	return tb
}
