package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Publish a record with headers and read it back by offset.
func ExampleClient_Publish() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "signups", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	rec := &pgmsg.Record{
		Topic:   "signups",
		Value:   []byte(`{"user":"ada"}`),
		Headers: map[string][]byte{"source": []byte("web")},
	}
	// Publish returns once the record is committed, with its place set.
	if err := client.Publish(ctx, []*pgmsg.Record{rec}, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored at partition", rec.Partition, "offset", rec.Offset)

	// Fetch reads a partition from an offset on, outside any group.
	recs, err := client.Fetch(ctx, "signups", 0, 0, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		fmt.Printf("%d: %s (source %s)\n", r.Offset, r.Value, r.Headers["source"])
	}
	// Output:
	// stored at partition 0 offset 0
	// 0: {"user":"ada"} (source web)
}
