package pgmsg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// A batch of three thumbnails with a callback: "album.ready" is enqueued
// once, by the transaction that completes the last of them, with the
// batch's counts in its metadata.
func ExampleClient_EnqueueBatch() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	jobs := []pgmsg.EnqueueParams{{Kind: "thumb"}, {Kind: "thumb"}, {Kind: "thumb"}}
	res, err := client.EnqueueBatch(ctx, "images", jobs, &pgmsg.BatchOpts{
		OnComplete: &pgmsg.BatchCallback{Kind: "album.ready", Queue: "albums", Args: map[string]int{"album": 7}},
		OnDiscard:  &pgmsg.BatchCallback{Kind: "album.failed", Queue: "albums"},
	})
	if err != nil {
		log.Fatal(err)
	}
	for range jobs {
		claimed, err := client.ClaimJobs(ctx, "images", nil)
		if err != nil || len(claimed) != 1 {
			log.Fatal(claimed, err)
		}
		if err := client.Complete(ctx, claimed[0]); err != nil {
			log.Fatal(err)
		}
	}
	b, err := client.GetBatch(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(b.Total, b.Completed, b.FinishedAt != nil, b.DiscardJobID == 0)

	cb, err := client.GetJob(ctx, b.CompleteJobID)
	if err != nil {
		log.Fatal(err)
	}
	var md struct {
		Batch struct {
			Callback  string `json:"callback"`
			Completed int    `json:"completed"`
		} `json:"batch"`
	}
	if err := json.Unmarshal(cb.Metadata, &md); err != nil {
		log.Fatal(err)
	}
	fmt.Println(cb.Queue, cb.Kind, string(cb.Payload), md.Batch.Callback, md.Batch.Completed)
	// Output:
	// 3 3 true true
	// albums album.ready {"album": 7} complete 3
}
