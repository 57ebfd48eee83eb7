package pgmsg_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/pgmsg/pgmsg"
)

// Enqueue a batch in one statement: priorities order the claims, and a
// delayed job waits (scheduled) until its time.
func ExampleClient_EnqueueMany() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	res, err := client.EnqueueMany(ctx, "notifications", []pgmsg.EnqueueParams{
		{Kind: "digest", Payload: []byte("weekly")},
		{Kind: "alert", Payload: []byte("disk full"), Priority: 100},
		{Kind: "reminder", Payload: []byte("renew"), Delay: time.Hour},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res {
		fmt.Println("enqueued", r.State)
	}
	jobs, err := client.ClaimJobs(ctx, "notifications", &pgmsg.ClaimJobsOpts{Max: 10})
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range jobs {
		fmt.Println("claimed", j.Kind, string(j.Payload))
	}
	// Output:
	// enqueued available
	// enqueued available
	// enqueued scheduled
	// claimed alert disk full
	// claimed digest weekly
}
