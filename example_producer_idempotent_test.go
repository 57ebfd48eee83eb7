package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// An idempotent Producer (Kafka's enable.idempotence) retries a batch
// whose outcome is unknown without storing it twice, and keeps each
// partition's records in Produce order.
func ExampleProducerConfig_idempotent() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "ledger", pgmsg.TopicConfig{Partitions: 2}); err != nil {
		log.Fatal(err)
	}
	producer, err := client.NewProducer(&pgmsg.ProducerConfig{Idempotent: true, ProducerID: "ledger-writer-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close(ctx)
	// ProduceSync waits for its records (here: one account's entries, one key).
	entries := []*pgmsg.Record{
		{Topic: "ledger", Key: []byte("acct-9"), Value: []byte("open")},
		{Topic: "ledger", Key: []byte("acct-9"), Value: []byte("+100")},
		{Topic: "ledger", Key: []byte("acct-9"), Value: []byte("-30")},
	}
	if err := producer.ProduceSync(ctx, entries...); err != nil {
		log.Fatal(err)
	}
	for _, r := range entries {
		fmt.Printf("%s at %d/%d\n", r.Value, r.Partition, r.Offset)
	}
	// Output:
	// open at 0/0
	// +100 at 0/1
	// -30 at 0/2
}
