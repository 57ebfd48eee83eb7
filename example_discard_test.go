package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// A handler returns JobDiscard for an error no retry can fix: the job goes
// to the queue's dead jobs at once instead of being retried.
func ExampleJobDiscard() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.Enqueue(ctx, "imports", pgmsg.EnqueueParams{Payload: []byte("{broken")}, nil); err != nil {
		log.Fatal(err)
	}
	handled := make(chan struct{})
	worker, err := client.NewWorker("imports", func(ctx context.Context, job *pgmsg.Job) error {
		defer close(handled)
		var v map[string]any
		if err := job.UnmarshalPayload(&v); err != nil {
			return pgmsg.JobDiscard(fmt.Errorf("bad payload: %w", err))
		}
		return nil
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- worker.Run(runCtx) }()
	<-handled
	stop() // the worker records the outcome of running handlers before it returns
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	dead, err := client.ListDeadJobs(ctx, "imports", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(dead), "dead after", dead[0].Attempt, "attempt")
	// Output:
	// 1 dead after 1 attempt
}
