package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Enqueue a job in the transaction that creates what it works on: a
// worker never sees a job whose user was rolled back, and no user is
// created without its welcome email.
func ExampleClient_EnqueueTx() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	signUp := func(email string, fail bool) error {
		tx, err := client.Pool().Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) // a no-op after Commit
		// ... INSERT INTO users ... on tx ...
		params := pgmsg.EnqueueParams{Kind: "welcome", Payload: []byte(email)}
		if _, err := client.EnqueueTx(ctx, tx, "emails", params, nil); err != nil {
			return err
		}
		if fail {
			return errors.New("email already registered") // rolled back: no job
		}
		return tx.Commit(ctx)
	}
	fmt.Println(signUp("ada@example.com", false))
	fmt.Println(signUp("ada@example.com", true))

	st, err := client.QueueStats(ctx, "emails")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("jobs available:", st.Available)
	// Output:
	// <nil>
	// email already registered
	// jobs available: 1
}
