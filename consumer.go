package pgmsg

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/logconsumer"
	"github.com/pgmsg/pgmsg/internal/membership"
	"github.com/pgmsg/pgmsg/internal/notifier"
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
	return c.claimCommit(ctx, exec, topic, group, opts, async, nil)
}

// claimCommit claims, first committing commit (a claim of the same topic
// and group, or nil) in the same statement: one transaction and one WAL
// flush per claim cycle. A commit that fails because the claim was lost
// (ErrClaimExpired, ErrClaimNotHeld) rolls the call back; the claim is then
// made again without it, as Consumer.Run ignores lost claims anyway
// (internal/logread's Reader.Claim, which also reads the records and moves
// past ranges compaction emptied).
func (c *Client) claimCommit(ctx context.Context, exec DBTX, topic, group string, opts *ClaimOpts, async bool, commit *Claim) (cl *Claim, err error) {
	if c.tracer() != nil {
		start := time.Now()
		defer func() { c.traceClaim(ctx, start, topic, group, commit, cl, err) }()
	}
	// Names are claim_range()'s to refuse (PM003: an unknown topic's name
	// through _topic(), an unknown group's through group_create()); the
	// direct statements find no row for a bad name and leave it to
	// claim_range(). Go refuses only what cannot be sent.
	if err := sendableNames("topic", topic, "group", group); err != nil {
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
	// claim_range() refuses max records under 1, a lease that is not
	// positive (one under 1µs is sent as 0) and negative max bytes (PM004,
	// after a bad name's PM003); the direct statements leave those cases
	// to it (internal/logread).
	params := store.ClaimParams{
		Topic: topic, Group: group, Partition: o.Partition, Member: o.Member,
		MaxRecords: limit32(o.MaxRecords), MaxBytes: o.MaxBytes, Lease: o.Lease,
		Start: o.Start, RequireOwner: o.RequireOwner, Async: async,
	}
	if commit != nil {
		params.Commit, params.CommitPartition, params.CommitEpoch = true, commit.Partition, commit.Epoch
	}
	return c.reader.Claim(ctx, exec, &params)
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
	end := c.startSettleSpan(ctx, "commit", cl)
	err := c.reader.Commit(ctx, exec, cl, nil)
	end(err)
	return err
}

// CommitOffset commits part of a claim: the cursor moves to next (which
// must lie within the claim, or just past it) and the claim ends; records
// from next on are delivered again.
func (c *Client) CommitOffset(ctx context.Context, cl *Claim, next int64) error {
	end := c.startSettleSpan(ctx, "commit", cl)
	err := c.reader.Commit(ctx, c.pool, cl, &next)
	end(err)
	return err
}

// Release ends a claim without committing: its records are delivered again
// at once rather than when the lease runs out.
func (c *Client) Release(ctx context.Context, cl *Claim) error {
	end := c.startSettleSpan(ctx, "release", cl)
	err := c.reader.Release(ctx, c.pool, cl)
	end(err)
	return err
}

// Extend keeps a claim for lease more from now (database clock), for long
// handlers. It fails like Commit when the claim is lost.
func (c *Client) Extend(ctx context.Context, cl *Claim, lease time.Duration) error {
	return c.reader.Extend(ctx, c.pool, cl, lease)
}

// Consumer defaults.
const (
	HeartbeatIntervalDefault = time.Second
	SessionTimeoutDefault    = 10 * time.Second
)

// ConsumerOpts configure a Consumer; nil means defaults.
type ConsumerOpts struct {
	// Claim options used for every claim (Partition, Member and
	// RequireOwner are set by the consumer).
	Claim ClaimOpts
	// PollInterval overrides Config.PollInterval for this consumer.
	PollInterval time.Duration
	// MemberID names this member of the group. Default: host-pid-random.
	MemberID string
	// Partitions assigns partitions by hand: the consumer claims only these
	// (of every topic) and takes no part in group balancing. Default: none,
	// partitions are assigned automatically.
	Partitions []int32
	// HeartbeatInterval is how often the member heartbeats. Default 1s.
	// While the group rebalances (this member joined, its assignment
	// changed, or one of its partitions is being handed over) it heartbeats
	// sooner, from a twentieth of the interval doubling back up to it, so
	// that hand-overs complete in tens of milliseconds, not seconds.
	HeartbeatInterval time.Duration
	// SessionTimeout is how long the group waits for a heartbeat before it
	// declares the member dead and moves its partitions (database clock).
	// Default 10s.
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
	client   *Client
	topics   []string
	group    string
	opts     ConsumerOpts
	memberID string
	wake     <-chan struct{} // nil when notifications are disabled
	wakeSub  *notifier.Subscription
	// member is the consumer's membership of its group (heartbeats,
	// assignment, callbacks, leave); nil with manual partitions.
	member *membership.Member
	// sup runs handlers while extending their claims' leases.
	sup logconsumer.Supervisor[*Claim]

	startMu sync.Mutex // guards started and closed
	started bool
	// closed: Close ran; the consumer never starts (heartbeats) again.
	closed bool

	mu   sync.Mutex // guards next
	next int
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
	cn := &Consumer{client: c, topics: append([]string(nil), topics...), group: group, opts: o,
		memberID: o.MemberID, wakeSub: c.partitionWakeups(),
		sup: logconsumer.Supervisor[*Claim]{Extend: c.Extend, IsLost: isLostClaim}}
	if !cn.manual() {
		start := o.Claim.Start
		if start == "" {
			start = PositionEarliest
		}
		cn.member = membership.New(&membership.Config{
			Store: c.store, Exec: c.pool, Logger: c.config.Logger,
			Topics: cn.topics, Group: group, MemberID: o.MemberID, Start: start,
			HeartbeatInterval: o.HeartbeatInterval, SessionTimeout: o.SessionTimeout,
			OnAssigned: o.OnAssigned, OnRevoked: o.OnRevoked, OnLost: o.OnLost,
			OnChange: cn.setWakeKeys,
		})
	}
	if cn.wakeSub != nil {
		cn.wake = cn.wakeSub.C()
		if cn.manual() {
			var keys []string
			for _, t := range cn.topics {
				for _, p := range o.Partitions {
					keys = append(keys, wakeKey(t, p))
				}
			}
			cn.wakeSub.Set(keys...)
		}
	}
	return cn, nil
}

// wakeKey is the notification key of one partition (internal/notifier).
func wakeKey(topic string, partition int32) string {
	return topic + "#" + strconv.Itoa(int(partition))
}

// setWakeKeys subscribes to the wake-ups of the partitions the membership
// gave this consumer, owned (the member's OnChange: called with the
// member's lock held, after its partitions changed).
func (cn *Consumer) setWakeKeys(owned iter.Seq2[string, int32]) {
	if cn.wakeSub == nil {
		return
	}
	var keys []string
	for t, p := range owned {
		keys = append(keys, wakeKey(t, p))
	}
	cn.wakeSub.Set(keys...)
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

func (cn *Consumer) manual() bool { return len(cn.opts.Partitions) > 0 }

// Assignment returns the partitions this member may claim now, per topic
// (the manual partitions, or the current automatic assignment).
func (cn *Consumer) Assignment() map[string][]int32 {
	out := map[string][]int32{}
	if cn.manual() {
		for _, t := range cn.topics {
			out[t] = append([]int32(nil), cn.opts.Partitions...)
		}
		return out
	}
	return cn.member.Assignment()
}

// start joins the group (first heartbeat, synchronously) and starts the
// heartbeat loop. Manual consumers only create the group.
func (cn *Consumer) start(ctx context.Context) error {
	// A failed start (a short ctx on the first Poll, a database hiccup) is
	// not remembered: the next call tries again.
	cn.startMu.Lock()
	defer cn.startMu.Unlock()
	if cn.closed {
		return newError(ErrClosed, "consumer of group %q is closed", cn.group)
	}
	if cn.started {
		return nil
	}
	if cn.manual() {
		for _, t := range cn.topics {
			start := cn.opts.Claim.Start
			if start == "" {
				start = PositionEarliest
			}
			if _, err := cn.client.CreateGroup(ctx, t, cn.group, start); err != nil {
				return err
			}
		}
		cn.started = true
		return nil
	}
	if err := cn.member.Join(ctx); err != nil {
		return err
	}
	cn.started = true
	return nil
}

// claimEnded is called when a claim of this member has been committed or
// released: the member heartbeats now if the claim's partition is being
// handed over (membership.Member.ClaimEnded).
func (cn *Consumer) claimEnded(cl *Claim) {
	if cn.member != nil {
		cn.member.ClaimEnded(cl.Topic, cl.Partition)
	}
}

// Close leaves the group (its partitions move to the other members at
// once) and stops heartbeats and notifications. Call it after Run returns.
// A second Close does nothing; Run and Poll after Close fail with ErrClosed.
func (cn *Consumer) Close() {
	if cn.wakeSub != nil {
		cn.wakeSub.Close()
	}
	cn.startMu.Lock()
	cn.closed = true
	cn.startMu.Unlock()
	if cn.member != nil {
		// Stops the heartbeat loop between heartbeats, then leaves; a
		// member that never joined, or has left, does nothing.
		cn.member.Close()
	}
}

// wait blocks until a notification for a topic, the poll interval, or ctx.
func (cn *Consumer) wait(ctx context.Context) error {
	return cn.waitFor(ctx, cn.opts.PollInterval)
}

// waitFor blocks until a notification for a topic, d, or ctx.
func (cn *Consumer) waitFor(ctx context.Context, d time.Duration) error {
	return logconsumer.Wait(ctx, cn.wake, d)
}

// claimOnce tries each topic (and, manually, each partition) once, in
// rotation, and returns the first claim. commit, if not nil, is a handled
// claim to commit: it rides on the first claim of its topic (one
// transaction for both), or is committed on its own at the end.
func (cn *Consumer) claimOnce(ctx context.Context, commit *Claim) (cl *Claim, err error) {
	if commit != nil {
		defer cn.claimEnded(commit)
	}
	defer func() {
		if commit == nil {
			return
		}
		if cerr := cn.client.Commit(context.WithoutCancel(ctx), commit); cerr != nil && !isLostClaim(cerr) && err == nil {
			if cl != nil {
				_ = cn.client.Release(context.WithoutCancel(ctx), cl)
			}
			cl, err = nil, cerr
		}
	}()
	claim := func(topic string, opts *ClaimOpts) (*Claim, error) {
		if commit == nil || commit.Topic != topic {
			return cn.client.Claim(ctx, topic, cn.group, opts)
		}
		cl, err := cn.client.claimCommit(ctx, cn.client.pool, topic, cn.group, opts, true, commit)
		if err == nil {
			commit = nil
		}
		return cl, err
	}
	cn.mu.Lock()
	start := cn.next
	cn.next++
	cn.mu.Unlock()
	for i := range cn.topics {
		topic := cn.topics[(start+i)%len(cn.topics)]
		opts := cn.opts.Claim
		opts.Member = cn.memberID
		if cn.manual() {
			for j := range cn.opts.Partitions {
				p := cn.opts.Partitions[(start+j)%len(cn.opts.Partitions)]
				opts.Partition = &p
				cl, err := claim(topic, &opts)
				if err != nil || cl != nil {
					return cl, err
				}
			}
			continue
		}
		n, only := cn.member.Count(topic)
		if n == 0 {
			continue
		}
		opts.RequireOwner = true
		if n == 1 {
			// Name the partition: the claim then reads one cursor row, not
			// every row of the group (which matters while a long snapshot
			// keeps their old versions from being pruned).
			opts.Partition = &only
		}
		cl, err := claim(topic, &opts)
		if errors.Is(err, ErrNotMember) || errors.Is(err, ErrNotAssigned) {
			// Our session expired, or the partition moved since our last
			// heartbeat: learn the assignment at the next heartbeat.
			cn.member.HeartbeatNow()
			continue
		}
		if err != nil || cl != nil {
			return cl, err
		}
	}
	return nil, nil
}

// Poll blocks until it has claimed records (or ctx ends).
func (cn *Consumer) Poll(ctx context.Context) (*Claim, error) {
	return cn.poll(ctx, nil)
}

// poll is Poll, committing commit (if not nil) first or along with the
// first claim.
func (cn *Consumer) poll(ctx context.Context, commit *Claim) (*Claim, error) {
	if err := cn.start(ctx); err != nil {
		if commit != nil {
			if cerr := cn.client.Commit(context.WithoutCancel(ctx), commit); cerr != nil && !isLostClaim(cerr) {
				return nil, cerr
			}
		}
		return nil, err
	}
	if commit != nil && !cn.mayHaveMore(commit) {
		// The handled claim took everything its partition had: a claim sent
		// now would most likely find nothing and only carry the commit.
		// Wait for a wake-up first (at most
		// logconsumer.CommitLingerMax) and send the commit with the claim
		// that follows it: one call per claim cycle instead of two. The
		// handled claim stays uncommitted a little longer; its lease is
		// far longer, and a crash meanwhile only delivers its records
		// again (at-least-once).
		if err := cn.waitFor(ctx, cn.commitLinger(commit)); err != nil {
			if cerr := cn.client.Commit(context.WithoutCancel(ctx), commit); cerr != nil && !isLostClaim(cerr) {
				return nil, cerr
			}
			return nil, err
		}
	}
	for {
		cl, err := cn.claimOnce(ctx, commit)
		commit = nil
		if err != nil || cl != nil {
			return cl, err
		}
		if err := cn.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// commitLinger is how long Run may hold cl's commit (logconsumer.CommitLinger).
func (cn *Consumer) commitLinger(cl *Claim) time.Duration {
	return logconsumer.CommitLinger(cn.opts.PollInterval, cl.ExpiresAt)
}

// mayHaveMore reports whether records may have been left behind when cl
// was claimed: it is as large as the claim options allow (or was cut by
// bytes, which cannot be told apart).
func (cn *Consumer) mayHaveMore(cl *Claim) bool {
	maxRecords := cn.opts.Claim.MaxRecords
	if maxRecords == 0 {
		maxRecords = ClaimMaxRecordsDefault
	}
	return logconsumer.MayHaveMore(len(cl.Records), maxRecords, cn.opts.Claim.MaxBytes)
}

// Run claims records and calls handler with each claim until ctx ends.
// While handler runs, the claim's lease is extended; if the claim is lost
// anyway (fenced), handler's ctx is cancelled. A claim is committed when
// handler returns nil. When it returns an error, the claim is kept and its
// records are handed to handler again after ConsumerOpts.RedeliveryBackoff
// (doubling), until it succeeds or, with ConsumerOpts.MaxDeliveries, until
// the records it keeps failing on are set aside in the dead-letter topic
// (committed with the claim); a claim whose partition the group moves
// meanwhile is released to the new owner. Records that ReplayDeadLetters
// published for another group are committed without calling handler.
// Transient database errors (IsRetryable: lost connections,
// deadlocks, timeouts) are logged and retried with backoff. Run returns
// ctx's error, or the first error that is neither transient, a handler
// error nor a lost claim.
func (cn *Consumer) Run(ctx context.Context, handler func(ctx context.Context, cl *Claim) error) error {
	backoff := 0 * time.Millisecond
	// done is the last claim handled and not yet committed: its commit
	// rides on the next claim (one transaction for both).
	var done *Claim
	defer func() {
		if done != nil {
			if err := cn.client.Commit(context.WithoutCancel(ctx), done); err != nil && !isLostClaim(err) {
				cn.client.config.Logger.Warn("pgmsg: consumer could not commit its last claim (its records will be delivered again)",
					"group", cn.group, "member", cn.memberID, "error", err)
			}
		}
	}()
	for {
		var err error
		done, err = cn.runOnce(ctx, handler, done)
		if err == nil {
			backoff = 0
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !IsRetryable(err) {
			return err
		}
		backoff = logconsumer.RetryBackoff(backoff)
		cn.client.config.Logger.Warn("pgmsg: consumer retrying after a transient error", "group", cn.group,
			"member", cn.memberID, "backoff", backoff, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
}

// runOnce commits done (the previous claim, if any) along with polling the
// next claim, handles that claim, and returns it to be committed, or
// releases it when the handler fails.
func (cn *Consumer) runOnce(ctx context.Context, handler func(ctx context.Context, cl *Claim) error, done *Claim) (*Claim, error) {
	cl, err := cn.poll(ctx, done)
	if err != nil {
		return nil, err
	}
	mine := cn.replayedForUs(cl)
	if mine == nil {
		return cl, nil // only records replayed for other groups
	}
	if herr := cn.handle(ctx, mine, handler); herr != nil {
		return cn.redeliver(ctx, cl, mine, handler, herr)
	}
	return cl, nil
}

// release gives cl back (its records are delivered again at once).
func (cn *Consumer) release(ctx context.Context, cl *Claim) error {
	defer cn.claimEnded(cl)
	if err := cn.client.Release(context.WithoutCancel(ctx), cl); err != nil && !isLostClaim(err) {
		return err
	}
	return nil
}

// handle runs handler while extending the claim every third of its lease,
// cancelling its ctx if the claim is lost (logconsumer.Supervisor.Handle).
func (cn *Consumer) handle(ctx context.Context, cl *Claim, handler func(ctx context.Context, cl *Claim) error) error {
	lease := cn.opts.Claim.Lease
	if lease == 0 {
		lease = cn.client.config.ClaimLease
	}
	return cn.sup.Handle(ctx, cl, lease, func(hctx context.Context, cl *Claim) error {
		sctx, end := cn.client.startProcessSpan(hctx, cl)
		err := handler(sctx, cl)
		end(err)
		return err
	})
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
	if err := cn.start(ctx); err != nil {
		return false, err
	}
	err := pgx.BeginFunc(ctx, cn.client.pool, func(tx pgx.Tx) error {
		cl, err := cn.claimOnceTx(ctx, tx)
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

// claimOnceTx is claimOnce inside tx, with the long in-transaction lease.
func (cn *Consumer) claimOnceTx(ctx context.Context, tx pgx.Tx) (*Claim, error) {
	for _, topic := range cn.topics {
		opts := cn.opts.Claim
		opts.Lease = processTxLease
		opts.Member = cn.memberID
		if cn.manual() {
			for _, p := range cn.opts.Partitions {
				p := p
				opts.Partition = &p
				cl, err := cn.client.ClaimTx(ctx, tx, topic, cn.group, &opts)
				if err != nil || cl != nil {
					return cl, err
				}
			}
			continue
		}
		opts.RequireOwner = true
		cl, err := cn.client.ClaimTx(ctx, tx, topic, cn.group, &opts)
		if err != nil || cl != nil {
			return cl, err
		}
	}
	return nil, nil
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
