package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Inspect and requeue the dead-letter jobs of a queue.
func ExampleClient_RequeueDeadJobs() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateQueue(ctx, "billing", pgmsg.QueueConfig{MaxAttempts: 1}); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "billing", pgmsg.EnqueueParams{Kind: "charge"}, nil); err != nil {
		log.Fatal(err)
	}
	jobs, err := client.ClaimJobs(ctx, "billing", nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Fail(ctx, jobs[0], errors.New("card declined"), nil); err != nil {
		log.Fatal(err)
	}
	dead, err := client.ListDeadJobs(ctx, "billing", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range dead {
		fmt.Printf("dead %s after %d attempt(s): %s\n", d.Kind, d.Attempt, d.Errors[len(d.Errors)-1].Error)
	}
	n, err := client.RequeueDeadJobs(ctx, "billing", &pgmsg.DeadJobsOpts{Kind: "charge"})
	if err != nil {
		log.Fatal(err)
	}
	st, err := client.QueueStats(ctx, "billing")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("requeued", n, "available", st.Available, "dead", st.Dead)
	// Output:
	// dead charge after 1 attempt(s): card declined
	// requeued 1 available 1 dead 0
}
