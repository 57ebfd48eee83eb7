package pgmsg_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// benchClient gives a benchmark a client on its own migrated schema and a
// topic of the given partitions.
func benchClient(b *testing.B, partitions int) (*pgmsg.Client, string) {
	b.Helper()
	bundle := pgtest.Schema(b, nil)
	client, err := pgmsg.NewClient(bundle.Pool, &pgmsg.Config{Schema: bundle.Schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	const topic = "bench"
	if _, err := client.CreateTopic(context.Background(), topic, pgmsg.TopicConfig{Partitions: partitions}); err != nil {
		b.Fatal(err)
	}
	return client, topic
}

func benchRecords(topic string, n, size int) []*pgmsg.Record {
	recs := make([]*pgmsg.Record, n)
	for i := range recs {
		v := make([]byte, size)
		_, _ = rand.Read(v)
		recs[i] = &pgmsg.Record{Topic: topic, Value: v}
	}
	return recs
}

// BenchmarkPublish is one Client.Publish call of a batch of 1 KiB records:
// the round trip, the counter row update and the insert.
func BenchmarkPublish(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			client, topic := benchClient(b, 4)
			recs := benchRecords(topic, batch, 1024)
			ctx := context.Background()
			b.SetBytes(int64(batch * 1024))
			n := 0
			for b.Loop() {
				if err := client.Publish(ctx, recs, nil); err != nil {
					b.Fatal(err)
				}
				n += batch
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkProducerParallel is single-record ProduceSync calls from 64
// concurrent goroutines (8 per CPU on 8 CPUs, SetParallelism on fewer):
// the group commit of the batching Producer.
func BenchmarkProducerParallel(b *testing.B) {
	client, topic := benchClient(b, 4)
	prod, err := client.NewProducer(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = prod.Close(context.Background()) })
	ctx := context.Background()
	b.SetParallelism(max(1, 64/max(1, testingProcs())))
	b.SetBytes(1024)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		v := make([]byte, 1024)
		_, _ = rand.Read(v)
		for pb.Next() {
			if err := prod.ProduceSync(ctx, &pgmsg.Record{Topic: topic, Value: v}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
