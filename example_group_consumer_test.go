package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"

	"github.com/pgmsg/pgmsg"
)

// One group member can read several topics; each claim still holds the
// records of one partition of one topic, in order.
func ExampleClient_NewGroupConsumer() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	for _, topic := range []string{"orders", "refunds"} {
		if _, err := client.CreateTopic(ctx, topic, pgmsg.TopicConfig{}); err != nil {
			log.Fatal(err)
		}
	}
	recs := []*pgmsg.Record{
		{Topic: "orders", Value: []byte("order 1")},
		{Topic: "refunds", Value: []byte("refund 1")},
		{Topic: "orders", Value: []byte("order 2")},
	}
	if err := client.Publish(ctx, recs, nil); err != nil { // one transaction across topics
		log.Fatal(err)
	}
	consumer, err := client.NewGroupConsumer("accounting", []string{"orders", "refunds"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	runCtx, stop := context.WithCancel(ctx)
	var seen []string
	err = consumer.Run(runCtx, func(ctx context.Context, claim *pgmsg.Claim) error {
		for _, r := range claim.Records {
			seen = append(seen, fmt.Sprintf("%s@%d: %s", claim.Topic, r.Offset, r.Value))
		}
		if len(seen) == len(recs) {
			stop()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	sort.Strings(seen)
	for _, s := range seen {
		fmt.Println(s)
	}
	// Output:
	// orders@0: order 1
	// orders@1: order 2
	// refunds@0: refund 1
}
