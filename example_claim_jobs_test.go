package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/pgmsg/pgmsg"
)

// Claim and finish jobs by hand: the same calls psql can make.
func ExampleClient_ClaimJobs() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateQueue(ctx, "reports", pgmsg.QueueConfig{MaxAttempts: 2, RetryBackoff: time.Millisecond}); err != nil {
		log.Fatal(err)
	}
	_, err := client.EnqueueMany(ctx, "reports", []pgmsg.EnqueueParams{
		{Kind: "daily", Payload: []byte("2026-01-01")},
		{Kind: "urgent", Payload: []byte("now"), Priority: 10},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}

	jobs, err := client.ClaimJobs(ctx, "reports", &pgmsg.ClaimJobsOpts{Max: 10})
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range jobs {
		fmt.Printf("claimed %s (attempt %d)\n", j.Kind, j.Attempt)
	}
	if err := client.Complete(ctx, jobs[0]); err != nil {
		log.Fatal(err)
	}
	res, err := client.Fail(ctx, jobs[1], errors.New("printer on fire"), nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("daily is now", res.State)
	// A late second completion of the same claim is rejected.
	err = client.Complete(ctx, jobs[0])
	fmt.Println(errors.Is(err, pgmsg.ErrJobNotHeld), pgmsg.ErrorCode(err))
	// Output:
	// claimed urgent (attempt 1)
	// claimed daily (attempt 1)
	// daily is now retrying
	// true PM106
}
