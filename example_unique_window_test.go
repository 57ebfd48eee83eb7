package pgmsg_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/pgmsg/pgmsg"
)

// UniqueFor makes a unique key unique within a time window, whatever
// became of the window's job: at most one sync per user per day, even
// after the first one has run.
func ExampleEnqueueParams_uniqueFor() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	params := pgmsg.EnqueueParams{Kind: "sync", UniqueKey: "sync:user-42", UniqueFor: 24 * time.Hour}
	first, err := client.Enqueue(ctx, "sync", params, nil)
	if err != nil {
		log.Fatal(err)
	}
	// The first job runs and completes.
	jobs, err := client.ClaimJobs(ctx, "sync", nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Complete(ctx, jobs[0]); err != nil {
		log.Fatal(err)
	}
	// The same day, the same key is still taken.
	again, err := client.Enqueue(ctx, "sync", params, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("duplicate:", again.Duplicate, "same job:", again.ID == first.ID)
	// Output:
	// duplicate: true same job: true
}
