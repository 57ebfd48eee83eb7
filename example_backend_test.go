package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Code written against pgmsg.Backend runs on PostgreSQL (NewBackend) and on
// Kafka (package pgmsgkafka) alike: moving is a change of constructor.
func ExampleNewBackend() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	backend := pgmsg.NewBackend(client) // or pgmsgkafka.New(&pgmsgkafka.Config{...})
	defer backend.Close()

	if _, err := backend.CreateTopic(ctx, "audit-log", pgmsg.TopicConfig{Partitions: 2}); err != nil {
		log.Fatal(err)
	}
	rec := &pgmsg.Record{Topic: "audit-log", Key: []byte("user-1"), Value: []byte("logged in")}
	if err := backend.Publish(ctx, []*pgmsg.Record{rec}, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Println("partition", rec.Partition, "offset", rec.Offset)
	// Output:
	// partition 0 offset 0
}
