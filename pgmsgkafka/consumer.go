package pgmsgkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
)

// Redelivery defaults, as pgmsg.ConsumerOpts'.
const (
	redeliveryBackoffDefault    = 100 * time.Millisecond
	redeliveryBackoffMaxDefault = 30 * time.Second
	commitTimeout               = 10 * time.Second
)

// NewLogConsumer returns a member of the Kafka consumer group group
// reading topics, with its own kgo client. It commits by hand, after its
// handler succeeded, and blocks rebalances while a poll's claims are
// handled (kgo.BlockRebalanceOnPoll), so a partition moves to another
// member only after its in-flight claim is committed or given up: the
// hand-over pgmsg's Consumer makes on PostgreSQL.
func (b *Backend) NewLogConsumer(group string, topics []string, opts *pgmsg.LogConsumerOpts) (pgmsg.LogConsumer, error) {
	if err := pgmsg.ValidateName("group", group); err != nil {
		return nil, err
	}
	if len(topics) == 0 {
		return nil, pgmsg.NewError(pgmsg.ErrInvalidArgument, nil, "a consumer needs at least one topic")
	}
	for _, t := range topics {
		if err := pgmsg.ValidateName("topic", t); err != nil {
			return nil, err
		}
	}
	o := pgmsg.LogConsumerOpts{}
	if opts != nil {
		o = *opts
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = pgmsg.ClaimMaxRecordsDefault
	}
	if o.RedeliveryBackoff == 0 {
		o.RedeliveryBackoff = redeliveryBackoffDefault
	}
	if o.RedeliveryBackoffMax == 0 {
		o.RedeliveryBackoffMax = redeliveryBackoffMaxDefault
	}
	if o.MaxRecords < 0 || o.HeartbeatInterval < 0 || o.SessionTimeout < 0 || o.RedeliveryBackoff < 0 || o.RedeliveryBackoffMax < 0 {
		return nil, pgmsg.NewError(pgmsg.ErrInvalidArgument, nil, "max records, intervals, timeouts and backoffs must not be negative")
	}
	if o.MemberID == "" {
		host, _ := os.Hostname()
		o.MemberID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	start, err := startOffset(o.Start)
	if err != nil {
		return nil, err
	}
	c := &consumer{group: group, opts: o, owned: map[string]map[int32]bool{}, blocked: make(chan struct{}, 1),
		log: b.cfg.Logger}
	kopts := []kgo.Opt{
		kgo.ClientID(o.MemberID),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(start),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { c.assigned(m) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { c.removed(m, o.OnRevoked) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { c.removed(m, o.OnLost) }),
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) {
			select {
			case c.blocked <- struct{}{}:
			default:
			}
		}),
	}
	if o.HeartbeatInterval > 0 {
		kopts = append(kopts, kgo.HeartbeatInterval(o.HeartbeatInterval))
	}
	if o.SessionTimeout > 0 {
		kopts = append(kopts, kgo.SessionTimeout(o.SessionTimeout))
	}
	if c.client, err = b.newClient(kopts...); err != nil {
		return nil, err
	}
	return c, nil
}

// startOffset turns a pgmsg start position into kgo's reset offset.
func startOffset(pos string) (kgo.Offset, error) {
	switch pos {
	case "", pgmsg.PositionEarliest:
		return kgo.NewOffset().AtStart(), nil
	case pgmsg.PositionLatest:
		return kgo.NewOffset().AtEnd(), nil
	}
	if o, err := strconv.ParseInt(pos, 10, 64); err == nil {
		if o < 0 {
			return kgo.Offset{}, pgmsg.NewError(pgmsg.ErrInvalidOffset, nil, "offset must not be negative, got %d", o)
		}
		return kgo.NewOffset().At(o), nil
	}
	t, err := time.Parse(time.RFC3339Nano, pos)
	if err != nil {
		return kgo.Offset{}, pgmsg.NewError(pgmsg.ErrInvalidOffset, nil, "invalid position %q: use earliest, latest, an offset or an RFC 3339 timestamp", truncate(pos, 80))
	}
	return kgo.NewOffset().AfterMilli(t.UnixMilli()), nil
}

// consumer is a pgmsg.LogConsumer on its own kgo client.
type consumer struct {
	client *kgo.Client
	group  string
	opts   pgmsg.LogConsumerOpts
	log    *slog.Logger
	// blocked receives a signal when a rebalance waits for the claims
	// being handled (OnPartitionsCallbackBlocked): a claim waiting to be
	// handed over again gives up its partition instead.
	blocked chan struct{}

	mu    sync.Mutex
	owned map[string]map[int32]bool
}

func (c *consumer) assigned(m map[string][]int32) {
	c.mu.Lock()
	for t, ps := range m {
		if c.owned[t] == nil {
			c.owned[t] = map[int32]bool{}
		}
		for _, p := range ps {
			c.owned[t][p] = true
		}
	}
	c.mu.Unlock()
	if c.opts.OnAssigned != nil {
		for _, t := range sortedTopics(m) {
			c.opts.OnAssigned(t, sorted(m[t]))
		}
	}
}

func (c *consumer) removed(m map[string][]int32, callback func(string, []int32)) {
	c.mu.Lock()
	for t, ps := range m {
		for _, p := range ps {
			delete(c.owned[t], p)
		}
	}
	c.mu.Unlock()
	if callback != nil {
		for _, t := range sortedTopics(m) {
			if len(m[t]) > 0 {
				callback(t, sorted(m[t]))
			}
		}
	}
}

func sortedTopics(m map[string][]int32) []string {
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func sorted(ps []int32) []int32 {
	out := append([]int32(nil), ps...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (c *consumer) Assignment() map[string][]int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]int32{}
	for t, ps := range c.owned {
		for p := range ps {
			out[t] = append(out[t], p)
		}
		if len(out[t]) == 0 {
			delete(out, t)
			continue
		}
		out[t] = sorted(out[t])
	}
	return out
}

// MemberID is the member id the broker gave this member, or the
// configured one (the client id) before it has joined.
func (c *consumer) MemberID() string {
	if id, _ := c.client.GroupMetadata(); id != "" {
		return id
	}
	return c.opts.MemberID
}

// Close leaves the group and closes the client.
func (c *consumer) Close() { c.client.Close() }

// Run polls records, hands each partition's records of the poll to
// handler as one claim, and commits the claims handled. A failed claim is
// handed over again after the backoff, in place (the member's other
// partitions wait, as a PostgreSQL partition waits for its failing
// claim), until it succeeds, ctx ends or a rebalance waits for it: then
// the fetch position of it and of the poll's unhandled claims is set back
// to their first record, so that they are delivered again to whoever owns
// their partition next.
func (c *consumer) Run(ctx context.Context, handler func(ctx context.Context, cl *pgmsg.Claim) error) error {
	backoff := time.Duration(0)
	for {
		// A signal left from an earlier poll's rebalance is stale.
		select {
		case <-c.blocked:
		default:
		}
		fetches := c.client.PollRecords(ctx, c.opts.MaxRecords)
		if ctx.Err() != nil {
			// Records polled as ctx ended are given back, for a later Run.
			c.rewind(c.claims(fetches))
			c.client.AllowRebalance()
			return ctx.Err()
		}
		if fetches.IsClientClosed() {
			return pgmsg.NewError(pgmsg.ErrClosed, kgo.ErrClientClosed, "consumer is closed")
		}
		var fetchErr error
		fetches.EachError(func(t string, p int32, err error) {
			c.log.Warn("pgmsgkafka: fetch failed", "topic", t, "partition", p, "group", c.group, "error", err)
			fetchErr = err
		})
		err := c.handleAll(ctx, c.claims(fetches), handler)
		c.client.AllowRebalance()
		if err != nil {
			return err
		}
		if fetchErr != nil && fetches.NumRecords() == 0 {
			// Do not spin on a failing fetch.
			backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
	}
}

// claim is a pgmsg.Claim and the last Kafka record of it, whose offset
// and leader epoch its commit presents.
type claim struct {
	*pgmsg.Claim
	last *kgo.Record
}

// claims groups a poll's records by partition, in offset order.
func (c *consumer) claims(fetches kgo.Fetches) []claim {
	_, generation := c.client.GroupMetadata()
	type tp struct {
		topic     string
		partition int32
	}
	var out []claim
	index := map[tp]int{}
	fetches.EachRecord(func(r *kgo.Record) {
		k := tp{r.Topic, r.Partition}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, claim{Claim: &pgmsg.Claim{Topic: r.Topic, Group: c.group, Partition: r.Partition, Epoch: int64(generation)}})
		}
		out[i].Records = append(out[i].Records, fromKafka(r))
		out[i].last = r
	})
	return out
}

// fromKafka converts a fetched record; of headers with the same key, the
// last one wins (pgmsg's headers are a map).
func fromKafka(r *kgo.Record) *pgmsg.Record {
	rec := &pgmsg.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
		Timestamp: r.Timestamp}
	if len(r.Headers) > 0 {
		rec.Headers = make(map[string][]byte, len(r.Headers))
		for _, h := range r.Headers {
			rec.Headers[h.Key] = h.Value
		}
	}
	return rec
}

// handleAll hands each claim to handler, with redelivery, and commits
// those handled. Claims not handled (ctx ended, or a rebalance waits) are
// rewound. It returns ctx's error, or nil.
func (c *consumer) handleAll(ctx context.Context, claims []claim, handler func(context.Context, *pgmsg.Claim) error) error {
	var done []*kgo.Record
	var err error
	for i, cl := range claims {
		if err = c.handle(ctx, cl.Claim, handler); err != nil {
			c.rewind(claims[i:])
			break
		}
		done = append(done, cl.last)
	}
	if len(done) > 0 {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		cerr := c.client.CommitRecords(cctx, done...)
		cancel()
		if cerr != nil {
			// At-least-once: if no later commit covers them before the
			// partition moves, the records are delivered again.
			c.log.Warn("pgmsgkafka: commit failed; the records may be delivered again", "group", c.group, "error", cerr)
		}
	}
	if errors.Is(err, errRebalance) {
		return nil
	}
	return err
}

// errRebalance stops the handling of a poll's claims: a rebalance waits.
var errRebalance = errors.New("pgmsgkafka: rebalance waiting")

// handle runs handler on cl until it returns nil, waiting the backoff
// between tries. It returns ctx's error when ctx ends, errRebalance when a
// rebalance waits for a claim that failed.
func (c *consumer) handle(ctx context.Context, cl *pgmsg.Claim, handler func(context.Context, *pgmsg.Claim) error) error {
	backoff := c.opts.RedeliveryBackoff
	for {
		herr := handler(ctx, cl)
		if herr == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The handler's error is the application's to log, as on PostgreSQL.
		c.log.Debug("pgmsgkafka: handler failed; records handed over again after the backoff", "topic", cl.Topic,
			"partition", cl.Partition, "group", c.group, "backoff", backoff, "error", herr)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-c.blocked:
			t.Stop()
			return errRebalance
		case <-t.C:
		}
		backoff = min(2*backoff, c.opts.RedeliveryBackoffMax)
	}
}

// rewind sets the fetch position of each claim's partition back to its
// first record (called before AllowRebalance, while the partitions are
// still this member's).
func (c *consumer) rewind(claims []claim) {
	set := map[string]map[int32]kgo.EpochOffset{}
	for _, cl := range claims {
		if set[cl.Topic] == nil {
			set[cl.Topic] = map[int32]kgo.EpochOffset{}
		}
		set[cl.Topic][cl.Partition] = kgo.EpochOffset{Epoch: -1, Offset: cl.Records[0].Offset}
	}
	c.client.SetOffsets(set)
}
