package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// An idempotent publish numbers its records: a retry after an unknown
// outcome (a timeout, a broken connection) is answered with the stored
// offsets instead of storing the records twice.
func ExampleClient_PublishIdempotent() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "transfers", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	const producerID = "billing-7f3a" // chosen once per producer, e.g. a UUID
	batch := func() []*pgmsg.Record {
		return []*pgmsg.Record{
			{Topic: "transfers", Value: []byte("+10")},
			{Topic: "transfers", Value: []byte("-10")},
		}
	}
	first := batch()
	dup, err := client.PublishIdempotent(ctx, producerID, 0, first, nil)
	fmt.Println("first: duplicate", dup, err, "offsets", first[0].Offset, first[1].Offset)

	// The same batch (same producer, same sequence) sent again.
	retry := batch()
	dup, err = client.PublishIdempotent(ctx, producerID, 0, retry, nil)
	fmt.Println("retry: duplicate", dup, err, "offsets", retry[0].Offset, retry[1].Offset)

	// The next batch continues the sequence: 0 and 1 were taken.
	next := []*pgmsg.Record{{Topic: "transfers", Value: []byte("+5")}}
	dup, err = client.PublishIdempotent(ctx, producerID, 2, next, nil)
	fmt.Println("next: duplicate", dup, err, "offset", next[0].Offset)
	// Output:
	// first: duplicate false <nil> offsets 0 1
	// retry: duplicate true <nil> offsets 0 1
	// next: duplicate false <nil> offset 2
}
