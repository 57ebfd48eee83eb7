package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// A workflow: "fetch" fans out to two "resize" jobs, which fan in to
// "publish". Each waits (pending) until its dependencies completed, and
// becomes claimable in the transaction that completes the last of them.
func ExampleClient_EnqueueWorkflow() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	w := pgmsg.NewWorkflow().
		Add("fetch", pgmsg.EnqueueParams{Kind: "fetch"}).
		Add("small", pgmsg.EnqueueParams{Kind: "resize"}, "fetch").
		Add("large", pgmsg.EnqueueParams{Kind: "resize"}, "fetch").
		Add("publish", pgmsg.EnqueueParams{Kind: "publish"}, "small", "large")
	res, err := client.EnqueueWorkflow(ctx, "images", w, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res["fetch"].State, res["small"].State, res["publish"].State)

	// Work the jobs one at a time: each claim gets the only claimable one.
	for range 4 {
		jobs, err := client.ClaimJobs(ctx, "images", nil)
		if err != nil || len(jobs) != 1 {
			log.Fatal(jobs, err)
		}
		if err := client.Complete(ctx, jobs[0]); err != nil {
			log.Fatal(err)
		}
		fmt.Println("ran", jobs[0].Kind)
	}
	wf, err := client.GetWorkflow(ctx, res["publish"].ID, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range wf {
		fmt.Println(j.Level, j.Kind, j.State)
	}
	// Output:
	// available pending pending
	// ran fetch
	// ran resize
	// ran resize
	// ran publish
	// 0 fetch completed
	// 1 resize completed
	// 1 resize completed
	// 2 publish completed
}
