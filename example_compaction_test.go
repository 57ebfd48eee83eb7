package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// A compacted topic keeps the latest value of each key (a changelog, a
// table's current state), like Kafka's cleanup.policy=compact: maintenance
// removes older values from full segments, and a record without a value
// (a tombstone) deletes its key.
func ExampleClient_MaintainOnce_compaction() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	_, err := client.CreateTopic(ctx, "user-emails", pgmsg.TopicConfig{
		SegmentRecords: pgmsg.SegmentRecordsMin, // small segments, for the example
		Settings:       map[string]any{"cleanup_policy": "compact", "delete_retention_ms": 0},
	})
	if err != nil {
		log.Fatal(err)
	}
	var recs []*pgmsg.Record
	for i := 0; i < 10; i++ {
		recs = append(recs,
			&pgmsg.Record{Topic: "user-emails", Key: []byte("ada"), Value: fmt.Appendf(nil, "ada%d@example.com", i)},
			&pgmsg.Record{Topic: "user-emails", Key: []byte("bob"), Value: fmt.Appendf(nil, "bob%d@example.com", i)})
	}
	recs = append(recs, &pgmsg.Record{Topic: "user-emails", Key: []byte("bob")}) // bob deleted his account
	for len(recs) < 2*pgmsg.SegmentRecordsMin {
		recs = append(recs, &pgmsg.Record{Topic: "user-emails", Key: []byte("eve"), Value: []byte("eve@example.com")})
	}
	if err := client.Publish(ctx, recs, nil); err != nil {
		log.Fatal(err)
	}
	// pgmsg serve (RunMaintenance) compacts on its own every few seconds.
	res, err := client.MaintainOnce(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("compacted away:", res.RecordsCompacted)

	latest := map[string]string{}
	recs, err = client.Fetch(ctx, "user-emails", 0, 0, 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		if r.Value == nil {
			delete(latest, string(r.Key))
		} else {
			latest[string(r.Key)] = string(r.Value)
		}
	}
	fmt.Println(len(recs), "records left:", latest)
	// Output:
	// compacted away: 16
	// 16 records left: map[ada:ada9@example.com eve:eve@example.com]
}
