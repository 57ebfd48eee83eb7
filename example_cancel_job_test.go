package pgmsg_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/pgmsg/pgmsg"
)

// Cancel a job by id, wherever it is: it is archived as cancelled and
// never runs (a running job's handler finds its completion refused).
func ExampleClient_CancelJob() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	res, err := client.Enqueue(ctx, "reminders", pgmsg.EnqueueParams{Kind: "remind", Delay: 24 * time.Hour}, nil)
	if err != nil {
		log.Fatal(err)
	}
	cancelled, err := client.CancelJob(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	job, err := client.GetJob(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cancelled, job.State)
	// Output:
	// true cancelled
}
