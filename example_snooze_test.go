package pgmsg_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/pgmsg/pgmsg"
)

// Snooze puts a held job back to wait, without counting a failed attempt:
// the resource it needs is not ready yet. (A Worker's handler returns
// pgmsg.JobSnooze(delay) for the same.)
func ExampleClient_Snooze() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.Enqueue(ctx, "exports", pgmsg.EnqueueParams{Kind: "export"}, nil); err != nil {
		log.Fatal(err)
	}
	jobs, err := client.ClaimJobs(ctx, "exports", nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Snooze(ctx, jobs[0], time.Hour); err != nil {
		log.Fatal(err)
	}
	job, err := client.GetJob(ctx, jobs[0].ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.State, "attempts used:", job.Attempt)
	// Output:
	// scheduled attempts used: 0
}
