package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg"
)

// Read replicas take the reads of claimed records off the primary: a
// claim is made on the primary, its records are read from a streaming
// replica that has replayed them, else from the primary.
func ExampleConfig_readReplicas() {
	ctx := context.Background()
	primary, schema, drop := exampleDB()
	defer drop()
	// A pool on a streaming replica. Here a second pool on the primary
	// stands in for one: pgmsg sees that it is not in recovery, so it does
	// not trust it and reads from the primary instead.
	replica, err := pgxpool.NewWithConfig(ctx, primary.Config())
	if err != nil {
		log.Fatal(err)
	}
	defer replica.Close()

	client, err := pgmsg.NewClient(primary, &pgmsg.Config{Schema: schema, ReadReplicas: []*pgxpool.Pool{replica}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	if _, err := client.CreateTopic(ctx, "views", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	recs := []*pgmsg.Record{{Topic: "views", Value: []byte("1")}, {Topic: "views", Value: []byte("2")}}
	if err := client.Publish(ctx, recs, nil); err != nil {
		log.Fatal(err)
	}
	claim, err := client.Claim(ctx, "views", "stats", nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Commit(ctx, claim); err != nil {
		log.Fatal(err)
	}
	// The counters pgmsgprom exports: with a real replica, Records grows;
	// here every read fell back to the primary.
	st := client.ReplicaStats()
	r := st.Replicas[0]
	fmt.Println("replica: records", r.Records, "fallbacks", r.Fallbacks)
	fmt.Println("why:", r.LastError)
	fmt.Println("primary: records", st.PrimaryRecords)
	// Output:
	// replica: records 0 fallbacks 1
	// why: replica is not in recovery (promoted?)
	// primary: records 2
}
