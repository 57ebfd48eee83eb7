package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// A rate limit caps how many jobs a queue hands out per second, to all
// its workers together (an external API's quota, say); MaxRunning caps
// how many run at once across every process.
func ExampleQueueConfig_rateLimit() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	q, err := client.CreateQueue(ctx, "geocode", pgmsg.QueueConfig{RateLimit: 2, MaxRunning: 10})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rate limit", q.RateLimit, "max running", q.MaxRunning)
	for i := 0; i < 5; i++ {
		if _, err := client.Enqueue(ctx, "geocode", pgmsg.EnqueueParams{Payload: fmt.Appendf(nil, "address %d", i)}, nil); err != nil {
			log.Fatal(err)
		}
	}
	// Asking for 5 gets a second's worth: 2. Workers take the rest as the
	// bucket refills.
	jobs, err := client.ClaimJobs(ctx, "geocode", &pgmsg.ClaimJobsOpts{Max: 5})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed", len(jobs))
	// Output:
	// rate limit 2 max running 10
	// claimed 2
}
