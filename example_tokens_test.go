package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/pgmsg/pgmsg"
)

// API tokens for the HTTP server (pgmsg serve): each scope allows one kind
// of operation on the topics or queues whose names match a pattern, and
// only the secret's hash is stored.
func ExampleClient_CreateToken() {
	ctx := context.Background()
	client, cleanup := exampleClient()
	defer cleanup()

	secret, tok, err := client.CreateToken(ctx, "billing-service", []string{"publish:billing.*", "enqueue:invoices"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tok.Name, tok.Scopes) // hand secret to the service once; it is not shown again

	// What the server does with a request's bearer token.
	got, err := client.VerifyToken(ctx, secret)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("publish to billing.events:", got.Allows(pgmsg.ScopePublish, "billing.events"))
	fmt.Println("publish to hr.events:", got.Allows(pgmsg.ScopePublish, "hr.events"))
	fmt.Println("enqueue to invoices:", got.Allows(pgmsg.ScopeEnqueue, "invoices"))

	if err := client.RevokeToken(ctx, tok.ID); err != nil {
		log.Fatal(err)
	}
	_, err = client.VerifyToken(ctx, secret)
	fmt.Println("after revoke:", pgmsg.ErrorCode(err), errors.Is(err, pgmsg.ErrInvalidToken))
	// Output:
	// billing-service [publish:billing.* enqueue:invoices]
	// publish to billing.events: true
	// publish to hr.events: false
	// enqueue to invoices: true
	// after revoke: PMA02 true
}
