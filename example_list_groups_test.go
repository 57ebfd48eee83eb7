package pgmsg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Lag per group and partition: how far each group is behind the end of
// the topic (what pgmsgprom exports and alerts watch).
func ExampleClient_ListGroups() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "logins", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	var recs []*pgmsg.Record
	for i := 0; i < 5; i++ {
		recs = append(recs, &pgmsg.Record{Topic: "logins", Value: []byte("login")})
	}
	if err := client.Publish(ctx, recs, nil); err != nil {
		log.Fatal(err)
	}
	// "fraud" reads 3 records; "metrics" starts at the end.
	claim, err := client.Claim(ctx, "logins", "fraud", &pgmsg.ClaimOpts{MaxRecords: 3})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Commit(ctx, claim); err != nil {
		log.Fatal(err)
	}
	if _, err := client.CreateGroup(ctx, "logins", "metrics", pgmsg.PositionLatest); err != nil {
		log.Fatal(err)
	}
	groups, err := client.ListGroups(ctx, "logins", "")
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range groups {
		fmt.Printf("%s partition %d: next %d of %d, lag %d\n", g.Group, g.Partition, g.NextOffset, g.EndOffset, g.Lag)
	}
	// Output:
	// fraud partition 0: next 3 of 5, lag 2
	// metrics partition 0: next 5 of 5, lag 0
}
