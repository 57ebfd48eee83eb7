package pgmsg

import (
	"context"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// MinInsyncReplicas returns the schema's min_insync_replicas: 1 (the
// default) when writes are not checked, 2 when a write PostgreSQL would
// commit without waiting for a synchronous standby is refused with
// ErrNotEnoughReplicas. The schema's owner and admin role may read it.
func (c *Client) MinInsyncReplicas(ctx context.Context) (int, error) {
	return c.store.MinInsyncReplicas(ctx, c.pool)
}

// SetMinInsyncReplicas sets the schema's min_insync_replicas, for every
// client of the schema, as Kafka's min.insync.replicas with acks=all: at 2,
// publishes (Publish, PublishTx, the SQL API's publish, the Kafka
// listener's Produce), idempotent producer state, enqueues, job
// completions and cancels and offset commits are refused with
// ErrNotEnoughReplicas, nothing written, unless the session's
// synchronous_commit is on, remote_write or remote_apply and the server's
// synchronous_standby_names is not empty. 1 turns the guard off. It fails
// with ErrInvalidArgument for any other n. Only the schema's owner may set
// it; it waits for the writes in flight to the guarded tables.
// docs/operations.md ("Refusing writes without a synchronous standby")
// says what it gives and its window.
func (c *Client) SetMinInsyncReplicas(ctx context.Context, n int) error {
	if n != 1 && n != 2 {
		return errs.New(errs.InvalidArgument, "min_insync_replicas must be 1 (no guard) or 2 (writes need a synchronous standby), got %d", n)
	}
	return c.store.MinInsyncReplicasSet(ctx, c.pool, n)
}
