package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"

	"github.com/pgmsg/pgmsg"
)

// A Worker runs a handler over a queue's jobs with a pool of goroutines
// until its context ends; on shutdown it lets running handlers finish.
func ExampleClient_NewWorker() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	for _, img := range []string{"a.png", "b.png", "c.png"} {
		if _, err := client.Enqueue(ctx, "thumbnails", pgmsg.EnqueueParams{Kind: "resize", Payload: []byte(img)}, nil); err != nil {
			log.Fatal(err)
		}
	}
	done := make(chan string, 3)
	worker, err := client.NewWorker("thumbnails", func(ctx context.Context, job *pgmsg.Job) error {
		done <- string(job.Payload) // resize the image here
		return nil                  // nil completes the job; an error retries it with backoff
	}, &pgmsg.WorkerOpts{Concurrency: 2})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- worker.Run(runCtx) }()

	var resized []string
	for len(resized) < 3 {
		resized = append(resized, <-done)
	}
	stop()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	sort.Strings(resized)
	fmt.Println(resized)
	// Output:
	// [a.png b.png c.png]
}
