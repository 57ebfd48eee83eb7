// Package kafkaclient carries who sent a Kafka request (the client.id of
// its header and the connection's remote address) in a context, from the
// listener (internal/kafkasrv) to the group coordinator
// (internal/kafkagroup), which shows them in DescribeGroups. Neither of
// those imports the other; both import this.
package kafkaclient

import "context"

// Client is the sender of a request.
type Client struct {
	// ID is the request header's client.id ("" when null).
	ID string
	// Host is the connection's remote address, as Kafka shows it
	// ("/127.0.0.1:54321" in Kafka; here whatever the listener puts).
	Host string
}

type key struct{}

// With returns ctx carrying c.
func With(ctx context.Context, c Client) context.Context {
	return context.WithValue(ctx, key{}, c)
}

// From returns the client ctx carries, the zero Client when none.
func From(ctx context.Context) Client {
	c, _ := ctx.Value(key{}).(Client)
	return c
}
