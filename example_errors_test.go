package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// Every error pgmsg returns for bad input or a lost claim matches a
// sentinel with errors.Is and carries a stable code, the same one the SQL
// API raises as SQLSTATE and the HTTP API returns.
func ExampleErrorCode() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	if _, err := client.CreateTopic(ctx, "audit", pgmsg.TopicConfig{}); err != nil {
		log.Fatal(err)
	}
	_, err := client.CreateTopic(ctx, "audit", pgmsg.TopicConfig{})
	fmt.Println(errors.Is(err, pgmsg.ErrTopicExists), pgmsg.ErrorCode(err), pgmsg.IsRetryable(err))

	err = client.Publish(ctx, []*pgmsg.Record{{Topic: "no-such-topic", Value: []byte("x")}}, nil)
	fmt.Println(errors.Is(err, pgmsg.ErrUnknownTopic), pgmsg.ErrorCode(err))
	// Output:
	// true PM002 false
	// true PM001
}
