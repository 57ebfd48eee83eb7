package pgmsg

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/logpublish"
)

// PublishOpts are per-call options of Publish; nil means defaults.
type PublishOpts struct {
	// ManualPartition publishes each record to its Record.Partition instead
	// of choosing by key. Default false.
	ManualPartition bool
}

// Publish appends records (each naming its Topic) atomically: all of them
// are committed, or none is and no offset is consumed. On success each
// record's Partition, Offset and Timestamp are set, as stored: a Timestamp
// given is truncated to the microsecond (PostgreSQL's precision), and a
// zero one becomes the publish time. A record's partition is
// Record.Partition under ManualPartition, else the Kafka-compatible hash of
// its key, else one partition of its topic shared by all unkeyed records
// of the call, chosen at random among those this client is not publishing
// to at the moment, or, while it is publishing to 4 partitions of the
// topic, among those 4. Calls to one partition that wait for another call
// of the client to it are sent together, in one statement, when it ends
// (each call still all or none, its records contiguous).
func (c *Client) Publish(ctx context.Context, records []*Record, opts *PublishOpts) (err error) {
	_, err = c.publisher.Publish(ctx, records, opts != nil && opts.ManualPartition, logpublish.Idempotence{})
	return err
}

// PublishIdempotent is Publish as producer producerID (1 to 200 bytes, for
// example a UUID chosen once per producer) with the records numbered from
// sequence, in the order they are stored: by partition, then in the
// order given. Sent again with the same records and sequence, after an
// error that left the outcome unknown (a connection lost during the
// commit), it writes nothing and reports the stored offsets, timestamps
// and duplicate true: the records are stored once. Unkeyed records go to
// a partition drawn from producerID and sequence, the same on each retry.
// Sequences must grow per partition (the next call's sequence is this
// one's plus len(records)); a call that overlaps, or comes before, what
// the producer stored on a partition fails with ErrOutOfOrderSequence.
// Gaps are allowed. docs/sql-api.md (publish_idempotent) has the rules.
func (c *Client) PublishIdempotent(ctx context.Context, producerID string, sequence int64, records []*Record, opts *PublishOpts) (duplicate bool, err error) {
	if producerID == "" {
		// The SQL API checks the rest (length, sequence range).
		return false, newError(ErrInvalidArgument, "producer id must be 1 to 200 bytes")
	}
	return c.publisher.Publish(ctx, records, opts != nil && opts.ManualPartition,
		logpublish.Idempotence{ProducerID: producerID, Sequence: sequence})
}

// PublishTx is Publish inside the caller's transaction: the transactional
// outbox. The records become visible if and only if tx commits. Until then
// tx holds the row lock of each partition written, so other publishers to
// those partitions wait: keep such transactions short.
func (c *Client) PublishTx(ctx context.Context, tx pgx.Tx, records []*Record, opts *PublishOpts) (err error) {
	return c.publisher.PublishTx(ctx, tx, records, opts != nil && opts.ManualPartition)
}
