package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg"
)

// Process records and write their effects in the same transaction as the
// group's commit: exactly-once effects inside PostgreSQL.
func ExampleConsumer_ProcessTx() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "payments", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	if err := client.Publish(ctx, []*pgmsg.Record{{Topic: "payments", Value: []byte("42.00")}}, nil); err != nil {
		log.Fatal(err)
	}
	consumer, err := client.NewConsumer("payments", "ledger", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	processed, err := consumer.ProcessTx(ctx, func(ctx context.Context, tx pgx.Tx, claim *pgmsg.Claim) error {
		// INSERT INTO ledger ... using tx: commits with the cursor, or not at all.
		fmt.Printf("booking %s from offset %d\n", claim.Records[0].Value, claim.Records[0].Offset)
		return nil
	})
	fmt.Println(processed, err)
	// Output:
	// booking 42.00 from offset 0
	// true <nil>
}
