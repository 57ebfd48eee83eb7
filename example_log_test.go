package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg"
)

// Publish keyed records atomically, then read them as a consumer group.
func ExampleClient_Publish() {
	ctx := context.Background()
	client, cleanup := exampleQueueClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 3}); err != nil {
		log.Fatal(err)
	}
	recs := []*pgmsg.Record{
		{Topic: "orders", Key: []byte("alice"), Value: []byte("order 1")},
		{Topic: "orders", Key: []byte("bob"), Value: []byte("order 2")},
		{Topic: "orders", Key: []byte("alice"), Value: []byte("order 3")},
	}
	if err := client.Publish(ctx, recs, nil); err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		fmt.Printf("%s -> partition %d offset %d\n", r.Key, r.Partition, r.Offset)
	}

	// Same key, same partition, in order: alice's orders stay in sequence.
	for {
		claim, err := client.Claim(ctx, "orders", "billing", nil)
		if err != nil {
			log.Fatal(err)
		}
		if claim == nil {
			break // nothing left to read
		}
		for _, r := range claim.Records {
			fmt.Printf("billing read %s: %s\n", r.Key, r.Value)
		}
		if err := client.Commit(ctx, claim); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// alice -> partition 0 offset 0
	// bob -> partition 0 offset 1
	// alice -> partition 0 offset 2
	// billing read alice: order 1
	// billing read bob: order 2
	// billing read alice: order 3
}

// Process records and write their effects in the same transaction as the
// group's commit: exactly-once effects inside PostgreSQL.
func ExampleConsumer_ProcessTx() {
	ctx := context.Background()
	client, cleanup := exampleQueueClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "payments", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	if err := client.Publish(ctx, []*pgmsg.Record{{Topic: "payments", Value: []byte("42.00")}}, nil); err != nil {
		log.Fatal(err)
	}
	consumer, err := client.NewConsumer("payments", "ledger", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	processed, err := consumer.ProcessTx(ctx, func(ctx context.Context, tx pgx.Tx, claim *pgmsg.Claim) error {
		// INSERT INTO ledger ... using tx: commits with the cursor, or not at all.
		fmt.Printf("booking %s from offset %d\n", claim.Records[0].Value, claim.Records[0].Offset)
		return nil
	})
	fmt.Println(processed, err)
	// Output:
	// booking 42.00 from offset 0
	// true <nil>
}
