package pgmsg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// benchQueue returns a client and a queue "q" in a fresh schema.
func benchQueue(b *testing.B) (*pgmsg.Client, context.Context) {
	bundle := pgtest.Schema(b, nil)
	client, err := pgmsg.NewClient(bundle.Pool, &pgmsg.Config{Schema: bundle.Schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	ctx := context.Background()
	if _, err := client.CreateQueue(ctx, "q", pgmsg.QueueConfig{}); err != nil {
		b.Fatal(err)
	}
	return client, ctx
}

// BenchmarkJobBatch measures the queue's hot paths per batch of 100 jobs
// (allocs/op is what the storage layer must not raise): the direct
// enqueue, the direct claim, and the completion of the claimed jobs, or
// their failure one by one.
func BenchmarkJobBatch(b *testing.B) {
	const n = 100
	params := make([]pgmsg.EnqueueParams, n)
	for i := range params {
		params[i] = pgmsg.EnqueueParams{Payload: []byte(`{"n":1}`), Kind: "k"}
	}
	for _, finish := range []string{"complete", "fail"} {
		b.Run(finish, func(b *testing.B) {
			client, ctx := benchQueue(b)
			// The first claim of a queue goes through job_claim(); the
			// next ones are direct.
			if _, err := client.ClaimJobs(ctx, "q", nil); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := client.EnqueueMany(ctx, "q", params, nil); err != nil {
					b.Fatal(err)
				}
				jobs, err := client.ClaimJobs(ctx, "q", &pgmsg.ClaimJobsOpts{Max: n})
				if err != nil || len(jobs) != n {
					b.Fatalf("claim: %d jobs, %v", len(jobs), err)
				}
				if finish == "complete" {
					res, err := client.CompleteMany(ctx, jobs)
					if err != nil || len(res.Completed) != n {
						b.Fatalf("complete: %v %v", res, err)
					}
					continue
				}
				for _, j := range jobs {
					if _, err := client.Fail(ctx, j, errors.New("boom"), &pgmsg.FailOpts{Dead: true}); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkWorker measures a Worker end to end per batch of 100 jobs
// (allocs/op is what the worker's engine must not raise): the enqueue of
// the batch, and the worker's claims, handler calls and batched
// completions until the last of its jobs is archived.
func BenchmarkWorker(b *testing.B) {
	const n = 100
	params := make([]pgmsg.EnqueueParams, n)
	for i := range params {
		params[i] = pgmsg.EnqueueParams{Payload: []byte(`{"n":1}`), Kind: "k"}
	}
	client, ctx := benchQueue(b)
	completed := make(chan int, 1024)
	w, err := client.NewWorker("q", func(context.Context, *pgmsg.Job) error { return nil },
		&pgmsg.WorkerOpts{OnCompleted: func(jobs []*pgmsg.Job) { completed <- len(jobs) }})
	if err != nil {
		b.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	b.Cleanup(func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			b.Errorf("Run: %v", err)
		}
	})
	for b.Loop() {
		if _, err := client.EnqueueMany(ctx, "q", params, nil); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < n; {
			got += <-completed
		}
	}
}
