package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Reprocess a topic from the start: move the group's cursors back (to
// PositionEarliest, PositionLatest, an offset or a time) and its members
// read again from there.
func ExampleClient_ResetGroup() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "events", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	recs := []*pgmsg.Record{{Topic: "events", Value: []byte("a")}, {Topic: "events", Value: []byte("b")}}
	if err := client.Publish(ctx, recs, nil); err != nil {
		log.Fatal(err)
	}
	readAll := func() {
		claim, err := client.Claim(ctx, "events", "search-index", nil)
		if err != nil {
			log.Fatal(err)
		}
		if claim == nil {
			fmt.Println("nothing to read")
			return
		}
		for _, r := range claim.Records {
			fmt.Printf("read %s at %d\n", r.Value, r.Offset)
		}
		if err := client.Commit(ctx, claim); err != nil {
			log.Fatal(err)
		}
	}
	readAll()
	readAll()
	// The index was rebuilt empty: read everything again.
	cursors, err := client.ResetGroup(ctx, "events", "search-index", pgmsg.PositionEarliest, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cursor moved to", cursors[0].NextOffset)
	readAll()
	// Output:
	// read a at 0
	// read b at 1
	// nothing to read
	// cursor moved to 0
	// read a at 0
	// read b at 1
}
