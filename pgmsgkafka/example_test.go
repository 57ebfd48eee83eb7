package pgmsgkafka_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/pgmsgkafka"
)

// countOrders is application code: it knows the interfaces only, so it
// runs on PostgreSQL (pgmsg.NewBackend(client)) and on Kafka alike.
func countOrders(ctx context.Context, backend pgmsg.Backend) (int, error) {
	if _, err := backend.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 3}); err != nil {
		return 0, err
	}
	recs := []*pgmsg.Record{
		{Topic: "orders", Key: []byte("customer-7"), Value: []byte(`{"id":1}`)},
		{Topic: "orders", Key: []byte("customer-7"), Value: []byte(`{"id":2}`)},
	}
	if err := backend.Publish(ctx, recs, nil); err != nil {
		return 0, err
	}
	consumer, err := backend.NewLogConsumer("billing", []string{"orders"}, nil)
	if err != nil {
		return 0, err
	}
	defer consumer.Close()
	runCtx, stop := context.WithCancel(ctx)
	n := 0
	err = consumer.Run(runCtx, func(_ context.Context, cl *pgmsg.Claim) error {
		n += len(cl.Records)
		if n == len(recs) {
			stop()
		}
		return nil // commit
	})
	if err != nil && runCtx.Err() == nil {
		return 0, err
	}
	return n, nil
}

// The Kafka backend is one constructor away; here on an in-process
// kfake cluster, in production on Config.Brokers.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	backend, err := pgmsgkafka.New(&pgmsgkafka.Config{Brokers: cluster.ListenAddrs()})
	if err != nil {
		panic(err)
	}
	defer backend.Close()

	n, err := countOrders(context.Background(), backend)
	fmt.Println(n, err)
	fmt.Println("partition of customer-7:", pgmsg.PartitionForKey([]byte("customer-7"), 3))
	// Output:
	// 2 <nil>
	// partition of customer-7: 1
}
