package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Publish keyed records atomically, then read them as a consumer group.
func ExampleClient_Publish_keyed() {
	ctx := context.Background()
	client, cleanup := exampleClient()
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
