package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"

	"github.com/pgmsg/pgmsg"
)

// A consumer group member: Run waits for records, hands each claim to the
// handler and commits it when the handler returns nil. Start more members
// with the same group name (in this process or others) and the topic's
// partitions are spread among them.
func ExampleConsumer_Run() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "clicks", pgmsg.TopicConfig{Partitions: 4}); err != nil {
		log.Fatal(err)
	}
	var recs []*pgmsg.Record
	for _, page := range []string{"/", "/pricing", "/docs", "/blog", "/about"} {
		recs = append(recs, &pgmsg.Record{Topic: "clicks", Key: []byte(page), Value: []byte("click")})
	}
	if err := client.Publish(ctx, recs, nil); err != nil {
		log.Fatal(err)
	}

	consumer, err := client.NewConsumer("clicks", "analytics", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	runCtx, stop := context.WithCancel(ctx)
	var pages []string
	err = consumer.Run(runCtx, func(ctx context.Context, claim *pgmsg.Claim) error {
		for _, r := range claim.Records {
			pages = append(pages, string(r.Key))
		}
		if len(pages) == len(recs) {
			stop() // an example stops here; a service runs until shutdown
		}
		return nil // commit the claim
	})
	if !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	sort.Strings(pages) // partitions are read in parallel: order holds per key only
	fmt.Println(pages)
	// Output:
	// [/ /about /blog /docs /pricing]
}
