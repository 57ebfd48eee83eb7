package pgmsg_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/pgmsg/pgmsg"
)

// Replay by time: find the first offset at or after a moment, and move a
// group's cursor there to read again from it.
func ExampleClient_OffsetsForTime() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "prices", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	// Producers may set the timestamp; it defaults to the database clock.
	morning := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var recs []*pgmsg.Record
	for h, price := range []string{"101", "103", "99", "104"} {
		recs = append(recs, &pgmsg.Record{Topic: "prices", Value: []byte(price), Timestamp: morning.Add(time.Duration(h) * time.Hour)})
	}
	if err := client.Publish(ctx, recs, nil); err != nil {
		log.Fatal(err)
	}

	at := morning.Add(2 * time.Hour) // 11:00
	offsets, err := client.OffsetsForTime(ctx, "prices", at)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("partition %d: first record at or after 11:00 is offset %d\n", offsets[0].Partition, offsets[0].Offset)

	// A new group can start there (ResetGroup moves an existing one).
	if _, err := client.CreateGroup(ctx, "prices", "audit", at.Format(time.RFC3339)); err != nil {
		log.Fatal(err)
	}
	claim, err := client.Claim(ctx, "prices", "audit", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range claim.Records {
		fmt.Println(r.Timestamp.UTC().Format("15:04"), string(r.Value))
	}
	if err := client.Commit(ctx, claim); err != nil {
		log.Fatal(err)
	}
	// Output:
	// partition 0: first record at or after 11:00 is offset 2
	// 11:00 99
	// 12:00 104
}
