package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"
	"sync"
	"time"

	"github.com/pgmsg/pgmsg"
)

// Enqueue jobs and run them with a worker pool.
func ExampleClient_Work() {
	ctx := context.Background()
	client, cleanup := exampleClient()
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
