package pgmsg

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/logconsumer"
	"github.com/pgmsg/pgmsg/internal/membership"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
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
	// MaxRecords caps the records of the claim. Default 100
	// (ClaimMaxRecordsDefault). A Consumer left at the default grows the
	// cap of its claims while they come back full, doubling it up to
	// ClaimMaxRecordsGrowMax (1,000), and halves it back toward 100 when
	// one comes back a quarter full or less (a backlog, or claims that
	// Config.ConsumerClaimRate spaces, go in fewer, larger claims); one
	// given a MaxRecords keeps exactly that.
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
	// RequireOwner restricts the claim to partitions the group's membership
	// assigned to Member (ErrNotMember if Member is not in the group,
	// ErrNotAssigned for a Partition it does not own). Consumer sets it.
	RequireOwner bool
}

// Claim is a leased, contiguous range of one partition's records for one
// group (pgmsgtype.Claim). Commit it to advance the group; if it is neither
// committed nor released before ExpiresAt, its records are delivered again.
type Claim = pgmsgtype.Claim

// Claim leases the next records of topic for group, and returns them in the
// same round trip. It returns nil, nil when there is nothing to read (and
// then writes nothing). The group is created on first use at opts.Start.
func (c *Client) Claim(ctx context.Context, topic, group string, opts *ClaimOpts) (*Claim, error) {
	// Standalone: the claim commits by itself, without waiting for its WAL
	// flush (a lease lost in a crash is only a redelivery).
	return c.claim(ctx, c.pool, topic, group, opts, true)
}

// ClaimTx is Claim on exec. Inside a transaction, the claim only exists
// once the transaction commits, and other claimers skip the partition
// meanwhile: see Consumer.ProcessTx.
func (c *Client) ClaimTx(ctx context.Context, exec DBTX, topic, group string, opts *ClaimOpts) (*Claim, error) {
	return c.claim(ctx, exec, topic, group, opts, false)
}

func (c *Client) claim(ctx context.Context, exec DBTX, topic, group string, opts *ClaimOpts, async bool) (*Claim, error) {
	params := c.claimParams(topic, group, opts)
	params.Async = async
	return c.reader.Claim(ctx, exec, &params)
}

// sendableClaimNames is sendableNames of a claim's topic and group
// (logread.Config.SendableNames): a call with two strings, not a slice,
// so that a claim allocates nothing for it.
func sendableClaimNames(topic, group string) error {
	return sendableNames("topic", topic, "group", group)
}

// claimParams are the claim opts describe of topic for group, with
// ClaimOpts' defaults applied: their one home, for Client.Claim and
// ClaimTx and for every claim of a Consumer (logconsumer.DB.Params).
// Names are claim_range()'s to refuse (PM003: an unknown topic's name
// through _topic(), an unknown group's through group_create()); Go refuses
// only what cannot be sent (logread.Reader.Claim runs sendableNames).
// claim_range() refuses max records under 1, a lease that is not positive
// (one under 1µs is sent as 0) and negative max bytes (PM004, after a bad
// name's PM003); the direct statements leave those cases to it
// (internal/logread).
func (c *Client) claimParams(topic, group string, opts *ClaimOpts) store.ClaimParams {
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
	return store.ClaimParams{
		Topic: topic, Group: group, Partition: o.Partition, Member: o.Member,
		MaxRecords: limit32(o.MaxRecords), MaxBytes: o.MaxBytes, Lease: o.Lease,
		Start: o.Start, RequireOwner: o.RequireOwner,
	}
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
	return c.reader.Commit(ctx, exec, cl, nil)
}

// CommitOffset commits part of a claim: the cursor moves to next (which
// must lie within the claim, or just past it) and the claim ends; records
// from next on are delivered again.
func (c *Client) CommitOffset(ctx context.Context, cl *Claim, next int64) error {
	return c.reader.Commit(ctx, c.pool, cl, &next)
}

// Release ends a claim without committing: its records are delivered again
// at once rather than when the lease runs out.
func (c *Client) Release(ctx context.Context, cl *Claim) error {
	return c.reader.Release(ctx, c.pool, cl)
}

// Extend keeps a claim for lease more from now (database clock), for long
// handlers. It fails like Commit when the claim is lost.
func (c *Client) Extend(ctx context.Context, cl *Claim, lease time.Duration) error {
	return c.reader.Extend(ctx, c.pool, cl, lease)
}

// Consumer defaults.
const (
	// HeartbeatIntervalDefault is Kafka's heartbeat.interval.ms: members
	// learn of rebalances from the group's notifications, not from their
	// next heartbeat, so the interval only bounds how soon a dead member is
	// noticed after its session (docs/architecture.md).
	HeartbeatIntervalDefault = 3 * time.Second
	SessionTimeoutDefault    = 10 * time.Second
	// ClaimCooldownDefault is ConsumerOpts.ClaimCooldown's default.
	ClaimCooldownDefault = 20 * time.Millisecond
	// ClaimCooldownMax is the longest ConsumerOpts.ClaimCooldown.
	ClaimCooldownMax = time.Minute
	// ClaimCooldownMinRateDefault is ConsumerOpts.ClaimCooldownMinRate's
	// default, in records per second.
	ClaimCooldownMinRateDefault = 3000
)

// ConsumerOpts configure a Consumer; nil means defaults.
type ConsumerOpts struct {
	// Claim options used for every claim (Partition, Member and
	// RequireOwner are set by the consumer).
	Claim ClaimOpts
	// PollInterval overrides Config.PollInterval for this consumer.
	PollInterval time.Duration
	// ClaimCooldown is the least time between the starts of two claims
	// when the second follows a notification (River's FetchCooldown): a
	// consumer notified sooner waits until ClaimCooldown has passed since
	// its previous claim, and the records published meanwhile come in the
	// same claim. A consumer that has been idle for ClaimCooldown claims
	// as soon as it is notified, so a lightly loaded topic's latency is
	// unchanged; under sustained load it trades up to ClaimCooldown of
	// latency for fewer, larger claims (one transaction each), which is
	// what bounds throughput where many groups read a busy topic. A claim
	// that may have left records behind is followed by the next at once.
	// The cooldown holds only a consumer whose claims return at least
	// ClaimCooldownMinRate records a second. When many of the client's
	// consumers are busy, its claim budget (Config.ConsumerClaimRate) may
	// space their claims further. Default ClaimCooldownDefault
	// (20ms); negative: none, claim as soon as notified; at most one
	// minute (docs/benchmarks.md, "Where the time goes").
	ClaimCooldown time.Duration
	// ClaimCooldownMinRate is the rate, in records per second over the
	// consumer's recent claims, below which a notified consumer claims at
	// once whatever ClaimCooldown says: a topic read more slowly gets the
	// lowest latency, and only a consumer busy enough for its claims'
	// cost to matter trades latency for fewer claims. Default
	// ClaimCooldownMinRateDefault (3,000 records/s); negative: the
	// cooldown holds at any rate.
	ClaimCooldownMinRate int
	// MemberID names this member of the group. Default: host-pid-random.
	MemberID string
	// Partitions assigns partitions by hand: the consumer claims only these
	// (of every topic) and takes no part in group balancing. Default: none,
	// partitions are assigned automatically.
	Partitions []int32
	// HeartbeatInterval is how often the member heartbeats. Default 3s.
	// A rebalance that moves a partition of the group (a member joined or
	// left, a hand-over completed) notifies the members, which heartbeat at
	// once and learn their new assignment from that heartbeat, so that
	// hand-overs complete in tens of milliseconds, not seconds. While the
	// group rebalances (this member joined, its assignment changed, or one
	// of its partitions is being handed over) it also heartbeats sooner,
	// from a twentieth of the interval doubling back up to it: what
	// completes a rebalance without notifications (Config.DisableNotify, or
	// a listener that lost its connection).
	HeartbeatInterval time.Duration
	// SessionTimeout is how long the group waits for a heartbeat before it
	// declares the member dead and moves its partitions (database clock):
	// a killed member's partitions move at the first heartbeat of another
	// member after its session ended, within SessionTimeout plus that
	// member's HeartbeatInterval (13s at the defaults). Default 10s.
	SessionTimeout time.Duration
	// OnAssigned is called with partitions newly assigned to this member.
	OnAssigned func(topic string, partitions []int32)
	// OnRevoked is called with partitions being moved to another member:
	// finish (commit) what is in flight for them; no new claims are made.
	OnRevoked func(topic string, partitions []int32)
	// OnLost is called with partitions this member lost without a
	// hand-over: its session expired (it was paused or cut off). Their
	// in-flight claims are fenced: commits fail with ErrClaimNotHeld.
	OnLost func(topic string, partitions []int32)

	// MaxDeliveries is how many times Run hands a record to its handler
	// before setting it aside in the dead-letter topic and moving on
	// (poison records; see "Poison records" in docs/architecture.md).
	// When the handler fails on a claim of several records, they are
	// handed over again one at a time, each at most MaxDeliveries times;
	// a failed claim of one record counts as its first delivery. 0, the
	// default, never sets a record aside: the handler gets the records
	// again, after RedeliveryBackoff, until it succeeds, and the partition
	// waits. That is the safer choice where records must be handled in
	// order or not at all (a ledger, a state machine); set MaxDeliveries
	// where a record may be handled later, by hand, out of order.
	MaxDeliveries int
	// RedeliveryBackoff is how long Run waits before handing records to
	// the handler again after it failed on them; it doubles with each
	// further failure of the same records, up to RedeliveryBackoffMax.
	// The claim is kept (its lease extended) meanwhile. A consumer that
	// reads several partitions and has no MaxDeliveries gives a failed
	// claim back at once instead, so that its other partitions go on.
	// Defaults 100ms and 30s; at most 366 days.
	RedeliveryBackoff    time.Duration
	RedeliveryBackoffMax time.Duration
	// DeadLetterTopic receives the records set aside, in the source
	// record's partition (modulo its partition count), with its key,
	// value, timestamp and headers, plus headers naming where it came
	// from (DeadLetterHeaderTopic ...). It is created on first use with
	// the source topic's partition count. Default "<topic>.dlq".
	DeadLetterTopic string
}

// Consumer reads topics as one member of a group: it waits for records
// (woken by notifications, polling as the fallback), claims them and hands
// them to a handler.
//
// By default it joins the group's membership: partitions are spread evenly
// over live members, stick to their member across rebalances, and move
// when a member leaves (Close) or stops heartbeating; see
// docs/architecture.md for the protocol. With ConsumerOpts.Partitions it
// reads those partitions only and takes no part in balancing.
type Consumer struct {
	// e is the engine (internal/logconsumer): the claim loop, the
	// membership, redelivery and dead letters; it reads through log, the
	// client's engines bound to the group. Both are embedded, not pointed
	// to: a Consumer is one allocation, as it was before the engine moved.
	e        logconsumer.Consumer
	log      logconsumer.DB
	memberID string
}

// NewConsumer returns a member of group reading topic. Close it when done.
func (c *Client) NewConsumer(topic, group string, opts *ConsumerOpts) (*Consumer, error) {
	return c.NewGroupConsumer(group, []string{topic}, opts)
}

// NewGroupConsumer returns a member of group reading several topics.
func (c *Client) NewGroupConsumer(group string, topics []string, opts *ConsumerOpts) (*Consumer, error) {
	// The names are checked here although the SQL API checks them again:
	// a constructor makes no round trip, and a bad name fails it at once.
	if err := ValidateName("group", group); err != nil {
		return nil, err
	}
	if len(topics) == 0 {
		return nil, newError(ErrInvalidArgument, "a consumer needs at least one topic")
	}
	for _, t := range topics {
		if err := ValidateName("topic", t); err != nil {
			return nil, err
		}
	}
	o := ConsumerOpts{}
	if opts != nil {
		o = *opts
	}
	if o.PollInterval == 0 {
		o.PollInterval = c.config.PollInterval
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = HeartbeatIntervalDefault
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = SessionTimeoutDefault
	}
	if o.PollInterval < 0 || o.HeartbeatInterval < 0 || o.SessionTimeout < 0 {
		return nil, newError(ErrInvalidArgument, "poll interval, heartbeat interval and session timeout must not be negative")
	}
	switch {
	case o.ClaimCooldown == 0:
		o.ClaimCooldown = ClaimCooldownDefault
	case o.ClaimCooldown < 0:
		o.ClaimCooldown = 0
	case o.ClaimCooldown > ClaimCooldownMax:
		return nil, newError(ErrInvalidArgument, "claim cooldown must be at most %s (negative: none), got %s", ClaimCooldownMax, o.ClaimCooldown)
	}
	switch {
	case o.ClaimCooldownMinRate == 0:
		o.ClaimCooldownMinRate = ClaimCooldownMinRateDefault
	case o.ClaimCooldownMinRate < 0:
		o.ClaimCooldownMinRate = 0
	}
	if err := o.checkDeadLetters(topics); err != nil {
		return nil, err
	}
	if o.MemberID == "" {
		host, _ := os.Hostname()
		o.MemberID = fmt.Sprintf("%s-%d-%08x", sanitizeMember(host), os.Getpid(), rand.Uint32())
	}
	if err := ValidateName("member", o.MemberID); err != nil {
		return nil, err
	}
	for _, p := range o.Partitions {
		if p < 0 {
			return nil, newError(ErrPartitionOutOfRange, "partition %d out of range", p)
		}
	}
	topics = append([]string(nil), topics...)
	// The claim options' defaults (claimParams) give the engine its lease,
	// caps and start; Member names this consumer. Partition and
	// RequireOwner are set per claim by the engine.
	claimOpts := o.Claim
	claimOpts.Member = o.MemberID
	params := c.claimParams("", group, &claimOpts)
	start := params.Start
	cfg := logconsumer.Config{
		Topics: topics, Group: group, MemberID: o.MemberID, Partitions: o.Partitions, Start: start,
		Lease: params.Lease, MaxRecords: int(params.MaxRecords), MaxBytes: params.MaxBytes, PollInterval: o.PollInterval,
		ClaimCooldown: o.ClaimCooldown, ClaimCooldownMinRate: float64(o.ClaimCooldownMinRate), Pacer: c.claimPacer,
		MaxDeliveries: o.MaxDeliveries, RedeliveryBackoff: o.RedeliveryBackoff,
		RedeliveryBackoffMax: o.RedeliveryBackoffMax, DeadLetterTopic: o.DeadLetterTopic, LeaseMax: durationMax,
		Wake: c.partitionWakeups(), Logger: c.config.Logger,
	}
	if len(o.Partitions) == 0 {
		cfg.Member = membership.Config{
			Store: c.store, Exec: c.pool, Heartbeats: c.heartbeats, Logger: c.config.Logger, Wake: c.partitionWakeups(),
			Topics: topics, Group: group, MemberID: o.MemberID, Start: start,
			HeartbeatInterval: o.HeartbeatInterval, SessionTimeout: o.SessionTimeout,
			OnAssigned: o.OnAssigned, OnRevoked: o.OnRevoked, OnLost: o.OnLost,
		}
	}
	if o.Claim.MaxRecords == 0 {
		cfg.MaxRecordsGrow = ClaimMaxRecordsGrowMax
	}
	cn := &Consumer{memberID: o.MemberID, log: logconsumer.DB{
		Reader: c.reader, Publisher: c.publisher, Store: c.store, Pool: c.pool, Tracer: c.tracer, Params: params,
	}}
	cn.e.Init(&cn.log, cfg)
	return cn, nil
}

func sanitizeMember(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if !isNameChar(ch) {
			b[i] = '-'
		}
	}
	if len(b) == 0 {
		return "member"
	}
	return truncate(string(b), 100)
}

// MemberID is this consumer's member id in the group.
func (cn *Consumer) MemberID() string { return cn.memberID }

// Assignment returns the partitions this member may claim now, per topic
// (the manual partitions, or the current automatic assignment).
func (cn *Consumer) Assignment() map[string][]int32 { return cn.e.Assignment() }

// Close leaves the group (its partitions move to the other members at
// once) and stops heartbeats and notifications. Call it after Run returns.
// A second Close does nothing; Run and Poll after Close fail with ErrClosed.
func (cn *Consumer) Close() { cn.e.Close() }

// Poll blocks until it has claimed records (or ctx ends).
func (cn *Consumer) Poll(ctx context.Context) (*Claim, error) { return cn.e.Poll(ctx, nil) }

// Run claims records and calls handler with each claim until ctx ends.
// While handler runs, the claim's lease is extended; if the claim is lost
// anyway (fenced), handler's ctx is cancelled. A claim is committed when
// handler returns nil. When it returns an error, the claim is kept and its
// records are handed to handler again after ConsumerOpts.RedeliveryBackoff
// (doubling), until it succeeds or, with ConsumerOpts.MaxDeliveries, until
// the records it keeps failing on are set aside in the dead-letter topic
// (committed with the claim); a claim whose partition the group moves
// meanwhile is released to the new owner. The commit of a handled claim
// rides on the next claim, in its transaction, which commits without
// waiting for the WAL flush (as Kafka consumers commit offsets): a
// PostgreSQL crash can lose the last fraction of a second of them, and
// their records are then delivered again, as at-least-once allows. The
// last commit, when Run returns, waits for the flush; so do Client.Commit
// and ProcessTx. Records that ReplayDeadLetters
// published for another group are committed without calling handler.
// Transient database errors (IsRetryable: lost connections,
// deadlocks, timeouts) are logged and retried with backoff. Run returns
// ctx's error, or the first error that is neither transient, a handler
// error nor a lost claim.
func (cn *Consumer) Run(ctx context.Context, handler func(ctx context.Context, cl *Claim) error) error {
	return cn.e.Run(ctx, handler)
}

// ProcessTx claims records and runs handler with them in one transaction
// that also commits the group's cursor: the handler's writes and the
// group's progress commit or roll back together (exactly-once effects
// inside PostgreSQL). It returns false when there was nothing to read, and
// handler's error (after rolling back) when it fails.
func (cn *Consumer) ProcessTx(ctx context.Context, handler func(ctx context.Context, tx pgx.Tx, cl *Claim) error) (bool, error) {
	return cn.e.ProcessTx(ctx, handler)
}

// RunTx calls ProcessTx until ctx ends, waiting for records when there are
// none. A handler error rolls back that transaction (the records are
// delivered again) and is returned.
func (cn *Consumer) RunTx(ctx context.Context, handler func(ctx context.Context, tx pgx.Tx, cl *Claim) error) error {
	return cn.e.RunTx(ctx, handler)
}
