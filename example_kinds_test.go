package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// ResizeArgs are the typed arguments of the "resize" jobs.
type ResizeArgs struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

// Kind names the job kind (EnqueueParams.Kind).
func (ResizeArgs) Kind() string { return "resize" }

// Typed jobs: NewJob encodes the arguments, AddKind routes each kind to a
// handler that gets them decoded, and one Worker serves every kind.
func ExampleAddKind() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	params, err := pgmsg.NewJob(ResizeArgs{Image: "cat.png", Width: 128})
	if err != nil {
		log.Fatal(err)
	}
	params.Priority = 5 // the other EnqueueParams fields are set as usual
	if _, err := client.Enqueue(ctx, "media", params, nil); err != nil {
		log.Fatal(err)
	}

	done := make(chan string, 1)
	kinds := pgmsg.NewKinds()
	pgmsg.AddKind(kinds, func(ctx context.Context, job *pgmsg.Job, args ResizeArgs) error {
		done <- fmt.Sprintf("%s: %s to %dpx", job.Kind, args.Image, args.Width)
		return nil
	})
	worker, err := client.NewWorker("media", kinds.Handle, nil)
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- worker.Run(runCtx) }()
	fmt.Println(<-done)
	stop()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	// Output:
	// resize: cat.png to 128px
}
