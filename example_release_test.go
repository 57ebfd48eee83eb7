package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Claims are leases: Release gives records back without committing (they
// are delivered again at once), and a claim that is neither committed nor
// released is delivered again when its lease ends.
func ExampleClient_Release() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "uploads", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	if err := client.Publish(ctx, []*pgmsg.Record{{Topic: "uploads", Value: []byte("video.mp4")}}, nil); err != nil {
		log.Fatal(err)
	}
	claim, err := client.Claim(ctx, "uploads", "transcoder", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed", string(claim.Records[0].Value))

	// While the claim is held, the group has nothing else to read.
	other, err := client.Claim(ctx, "uploads", "transcoder", nil)
	fmt.Println("second claim:", other, err)

	// The transcoder is shutting down: hand the record back.
	if err := client.Release(ctx, claim); err != nil {
		log.Fatal(err)
	}
	again, err := client.Claim(ctx, "uploads", "transcoder", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed again", string(again.Records[0].Value), "at offset", again.Records[0].Offset)
	if err := client.Commit(ctx, again); err != nil {
		log.Fatal(err)
	}
	// Output:
	// claimed video.mp4
	// second claim: <nil> <nil>
	// claimed again video.mp4 at offset 0
}
