package pgmsg_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// exampleQueueTB lets the examples use pgtest (which wants a testing.TB)
// outside a test: cleanups run when the example calls done.
type exampleQueueTB struct {
	testing.TB
	cleanups []func()
}

func (e *exampleQueueTB) Helper()                        {}
func (e *exampleQueueTB) Cleanup(f func())               { e.cleanups = append(e.cleanups, f) }
func (e *exampleQueueTB) Fatal(args ...any)              { log.Fatal(args...) }
func (e *exampleQueueTB) Fatalf(format string, a ...any) { log.Fatalf(format, a...) }
func (e *exampleQueueTB) Errorf(format string, a ...any) { log.Printf(format, a...) }
func (e *exampleQueueTB) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// exampleQueueClient returns a client on a fresh, migrated schema of the
// test database and a function that removes it. In your code: pgxpool.New
// and pgmsg.NewClient(pool, nil) after `pgmsg migrate up`.
func exampleQueueClient() (*pgmsg.Client, func()) {
	tb := &exampleQueueTB{}
	b := pgtest.Schema(tb, nil)
	client, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema, PollInterval: 50 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	return client, func() {
		client.Close()
		tb.done()
	}
}

// Enqueue jobs and run them with a worker pool.
func ExampleClient_Work() {
	ctx := context.Background()
	client, cleanup := exampleQueueClient()
	defer cleanup()

	type welcome struct {
		Email string `json:"email"`
	}
	for _, email := range []string{"ada@example.com", "grace@example.com"} {
		payload, err := pgmsg.JSONPayload(welcome{Email: email})
		if err != nil {
			log.Fatal(err)
		}
		// The queue is created on first use with default settings.
		if _, err := client.Enqueue(ctx, "emails", pgmsg.EnqueueParams{Kind: "welcome", Payload: payload}, nil); err != nil {
			log.Fatal(err)
		}
	}

	var mu sync.Mutex
	var sent []string
	workCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- client.Work(workCtx, "emails", func(ctx context.Context, job *pgmsg.Job) error {
			var w welcome
			if err := job.UnmarshalPayload(&w); err != nil {
				return pgmsg.JobDiscard(err) // no retry can fix a bad payload
			}
			mu.Lock()
			sent = append(sent, job.Kind+" "+w.Email)
			mu.Unlock()
			return nil // completed: archived
		}, 4)
	}()
	for {
		st, err := client.QueueStats(ctx, "emails")
		if err != nil {
			log.Fatal(err)
		}
		if st.Archived == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	sort.Strings(sent)
	for _, s := range sent {
		fmt.Println(s)
	}
	// Output:
	// welcome ada@example.com
	// welcome grace@example.com
}

// Claim and finish jobs by hand: the same calls psql can make.
func ExampleClient_ClaimJobs() {
	ctx := context.Background()
	client, cleanup := exampleQueueClient()
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

// A unique key makes a second enqueue of a live job a no-op.
func ExampleClient_Enqueue_unique() {
	ctx := context.Background()
	client, cleanup := exampleQueueClient()
	defer cleanup()

	params := pgmsg.EnqueueParams{Kind: "reindex", UniqueKey: "reindex:user-42", Delay: time.Minute}
	first, err := client.Enqueue(ctx, "search", params, nil)
	if err != nil {
		log.Fatal(err)
	}
	second, err := client.Enqueue(ctx, "search", params, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.State, first.Duplicate)
	fmt.Println(second.ID == first.ID, second.Duplicate)
	// Output:
	// scheduled false
	// true true
}

// Inspect and requeue the dead-letter jobs of a queue.
func ExampleClient_RequeueDeadJobs() {
	ctx := context.Background()
	client, cleanup := exampleQueueClient()
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

// Tag jobs, record progress and a result, and find them again.
func ExampleClient_ListJobs() {
	ctx := context.Background()
	client, cleanup := exampleQueueClient()
	defer cleanup()

	for _, day := range []string{"2026-11-30", "2026-12-01"} {
		_, err := client.Enqueue(ctx, "reports", pgmsg.EnqueueParams{
			Payload:  []byte(`{"day":"` + day + `"}`),
			Tags:     []string{"customer:42", "daily"},
			Metadata: json.RawMessage(`{"requested_by":"ann"}`),
		}, nil)
		if err != nil {
			log.Fatal(err)
		}
	}
	// A handler (here claimed by hand) reports progress and a result.
	jobs, err := client.ClaimJobs(ctx, "reports", &pgmsg.ClaimJobsOpts{Max: 1})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.SetJobProgress(ctx, jobs[0], map[string]int{"pages": 10}); err != nil {
		log.Fatal(err)
	}
	if err := jobs[0].SetResult(map[string]string{"url": "s3://reports/1.pdf"}); err != nil {
		log.Fatal(err)
	}
	if err := client.Complete(ctx, jobs[0]); err != nil {
		log.Fatal(err)
	}

	found, err := client.ListJobs(ctx, "reports", &pgmsg.ListJobsOpts{Tag: "customer:42"})
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range found {
		fmt.Println(j.State, string(j.Payload), j.Tags, string(j.Progress), string(j.Result))
	}
	// Output:
	// completed {"day":"2026-11-30"} [customer:42 daily] {"pages": 10} {"url": "s3://reports/1.pdf"}
	// available {"day":"2026-12-01"} [customer:42 daily]
}

// Enqueue a report every weekday at 07:00 in Paris; the maintenance leader
// (RunMaintenance, which pgmsg serve runs) enqueues each tick once.
func ExampleClient_AddPeriodicJob() {
	ctx := context.Background()
	client, cleanup := exampleQueueClient()
	defer cleanup()

	if _, err := client.CreateQueue(ctx, "reports", pgmsg.QueueConfig{}); err != nil {
		log.Fatal(err)
	}
	p, err := client.AddPeriodicJob(ctx, pgmsg.PeriodicJob{
		Queue: "reports", Name: "weekday-report", Schedule: "0 7 * * MON-FRI", TimeZone: "Europe/Paris",
		Kind: "report", Payload: []byte(`{"report":"daily"}`),
	})
	if err != nil {
		log.Fatal(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	next := p.NextRunAt.In(paris)
	fmt.Println(p.Name, next.Format("15:04"), next.Weekday() >= time.Monday && next.Weekday() <= time.Friday)

	// The ticks after Friday 2026-12-04, 12:00 in Paris: Monday to Wednesday.
	ticks, err := client.PreviewSchedule(ctx, p.Schedule, p.TimeZone, time.Date(2026, 12, 4, 12, 0, 0, 0, paris), 3)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range ticks {
		fmt.Println(t.In(paris).Format("Mon 2006-01-02 15:04 MST"))
	}
	// Output:
	// weekday-report 07:00 true
	// Mon 2026-12-07 07:00 CET
	// Tue 2026-12-08 07:00 CET
	// Wed 2026-12-09 07:00 CET
}
