package logconsumer

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/deadletter"
	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/membership"
	"github.com/pgmsg/pgmsg/internal/notifier"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// AnyPartition, as the partition of Log.Claim and Log.ClaimTx, lets the
// claim take any partition the claim options allow.
const AnyPartition = -1

// ProcessTxLease is the lease of a claim made inside ProcessTx. The claim
// only becomes visible if the transaction commits, and the commit ends it,
// so the lease never outlives the transaction: the row lock is the claim.
const ProcessTxLease = 24 * time.Hour

// Log is what a Consumer needs of the log it reads, bound to the
// consumer's group and claim options (member name, max records and
// bytes, lease, start); DB implements it. Errors are the
// library's (internal/errs sentinels, mapped database errors).
type Log interface {
	// Claim claims the next records of topic, at most maxRecords of them,
	// of partition only unless it is AnyPartition, of partitions the
	// membership assigned to the member only when requireOwner; commit,
	// when not nil, is a claim of the same topic to commit in the same
	// statement. nil, nil: nothing to read.
	Claim(ctx context.Context, topic string, partition int32, requireOwner bool, maxRecords int, commit *pgmsgtype.Claim) (*pgmsgtype.Claim, error)
	// ClaimTx is Claim on tx, with lease, and without a commit.
	ClaimTx(ctx context.Context, tx pgx.Tx, topic string, partition int32, requireOwner bool, lease time.Duration) (*pgmsgtype.Claim, error)
	// Commit, CommitTx, Release and Extend settle cl as the Client's
	// methods of these names do.
	Commit(ctx context.Context, cl *pgmsgtype.Claim) error
	CommitTx(ctx context.Context, tx pgx.Tx, cl *pgmsgtype.Claim) error
	Release(ctx context.Context, cl *pgmsgtype.Claim) error
	Extend(ctx context.Context, cl *pgmsgtype.Claim, lease time.Duration) error
	// CreateGroup creates the group on topic at start unless it exists
	// (a consumer of manual partitions has no membership to do it).
	CreateGroup(ctx context.Context, topic, start string) error
	// BeginFunc runs fn in a transaction of its own, committed when fn
	// returns nil.
	BeginFunc(ctx context.Context, fn func(tx pgx.Tx) error) error
	// DeadLetterPartitions creates dlq, the dead-letter topic of topic,
	// unless it exists, and returns its partition count.
	DeadLetterPartitions(ctx context.Context, dlq, topic string) (int, error)
	// PublishTx publishes recs (each to its own partition) on tx.
	PublishTx(ctx context.Context, tx pgx.Tx, recs []*pgmsgtype.Record) error
	// StartProcessSpan starts the span of handling cl; the returned
	// context carries it, end records the handler's outcome.
	StartProcessSpan(ctx context.Context, cl *pgmsgtype.Claim) (_ context.Context, end func(error))
}

// Handler handles one claim (Consumer.Run's handler).
type Handler func(ctx context.Context, cl *pgmsgtype.Claim) error

// TxHandler handles one claim in the transaction that commits it
// (Consumer.ProcessTx's handler).
type TxHandler func(ctx context.Context, tx pgx.Tx, cl *pgmsgtype.Claim) error

// Config is a Consumer's settings, all set and checked (the root fills in
// defaults; see pgmsg.ConsumerOpts).
type Config struct {
	Topics   []string
	Group    string
	MemberID string
	// Partitions are the manual partitions (of every topic); none means
	// the membership Member assigns them.
	Partitions []int32
	// Member configures the group membership (unused with manual
	// partitions). The Consumer sets its OnChange.
	Member membership.Config
	// Start is the position a manual consumer's group starts at.
	Start string
	// Lease is a claim's lease; MaxRecords and MaxBytes (0: no cap) the
	// claim options' caps, for MayHaveMore. MaxRecordsGrow, when above
	// MaxRecords, lets the cap of Run's and Poll's claims grow: it doubles
	// up to MaxRecordsGrow while claims come back full and halves back
	// toward MaxRecords when one comes back a quarter full or less (the
	// default cap; pgmsg.ClaimMaxRecordsGrowMax). Otherwise the cap is
	// MaxRecords.
	Lease          time.Duration
	MaxRecords     int
	MaxRecordsGrow int
	MaxBytes       int64
	PollInterval   time.Duration
	// ClaimCooldown is the least time between the starts of two claims
	// when the second follows a wake-up (pgmsg.ConsumerOpts.ClaimCooldown;
	// 0: none).
	ClaimCooldown time.Duration
	// ClaimCooldownMinRate is the records per second the consumer's claims
	// must be returning for ClaimCooldown to hold a wake-up
	// (pgmsg.ConsumerOpts.ClaimCooldownMinRate; 0: at any rate).
	ClaimCooldownMinRate float64
	// Pacer is the claim budget the client's consumers share
	// (pgmsg.Config.ConsumerClaimRate; nil: none): it can hold a wake-up
	// longer than ClaimCooldown, at any rate.
	Pacer *ClaimPacer
	// MaxDeliveries, RedeliveryBackoff, RedeliveryBackoffMax and
	// DeadLetterTopic are pgmsg.ConsumerOpts's; LeaseMax bounds a lease
	// extended over a redelivery backoff.
	MaxDeliveries        int
	RedeliveryBackoff    time.Duration
	RedeliveryBackoffMax time.Duration
	DeadLetterTopic      string
	LeaseMax             time.Duration
	// Wake is the consumer's subscription to wake-ups (nil: notifications
	// are off).
	Wake   *notifier.Subscription
	Logger *slog.Logger
}

// Consumer is the engine behind pgmsg.Consumer: one member of a group
// claiming, handling and committing the records of its topics. Its zero
// value is ready for Init.
type Consumer struct {
	log  Log
	cfg  Config
	wake <-chan struct{} // nil when notifications are disabled
	// member is the consumer's membership of its group (heartbeats,
	// assignment, callbacks, leave); nil with manual partitions.
	member *membership.Member
	// sup runs handlers while extending their claims' leases.
	sup Supervisor[*pgmsgtype.Claim]

	startMu sync.Mutex // guards started and closed
	started bool
	// closed: Close ran; the consumer never starts (heartbeats) again.
	closed bool

	mu   sync.Mutex // guards next
	next int
	// lastClaim is when the latest claim started (UnixNano), for
	// ClaimCooldown.
	lastClaim atomic.Int64
	// received is the rate of the records claimed, for
	// ClaimCooldownMinRate.
	received RateMeter
	// mark is the consumer's state in cfg.Pacer (guarded by the pacer).
	mark PacerMark
	// claimCap is the records cap of the next claim (MaxRecords, grown up
	// to MaxRecordsGrow); lastFull, whether the latest claim came back
	// full; latest and lastCap, the latest claim and the cap it was made
	// with, for mayHaveMore. Guarded by mu.
	claimCap int
	lastFull bool
	latest   *pgmsgtype.Claim
	lastCap  int
	// changed is signalled when the partitions the member may claim
	// change (one of them revoked, or assigned): it ends a commit's
	// linger and a wait's cooldown at once, so that a partition being
	// handed over is not held by a claim waiting for its commit.
	changed chan struct{}
}

// Init makes cn, the zero Consumer, read through log (a Consumer is
// embedded by value in pgmsg.Consumer, so that making one costs no
// allocation more than before the engine moved here). It makes no round
// trip. cn must not be copied afterwards.
func (cn *Consumer) Init(log Log, cfg Config) {
	cn.log, cn.cfg = log, cfg
	cn.claimCap = cfg.MaxRecords
	cn.changed = make(chan struct{}, 1)
	cn.sup = Supervisor[*pgmsgtype.Claim]{Extend: log.Extend, IsLost: errs.IsLostClaim}
	if !cn.manual() {
		mc := cfg.Member
		mc.OnChange = cn.setWakeKeys
		cn.member = membership.New(&mc)
	}
	if cfg.Wake != nil {
		cn.wake = cfg.Wake.C()
		if cn.manual() {
			var keys []string
			for _, t := range cfg.Topics {
				for _, p := range cfg.Partitions {
					keys = append(keys, notifier.PartitionKey(t, p))
				}
			}
			cfg.Wake.Set(keys...)
		}
	}
}

// setWakeKeys subscribes to the wake-ups of the partitions the membership
// gave this consumer, owned (the member's OnChange: called with the
// member's lock held, after its partitions changed).
func (cn *Consumer) setWakeKeys(owned iter.Seq2[string, int32]) {
	select {
	case cn.changed <- struct{}{}:
	default:
	}
	if cn.cfg.Wake == nil {
		return
	}
	var keys []string
	for t, p := range owned {
		keys = append(keys, notifier.PartitionKey(t, p))
	}
	cn.cfg.Wake.Set(keys...)
}

func (cn *Consumer) manual() bool { return len(cn.cfg.Partitions) > 0 }

// Assignment returns the partitions this member may claim now, per topic
// (the manual partitions, or the current automatic assignment).
func (cn *Consumer) Assignment() map[string][]int32 {
	out := map[string][]int32{}
	if cn.manual() {
		for _, t := range cn.cfg.Topics {
			out[t] = append([]int32(nil), cn.cfg.Partitions...)
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
		return errs.New(errs.Closed, "consumer of group %q is closed", cn.cfg.Group)
	}
	if cn.started {
		return nil
	}
	if cn.manual() {
		for _, t := range cn.cfg.Topics {
			if err := cn.log.CreateGroup(ctx, t, cn.cfg.Start); err != nil {
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
func (cn *Consumer) claimEnded(cl *pgmsgtype.Claim) {
	if cn.member != nil {
		cn.member.ClaimEnded(cl.Topic, cl.Partition)
	}
}

// Close leaves the group (its partitions move to the other members at
// once) and stops heartbeats and notifications. A second Close does
// nothing; Run and Poll after Close fail with errs.Closed.
func (cn *Consumer) Close() {
	if cn.cfg.Wake != nil {
		cn.cfg.Wake.Close()
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

// wait blocks until a notification for a topic (held until the claim
// cooldown has passed), a change of the member's partitions, the poll
// interval, or ctx.
func (cn *Consumer) wait(ctx context.Context) error {
	return Wait(ctx, cn.wake, cn.changed, cn.cfg.PollInterval, cn.claimNotBefore())
}

// claimNotBefore is when a claim that follows a wake-up may start: the
// longer of ClaimCooldown, once the consumer receives at least
// ClaimCooldownMinRate records a second, and the client's claim budget's
// interval (Pacer), after the latest claim started; with neither, at
// once.
func (cn *Consumer) claimNotBefore() time.Time {
	cd := time.Duration(0)
	if cn.cfg.ClaimCooldown > 0 && cn.received.Rate() >= cn.cfg.ClaimCooldownMinRate {
		cd = cn.cfg.ClaimCooldown
	}
	if cn.cfg.Pacer != nil {
		cd = max(cd, cn.cfg.Pacer.Interval(time.Now()))
	}
	if cd <= 0 {
		return time.Time{}
	}
	return time.Unix(0, cn.lastClaim.Load()).Add(cd)
}

// claimed records a claim of n records (cl, nil when none) made with a cap
// of limit: the pacer's counts, and the cap of the next claim, which
// grows while claims come back full and shrinks when one comes back a
// quarter full or less (not the claim right after a full one, which only
// takes what the full one left).
func (cn *Consumer) claimed(cl *pgmsgtype.Claim, limit int, now time.Time) {
	n := 0
	if cl != nil {
		n = len(cl.Records)
	}
	cn.received.Add(n, now)
	cn.cfg.Pacer.Claimed(&cn.mark, n, now)
	cn.mu.Lock()
	defer cn.mu.Unlock()
	full := n >= limit
	if cn.cfg.MaxRecordsGrow > cn.cfg.MaxRecords {
		switch {
		case full:
			cn.claimCap = min(2*limit, cn.cfg.MaxRecordsGrow)
		case !cn.lastFull && n <= limit/4:
			cn.claimCap = max(limit/2, cn.cfg.MaxRecords)
		}
	}
	cn.lastFull = full
	cn.latest, cn.lastCap = cl, limit
}

// mayHaveMore reports whether cl, a claim this consumer made, may have
// left records behind (MayHaveMore with the cap it was made with).
func (cn *Consumer) mayHaveMore(cl *pgmsgtype.Claim) bool {
	cn.mu.Lock()
	limit := cn.cfg.MaxRecords
	if cl == cn.latest {
		limit = cn.lastCap
	}
	cn.mu.Unlock()
	return MayHaveMore(len(cl.Records), limit, cn.cfg.MaxBytes)
}

// ClaimCap returns the records cap of the consumer's next claim.
func (cn *Consumer) ClaimCap() int {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.claimCap
}

// owns reports whether the consumer may still claim cl's partition (a
// manual consumer always may).
func (cn *Consumer) owns(cl *pgmsgtype.Claim) bool {
	return cn.member == nil || cn.member.Owns(cl.Topic, cl.Partition)
}

// claimOnce tries each topic (and, manually, each partition) once, in
// rotation, and returns the first claim. commit, if not nil, is a handled
// claim to commit: it rides on the first claim of its topic (one
// transaction for both), or is committed on its own at the end.
func (cn *Consumer) claimOnce(ctx context.Context, commit *pgmsgtype.Claim) (cl *pgmsgtype.Claim, err error) {
	if commit != nil {
		defer cn.claimEnded(commit)
	}
	cn.mu.Lock()
	start := cn.next
	cn.next++
	limit := cn.claimCap
	cn.mu.Unlock()
	defer func() { cn.claimed(cl, limit, time.Now()) }()
	defer func() {
		if commit == nil {
			return
		}
		if cerr := cn.log.Commit(context.WithoutCancel(ctx), commit); cerr != nil && !errs.IsLostClaim(cerr) && err == nil {
			if cl != nil {
				_ = cn.log.Release(context.WithoutCancel(ctx), cl)
			}
			cl, err = nil, cerr
		}
	}()
	claim := func(topic string, partition int32, requireOwner bool) (*pgmsgtype.Claim, error) {
		if commit == nil || commit.Topic != topic {
			return cn.log.Claim(ctx, topic, partition, requireOwner, limit, nil)
		}
		cl, err := cn.log.Claim(ctx, topic, partition, requireOwner, limit, commit)
		if err == nil {
			commit = nil
		}
		return cl, err
	}
	cn.lastClaim.Store(time.Now().UnixNano())
	topics := cn.cfg.Topics
	for i := range topics {
		topic := topics[(start+i)%len(topics)]
		if cn.manual() {
			parts := cn.cfg.Partitions
			for j := range parts {
				cl, err := claim(topic, parts[(start+j)%len(parts)], false)
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
		partition := int32(AnyPartition)
		if n == 1 {
			// Name the partition: the claim then reads one cursor row, not
			// every row of the group (which matters while a long snapshot
			// keeps their old versions from being pruned).
			partition = only
		}
		cl, err := claim(topic, partition, true)
		if errors.Is(err, errs.NotMember) || errors.Is(err, errs.NotAssigned) {
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

// Poll blocks until it has claimed records (or ctx ends), committing
// commit (if not nil) first or along with the first claim.
func (cn *Consumer) Poll(ctx context.Context, commit *pgmsgtype.Claim) (*pgmsgtype.Claim, error) {
	if err := cn.start(ctx); err != nil {
		if commit != nil {
			if cerr := cn.log.Commit(context.WithoutCancel(ctx), commit); cerr != nil && !errs.IsLostClaim(cerr) {
				return nil, cerr
			}
		}
		return nil, err
	}
	if commit != nil {
		// A change of the member's partitions signalled before now is
		// seen by owns below; one after it ends the wait.
		select {
		case <-cn.changed:
		default:
		}
	}
	if commit != nil && !cn.mayHaveMore(commit) && cn.owns(commit) {
		// The handled claim took everything its partition had: a claim sent
		// now would most likely find nothing and only carry the commit.
		// Wait for a wake-up first (at most CommitLingerMax) and send the
		// commit with the claim that follows it: one call per claim cycle
		// instead of two. The handled claim stays uncommitted a little
		// longer; its lease is far longer, and a crash meanwhile only
		// delivers its records again (at-least-once).
		// ClaimCooldown (and the claim budget) holds the commit too: at
		// most until half the claim's remaining lease. A claim whose
		// partition is being handed over does not linger (nor wait for
		// the cooldown): the hand-over waits for its commit.
		notBefore := cn.claimNotBefore()
		if limit := time.Now().Add(time.Until(commit.ExpiresAt) / 2); limit.Before(notBefore) {
			notBefore = limit
		}
		if err := Wait(ctx, cn.wake, cn.changed, CommitLinger(cn.cfg.PollInterval, commit.ExpiresAt), notBefore); err != nil {
			if cerr := cn.log.Commit(context.WithoutCancel(ctx), commit); cerr != nil && !errs.IsLostClaim(cerr) {
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

// Run claims records and calls handler with each claim until ctx ends,
// as pgmsg.Consumer.Run says.
func (cn *Consumer) Run(ctx context.Context, handler Handler) error {
	backoff := 0 * time.Millisecond
	// done is the last claim handled and not yet committed: its commit
	// rides on the next claim (one transaction for both).
	var done *pgmsgtype.Claim
	defer func() {
		if done != nil {
			if err := cn.log.Commit(context.WithoutCancel(ctx), done); err != nil && !errs.IsLostClaim(err) {
				cn.cfg.Logger.Warn("pgmsg: consumer could not commit its last claim (its records will be delivered again)",
					"group", cn.cfg.Group, "member", cn.cfg.MemberID, "error", err)
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
		if !errs.IsRetryable(err) {
			return err
		}
		backoff = RetryBackoff(backoff)
		cn.cfg.Logger.Warn("pgmsg: consumer retrying after a transient error", "group", cn.cfg.Group,
			"member", cn.cfg.MemberID, "backoff", backoff, "error", err)
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
func (cn *Consumer) runOnce(ctx context.Context, handler Handler, done *pgmsgtype.Claim) (*pgmsgtype.Claim, error) {
	cl, err := cn.Poll(ctx, done)
	if err != nil {
		return nil, err
	}
	mine := deadletter.ForGroup(cl, cn.cfg.Group)
	if mine == nil {
		return cl, nil // only records replayed for other groups
	}
	if herr := cn.handle(ctx, mine, handler); herr != nil {
		return cn.redeliver(ctx, cl, mine, handler, herr)
	}
	return cl, nil
}

// release gives cl back (its records are delivered again at once).
func (cn *Consumer) release(ctx context.Context, cl *pgmsgtype.Claim) error {
	defer cn.claimEnded(cl)
	if err := cn.log.Release(context.WithoutCancel(ctx), cl); err != nil && !errs.IsLostClaim(err) {
		return err
	}
	return nil
}

// handle runs handler while extending the claim every third of its lease,
// cancelling its ctx if the claim is lost (Supervisor.Handle), inside the
// span of its processing.
func (cn *Consumer) handle(ctx context.Context, cl *pgmsgtype.Claim, handler Handler) error {
	return cn.sup.Handle(ctx, cl, cn.cfg.Lease, func(hctx context.Context, cl *pgmsgtype.Claim) error {
		sctx, end := cn.log.StartProcessSpan(hctx, cl)
		err := handler(sctx, cl)
		end(err)
		return err
	})
}

// ProcessTx claims records and runs handler with them in one transaction
// that also commits the group's cursor (pgmsg.Consumer.ProcessTx).
func (cn *Consumer) ProcessTx(ctx context.Context, handler TxHandler) (bool, error) {
	processed := false
	if err := cn.start(ctx); err != nil {
		return false, err
	}
	err := cn.log.BeginFunc(ctx, func(tx pgx.Tx) error {
		cl, err := cn.claimOnceTx(ctx, tx)
		if err != nil || cl == nil {
			return err
		}
		if err := handler(ctx, tx, cl); err != nil {
			return err
		}
		processed = true
		return cn.log.CommitTx(ctx, tx, cl)
	})
	if err != nil {
		return false, err
	}
	return processed, nil
}

// claimOnceTx is claimOnce inside tx, with the long in-transaction lease.
func (cn *Consumer) claimOnceTx(ctx context.Context, tx pgx.Tx) (*pgmsgtype.Claim, error) {
	for _, topic := range cn.cfg.Topics {
		if cn.manual() {
			for _, p := range cn.cfg.Partitions {
				cl, err := cn.log.ClaimTx(ctx, tx, topic, p, false, ProcessTxLease)
				if err != nil || cl != nil {
					return cl, err
				}
			}
			continue
		}
		cl, err := cn.log.ClaimTx(ctx, tx, topic, AnyPartition, true, ProcessTxLease)
		if err != nil || cl != nil {
			return cl, err
		}
	}
	return nil, nil
}

// RunTx calls ProcessTx until ctx ends, waiting for records when there are
// none (pgmsg.Consumer.RunTx).
func (cn *Consumer) RunTx(ctx context.Context, handler TxHandler) error {
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
