package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/pgmsg/pgmsg"
)

// A handler with a checkpointed step: its first attempt charges, then
// fails; the retry gets the charge's id from its checkpoint without
// charging again. Each attempt's log lines are kept with its outcome.
func ExampleStep() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()
	if _, err := client.CreateQueue(ctx, "orders", pgmsg.QueueConfig{RetryBackoff: 10 * time.Millisecond}); err != nil {
		log.Fatal(err)
	}
	res, err := client.Enqueue(ctx, "orders", pgmsg.EnqueueParams{Payload: []byte(`{"order": 7}`)}, nil)
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	handler := func(ctx context.Context, j *pgmsg.Job) error {
		charge, err := pgmsg.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			pgmsg.Logf(ctx, "charging order 7")
			return "ch_1", nil
		})
		if err != nil {
			return err
		}
		if j.Attempt == 1 {
			return errors.New("mail server down")
		}
		pgmsg.Logger(ctx).Info("receipt sent", "charge", charge)
		close(done)
		return nil
	}
	w, err := client.NewWorker("orders", handler, &pgmsg.WorkerOpts{PollInterval: 10 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	<-done
	stop()
	// The completion is recorded when Run returns.
	if err := <-ran; !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}

	logs, err := client.JobLogs(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range logs {
		fmt.Println(l.Attempt, l.Outcome, strings.Contains(l.Log, "charging"), strings.Contains(l.Log, "charge=ch_1"))
	}
	steps, err := client.JobSteps(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(steps[0].Name, steps[0].Attempt, string(steps[0].Output))
	// Output:
	// 1 retrying true false
	// 2 completed false true
	// charge 1 "ch_1"
}
