package pgmsg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
)

// Start positions for a new group (ClaimOpts.Start, CreateGroup) and
// targets of ResetGroup. A position may also be an offset ("42") or an
// RFC 3339 timestamp: the first record at or after it.
const (
	PositionEarliest = "earliest"
	PositionLatest   = "latest"
)

// ClaimOpts are options of Claim; nil means defaults.
type ClaimOpts struct {
	// Partition restricts the claim to one partition. Default: any
	// partition with unread records and no live claim, least recently
	// claimed first.
	Partition *int32
	// MaxRecords caps the records of the claim. Default 100.
	MaxRecords int
	// MaxBytes caps the key+value bytes of the claim (at least one record is
	// always returned). Default: no cap.
	MaxBytes int64
	// Lease is how long the claim is held. Default Config.ClaimLease.
	Lease time.Duration
	// Start is where a group that does not exist yet starts: PositionEarliest
	// (default), PositionLatest, an offset or an RFC 3339 timestamp.
	Start string
	// Member names the claimant in group listings. Optional.
	Member string
}

// Claim is a leased, contiguous range of one partition's records for one
// group. Commit it to advance the group; if it is neither committed nor
// released before ExpiresAt, its records are delivered again.
type Claim struct {
	Topic     string
	Group     string
	Partition int32
	// Epoch identifies the claim; Commit, Release and Extend present it.
	Epoch     int64
	ExpiresAt time.Time
	Records   []*Record
}

// NextOffset is the offset after the claim's last record.
func (cl *Claim) NextOffset() int64 {
	return cl.Records[len(cl.Records)-1].Offset + 1
}

// Claim leases the next records of topic for group, and returns them in the
// same round trip. It returns nil, nil when there is nothing to read (and
// then writes nothing). The group is created on first use at opts.Start.
func (c *Client) Claim(ctx context.Context, topic, group string, opts *ClaimOpts) (*Claim, error) {
	return c.ClaimTx(ctx, c.pool, topic, group, opts)
}

// ClaimTx is Claim on exec. Inside a transaction, the claim only exists
// once the transaction commits, and other claimers skip the partition
// meanwhile: see Consumer.ProcessTx.
func (c *Client) ClaimTx(ctx context.Context, exec DBTX, topic, group string, opts *ClaimOpts) (*Claim, error) {
	if err := ValidateName("topic", topic); err != nil {
		return nil, err
	}
	if err := ValidateName("group", group); err != nil {
		return nil, err
	}
	o := ClaimOpts{}
	if opts != nil {
		o = *opts
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = ClaimMaxRecordsDefault
	}
	if o.Lease == 0 {
		o.Lease = c.config.ClaimLease
	}
	if o.Start == "" {
		o.Start = PositionEarliest
	}
	if o.MaxRecords < 1 || o.Lease < 0 || o.MaxBytes < 0 {
		return nil, newError(ErrInvalidArgument, "max records must be >= 1 and lease and max bytes must not be negative")
	}
	params := dbsqlc.GroupClaimParams{
		Topic: topic, GroupName: group, MaxRecords: int32(min(o.MaxRecords, 1<<30)),
		Lease: pgtype.Interval{Microseconds: o.Lease.Microseconds(), Valid: true},
		Start: o.Start,
	}
	if o.Partition != nil {
		params.Partition = pgtype.Int4{Int32: *o.Partition, Valid: true}
	}
	if o.MaxBytes > 0 {
		params.MaxBytes = pgtype.Int8{Int64: o.MaxBytes, Valid: true}
	}
	if o.Member != "" {
		params.Member = pgtype.Text{String: o.Member, Valid: true}
	}
	rows, err := c.queries.GroupClaim(ctx, c.db(exec), params)
	if err != nil {
		return nil, mapError(err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	cl := &Claim{Topic: topic, Group: group, Partition: rows[0].Partition, Epoch: rows[0].ClaimEpoch,
		ExpiresAt: rows[0].ClaimExpiresAt.Time, Records: make([]*Record, len(rows))}
	for i, r := range rows {
		h, err := decodeHeaders(r.Headers)
		if err != nil {
			return nil, err
		}
		cl.Records[i] = &Record{Topic: topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key,
			Value: r.Value, Headers: h, Timestamp: r.Timestamp.Time}
	}
	return cl, nil
}

// Commit advances the group's cursor past the claim and ends it. It fails
// with ErrClaimExpired or ErrClaimNotHeld (writing nothing) when the claim
// is no longer the caller's; its records are then delivered again.
func (c *Client) Commit(ctx context.Context, cl *Claim) error {
	return c.CommitTx(ctx, c.pool, cl)
}

// CommitTx is Commit on exec: commit the cursor in the same transaction as
// the handler's own writes for exactly-once effects inside PostgreSQL.
func (c *Client) CommitTx(ctx context.Context, exec DBTX, cl *Claim) error {
	_, err := c.queries.GroupCommit(ctx, c.db(exec), dbsqlc.GroupCommitParams{
		Topic: cl.Topic, GroupName: cl.Group, Partition: cl.Partition, ClaimEpoch: cl.Epoch,
	})
	return mapError(err)
}

// CommitOffset commits part of a claim: the cursor moves to next (which
// must lie within the claim, or just past it) and the claim ends; records
// from next on are delivered again.
func (c *Client) CommitOffset(ctx context.Context, cl *Claim, next int64) error {
	_, err := c.queries.GroupCommit(ctx, c.db(c.pool), dbsqlc.GroupCommitParams{
		Topic: cl.Topic, GroupName: cl.Group, Partition: cl.Partition, ClaimEpoch: cl.Epoch,
		NextOffset: pgtype.Int8{Int64: next, Valid: true},
	})
	return mapError(err)
}

// Release ends a claim without committing: its records are delivered again
// at once rather than when the lease runs out.
func (c *Client) Release(ctx context.Context, cl *Claim) error {
	return mapError(c.queries.GroupRelease(ctx, c.db(c.pool), dbsqlc.GroupReleaseParams{
		Topic: cl.Topic, GroupName: cl.Group, Partition: cl.Partition, ClaimEpoch: cl.Epoch,
	}))
}

// Extend keeps a claim for lease more from now (database clock), for long
// handlers. It fails like Commit when the claim is lost.
func (c *Client) Extend(ctx context.Context, cl *Claim, lease time.Duration) error {
	if lease <= 0 {
		return newError(ErrInvalidArgument, "lease must be positive, got %s", lease)
	}
	exp, err := c.queries.GroupExtend(ctx, c.db(c.pool), dbsqlc.GroupExtendParams{
		Topic: cl.Topic, GroupName: cl.Group, Partition: cl.Partition, ClaimEpoch: cl.Epoch,
		Lease: pgtype.Interval{Microseconds: lease.Microseconds(), Valid: true},
	})
	if err != nil {
		return mapError(err)
	}
	cl.ExpiresAt = exp.Time
	return nil
}

// ConsumerOpts configure a Consumer; nil means defaults.
type ConsumerOpts struct {
	// Claim options used for every claim.
	Claim ClaimOpts
	// PollInterval overrides Config.PollInterval for this consumer.
	PollInterval time.Duration
}

// Consumer reads one topic as one member of a group: it waits for records
// (woken by notifications, polling as the fallback), claims them and hands
// them to a handler. Several consumers of a group share its partitions:
// each claim goes to one of them.
type Consumer struct {
	client *Client
	topic  string
	group  string
	opts   ConsumerOpts
	wake   <-chan struct{}
	stop   func()
}

// NewConsumer returns a Consumer of topic for group. Close it when done.
func (c *Client) NewConsumer(topic, group string, opts *ConsumerOpts) (*Consumer, error) {
	if err := ValidateName("topic", topic); err != nil {
		return nil, err
	}
	if err := ValidateName("group", group); err != nil {
		return nil, err
	}
	o := ConsumerOpts{}
	if opts != nil {
		o = *opts
	}
	if o.PollInterval == 0 {
		o.PollInterval = c.config.PollInterval
	}
	wake, stop := c.wakeups(topic)
	return &Consumer{client: c, topic: topic, group: group, opts: o, wake: wake, stop: stop}, nil
}

// Close ends the consumer's notification subscription.
func (cn *Consumer) Close() { cn.stop() }

// wait blocks until a notification for the topic, the poll interval, or ctx.
func (cn *Consumer) wait(ctx context.Context) error {
	t := time.NewTimer(cn.opts.PollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-cn.wake:
	case <-t.C:
	}
	return nil
}

// Poll blocks until it has claimed records (or ctx ends).
func (cn *Consumer) Poll(ctx context.Context) (*Claim, error) {
	for {
		cl, err := cn.client.Claim(ctx, cn.topic, cn.group, &cn.opts.Claim)
		if err != nil || cl != nil {
			return cl, err
		}
		if err := cn.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// Run claims records and calls handler with each claim until ctx ends.
// A claim is committed when handler returns nil and released (delivered
// again) when it returns an error. Run returns ctx's error, or the first
// error that is not a handler error or a lost claim.
func (cn *Consumer) Run(ctx context.Context, handler func(ctx context.Context, cl *Claim) error) error {
	for {
		cl, err := cn.Poll(ctx)
		if err != nil {
			return err
		}
		if herr := handler(ctx, cl); herr != nil {
			if err := cn.client.Release(context.WithoutCancel(ctx), cl); err != nil && !isLostClaim(err) {
				return err
			}
			continue
		}
		if err := cn.client.Commit(context.WithoutCancel(ctx), cl); err != nil && !isLostClaim(err) {
			return err
		}
	}
}

func isLostClaim(err error) bool {
	return errors.Is(err, ErrClaimExpired) || errors.Is(err, ErrClaimNotHeld)
}

// processTxLease is the lease of a claim made inside ProcessTx. The claim
// only becomes visible if the transaction commits, and the commit ends it,
// so the lease never outlives the transaction: the row lock is the claim.
const processTxLease = 24 * time.Hour

// ProcessTx claims records and runs handler with them in one transaction
// that also commits the group's cursor: the handler's writes and the
// group's progress commit or roll back together (exactly-once effects
// inside PostgreSQL). It returns false when there was nothing to read, and
// handler's error (after rolling back) when it fails.
func (cn *Consumer) ProcessTx(ctx context.Context, handler func(ctx context.Context, tx pgx.Tx, cl *Claim) error) (bool, error) {
	processed := false
	err := pgx.BeginFunc(ctx, cn.client.pool, func(tx pgx.Tx) error {
		opts := cn.opts.Claim
		opts.Lease = processTxLease
		cl, err := cn.client.ClaimTx(ctx, tx, cn.topic, cn.group, &opts)
		if err != nil || cl == nil {
			return err
		}
		if err := handler(ctx, tx, cl); err != nil {
			return err
		}
		processed = true
		return cn.client.CommitTx(ctx, tx, cl)
	})
	if err != nil {
		return false, err
	}
	return processed, nil
}

// RunTx calls ProcessTx until ctx ends, waiting for records when there are
// none. A handler error rolls back that transaction (the records are
// delivered again) and is returned.
func (cn *Consumer) RunTx(ctx context.Context, handler func(ctx context.Context, tx pgx.Tx, cl *Claim) error) error {
	for {
		ok, err := cn.ProcessTx(ctx, handler)
		if err != nil {
			return fmt.Errorf("pgmsg: RunTx: %w", err)
		}
		if !ok {
			if err := cn.wait(ctx); err != nil {
				return err
			}
		}
	}
}
