// Package pgmsg provides Kafka-style logs and a job queue on PostgreSQL.
//
// Everything lives in one schema (default "pgmsg") created by
// [github.com/pgmsg/pgmsg/pgmsgmigrate] or `pgmsg migrate up`, and every
// operation is a SQL function there (docs/sql-api.md): this package calls
// the same functions, so psql, psycopg or node-postgres can do everything
// it does. A [Client] wraps a pgx pool that the caller owns.
//
// # The log
//
// A topic has partitions; each partition is an append-only sequence of
// records with gapless offsets, strictly increasing in commit order.
// [Client.Publish] appends records atomically; [Client.PublishTx] does it in
// the caller's transaction (the transactional outbox: records appear iff
// the caller commits). A record's partition is the Kafka-compatible hash of
// its key ([PartitionForKey]) unless given. A [Producer] batches records of
// many goroutines into few transactions.
//
// Consumer groups read at their own pace with one durable cursor per
// partition. [Client.Claim] leases the next records of a partition to one
// member and returns them in the same round trip; [Client.Commit] advances
// the cursor; a claim not committed before its lease ends is delivered
// again (at-least-once), and a late commit is fenced with [ErrClaimNotHeld].
// A [Consumer] joins the group's membership: partitions are spread evenly
// and stickily over live members, move when a member leaves or stops
// heartbeating, and [Consumer.ProcessTx] commits the cursor in the same
// transaction as the handler's writes (exactly-once effects in PostgreSQL).
//
// # The queue
//
// [Client.Enqueue] adds jobs to a named queue; [Client.Work] runs them
// with a worker pool that claims in batches with FOR UPDATE SKIP LOCKED,
// retries failures with backoff, and moves jobs to an archive or, after
// their last attempt, to dead-letter.
//
// # Operations
//
// [Client.RunMaintenance] elects one leader per schema that drops segments
// past retention (never DELETE), expires abandoned groups, compacts
// compacted topics, rescues expired job leases and prunes the archive.
// [github.com/pgmsg/pgmsg/pgmsgprom] exports the state to Prometheus.
//
// # Errors
//
// Errors for bad input and lost claims match a sentinel (ErrUnknownTopic,
// ErrRecordTooLarge, ErrClaimExpired, ...) with errors.Is and carry a
// stable code ([ErrorCode]); [IsRetryable] tells transient failures apart.
package pgmsg
