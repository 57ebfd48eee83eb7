package mirror_test

import (
	"context"
	"fmt"
	"log"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/mirror"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// exampleTB lets the example use pgtest outside a test.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (e *exampleTB) Helper()                        {}
func (e *exampleTB) Cleanup(f func())               { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) Fatal(args ...any)              { log.Fatal(args...) }
func (e *exampleTB) Fatalf(format string, a ...any) { log.Fatalf(format, a...) }
func (e *exampleTB) Errorf(format string, a ...any) { log.Printf(format, a...) }

// Copy a pgmsg topic to Kafka, as `pgmsg mirror --drain` does when a
// workload moves from pgmsg to Kafka: the mirror is a pgmsg consumer
// group, and each record keeps its partition, key, value and headers,
// plus its pgmsg offset in the pgmsg-offset header.
func Example() {
	ctx := context.Background()
	tb := &exampleTB{}
	defer func() {
		for i := len(tb.cleanups) - 1; i >= 0; i-- {
			tb.cleanups[i]()
		}
	}()
	db := pgtest.Schema(tb, nil)
	client, err := pgmsg.NewClient(db.Pool, &pgmsg.Config{Schema: db.Schema})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1)) // in production: your brokers
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	if _, err := client.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 2}); err != nil {
		log.Fatal(err)
	}
	recs := []*pgmsg.Record{
		{Topic: "orders", Key: []byte("alice"), Value: []byte("order 1")},
		{Topic: "orders", Key: []byte("alice"), Value: []byte("order 2")},
	}
	if err := client.Publish(ctx, recs, nil); err != nil {
		log.Fatal(err)
	}

	m, err := mirror.New(mirror.Config{
		Client:       client,
		Kafka:        []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)},
		Topics:       []string{"orders"},
		CreateTopics: true, // with the pgmsg topic's partition count
		Drain:        true, // return once every record is in Kafka
	})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if err := m.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("mirrored", m.Stats().Mirrored)

	// Read them back from Kafka.
	kc, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer kc.Close()
	for n := 0; n < len(recs); {
		kc.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var offset string
			for _, h := range r.Headers {
				if h.Key == mirror.OffsetHeader {
					offset = string(h.Value)
				}
			}
			fmt.Printf("kafka %d/%d: %s %s (pgmsg offset %s)\n", r.Partition, r.Offset, r.Key, r.Value, offset)
			n++
		})
	}
	// Output:
	// mirrored 2
	// kafka 1/0: alice order 1 (pgmsg offset 0)
	// kafka 1/1: alice order 2 (pgmsg offset 1)
}
