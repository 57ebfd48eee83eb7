package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg"
)

// The transactional outbox without an outbox table: the event is
// published in the transaction that changes the application's data, so
// it exists if and only if the change commits.
func ExampleClient_PublishTx() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "order-events", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	placeOrder := func(id int, commit bool) error {
		return pgx.BeginFunc(ctx, client.Pool(), func(tx pgx.Tx) error {
			// The application's own write (a temporary table stands in for it).
			if _, err := tx.Exec(ctx, "CREATE TEMP TABLE IF NOT EXISTS orders (id int) ON COMMIT DROP"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO pg_temp.orders VALUES ($1)", id); err != nil {
				return err
			}
			event := &pgmsg.Record{Topic: "order-events", Value: fmt.Appendf(nil, `{"order":%d}`, id)}
			if err := client.PublishTx(ctx, tx, []*pgmsg.Record{event}, nil); err != nil {
				return err
			}
			if !commit {
				return fmt.Errorf("order %d: payment refused", id) // rolls back order and event
			}
			return nil
		})
	}
	fmt.Println(placeOrder(1, true))
	fmt.Println(placeOrder(2, false))

	recs, err := client.Fetch(ctx, "order-events", 0, 0, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		fmt.Printf("event %s\n", r.Value)
	}
	// Output:
	// <nil>
	// order 2: payment refused
	// event {"order":1}
}
