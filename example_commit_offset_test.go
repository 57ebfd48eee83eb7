package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Commit part of a claim: the records before the one that failed are
// done, the rest are delivered again.
func ExampleClient_CommitOffset() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "rows", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	var recs []*pgmsg.Record
	for _, v := range []string{"r0", "r1", "bad", "r3"} {
		recs = append(recs, &pgmsg.Record{Topic: "rows", Value: []byte(v)})
	}
	if err := client.Publish(ctx, recs, nil); err != nil {
		log.Fatal(err)
	}
	claim, err := client.Claim(ctx, "rows", "loader", nil)
	if err != nil {
		log.Fatal(err)
	}
	load := func(r *pgmsg.Record) error {
		if string(r.Value) == "bad" {
			return errors.New("constraint violation")
		}
		return nil
	}
	for _, r := range claim.Records {
		if err := load(r); err != nil {
			fmt.Printf("offset %d failed: %v\n", r.Offset, err)
			// The cursor moves to r: r and what follows come again.
			if err := client.CommitOffset(ctx, claim, r.Offset); err != nil {
				log.Fatal(err)
			}
			break
		}
	}
	next, err := client.Claim(ctx, "rows", "loader", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("next claim starts at", next.Records[0].Offset, string(next.Records[0].Value))
	if err := client.Release(ctx, next); err != nil {
		log.Fatal(err)
	}
	// Output:
	// offset 2 failed: constraint violation
	// next claim starts at 2 bad
}
