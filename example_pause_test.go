package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Pause a queue (during an incident, a deploy of its consumers): jobs
// are still enqueued, but no worker gets any until it is resumed.
func ExampleClient_PauseQueue() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.Enqueue(ctx, "webhooks", pgmsg.EnqueueParams{Payload: []byte("POST /hook")}, nil); err != nil {
		log.Fatal(err)
	}
	if err := client.PauseQueue(ctx, "webhooks"); err != nil {
		log.Fatal(err)
	}
	jobs, err := client.ClaimJobs(ctx, "webhooks", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("paused: claimed", len(jobs))

	if err := client.ResumeQueue(ctx, "webhooks"); err != nil {
		log.Fatal(err)
	}
	jobs, err = client.ClaimJobs(ctx, "webhooks", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("resumed: claimed", len(jobs))
	// Output:
	// paused: claimed 0
	// resumed: claimed 1
}
