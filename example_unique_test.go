package pgmsg_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/pgmsg/pgmsg"
)

// A unique key makes a second enqueue of a live job a no-op.
func ExampleClient_Enqueue_unique() {
	ctx := context.Background()
	client, cleanup := exampleClient()
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
