package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/pgmsg/pgmsg"
)

// A poison record is set aside in the dead-letter topic after
// MaxDeliveries failed attempts, so the partition moves on; the dead
// letters can be listed and, once the bug is fixed, replayed.
func ExampleClient_DeadLetters() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "invoices", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	recs := []*pgmsg.Record{
		{Topic: "invoices", Value: []byte("not json")},
		{Topic: "invoices", Value: []byte(`{"total":10}`)},
	}
	if err := client.Publish(ctx, recs, nil); err != nil {
		log.Fatal(err)
	}
	consumer, err := client.NewConsumer("invoices", "mailer", &pgmsg.ConsumerOpts{
		MaxDeliveries:     2,
		RedeliveryBackoff: time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	runCtx, stop := context.WithCancel(ctx)
	err = consumer.Run(runCtx, func(ctx context.Context, claim *pgmsg.Claim) error {
		for _, r := range claim.Records {
			if r.Value[0] != '{' {
				return errors.New("invalid invoice") // the whole claim is handed over again
			}
		}
		if claim.Records[len(claim.Records)-1].Offset == 1 {
			stop() // the good record is handled: the example is done
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}

	dead, err := client.DeadLetters(ctx, "invoices", "mailer", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range dead {
		fmt.Printf("offset %d after %d deliveries: %s (%q)\n", d.Offset, d.Deliveries, d.Error, d.Record.Value)
	}
	// Publish them back to the topic, for the group to read again.
	n, err := client.ReplayDeadLetters(ctx, "invoices", "mailer", nil)
	fmt.Println("replayed", n, err)
	// Output:
	// offset 0 after 2 deliveries: invalid invoice ("not json")
	// replayed 1 <nil>
}
