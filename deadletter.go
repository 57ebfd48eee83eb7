package pgmsg

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Poison records: a record the handler keeps failing on is handed over
// again with a growing backoff and, with ConsumerOpts.MaxDeliveries, set
// aside in a dead-letter topic so that its partition moves on. Everything
// here runs only after a handler failed; Run's path for records handled
// at the first try only checks their headers for ReplayHeaderGroup.

// Headers of a record set aside in a dead-letter topic, naming where it
// came from and why. The record keeps its key, value, timestamp and its
// own headers.
const (
	DeadLetterHeaderTopic      = "pgmsg.dlq.topic"
	DeadLetterHeaderPartition  = "pgmsg.dlq.partition"
	DeadLetterHeaderOffset     = "pgmsg.dlq.offset"
	DeadLetterHeaderGroup      = "pgmsg.dlq.group"
	DeadLetterHeaderError      = "pgmsg.dlq.error"
	DeadLetterHeaderDeliveries = "pgmsg.dlq.deliveries"
	// ReplayHeaderGroup marks a record that ReplayDeadLetters published
	// back to its topic for one group: a Consumer of any other group
	// commits past it without handing it to its handler. Consumers of the
	// SQL API should skip it the same way.
	ReplayHeaderGroup = "pgmsg.replay.group"
)

const (
	// RedeliveryBackoffDefault and RedeliveryBackoffMaxDefault are the
	// defaults of ConsumerOpts.RedeliveryBackoff and RedeliveryBackoffMax.
	RedeliveryBackoffDefault    = 100 * time.Millisecond
	RedeliveryBackoffMaxDefault = 30 * time.Second
	// DeadLetterSuffix makes the default dead-letter topic's name.
	DeadLetterSuffix = ".dlq"
	// ReplayGroupSuffix names the group (on the dead-letter topic) whose
	// cursor remembers what ReplayDeadLetters has replayed for a group.
	ReplayGroupSuffix = ".replay"
	// deadLetterErrorMax bounds the handler error kept in a dead letter.
	deadLetterErrorMax = 4096
	// deadLetterHeadersRoom is what a dead-letter topic allows per record
	// beyond its source topic: the pgmsg.dlq.* headers, base64 in jsonb.
	deadLetterHeadersRoom = 16 << 10
)

// checkDeadLetters validates and defaults the poison-record options.
func (o *ConsumerOpts) checkDeadLetters(topics []string) error {
	if o.MaxDeliveries < 0 || o.RedeliveryBackoff < 0 || o.RedeliveryBackoffMax < 0 ||
		o.RedeliveryBackoff > durationMax || o.RedeliveryBackoffMax > durationMax {
		return newError(ErrInvalidArgument, "max deliveries must not be negative, and redelivery backoffs must be from 0 to %s", durationMax)
	}
	if o.RedeliveryBackoff == 0 {
		o.RedeliveryBackoff = RedeliveryBackoffDefault
	}
	if o.RedeliveryBackoffMax == 0 {
		o.RedeliveryBackoffMax = RedeliveryBackoffMaxDefault
	}
	o.RedeliveryBackoffMax = max(o.RedeliveryBackoffMax, o.RedeliveryBackoff)
	if o.MaxDeliveries == 0 {
		return nil
	}
	for _, t := range topics {
		dlq := deadLetterTopic(o.DeadLetterTopic, t)
		// Checked in the constructor (NewConsumer), which makes no round
		// trip: a bad name fails it at once, not the first dead letter.
		if err := ValidateName("dead-letter topic", dlq); err != nil {
			return err
		}
		if dlq == t {
			return newError(ErrInvalidArgument, "the dead-letter topic of %q must be another topic", t)
		}
	}
	return nil
}

// deadLetterTopic is the dead-letter topic of topic: name, or topic's
// default.
func deadLetterTopic(name, topic string) string {
	if name != "" {
		return name
	}
	return topic + DeadLetterSuffix
}

// replayedForUs returns cl, or a copy without the records replayed for
// other groups (ReplayHeaderGroup), or nil when none is left. The claim
// committed is always cl: it covers the records skipped.
func (cn *Consumer) replayedForUs(cl *Claim) *Claim {
	var keep []*Record
	skipped := false
	for i, r := range cl.Records {
		if g, ok := r.Headers[ReplayHeaderGroup]; ok && string(g) != cn.group {
			if !skipped {
				keep = append([]*Record(nil), cl.Records[:i]...)
				skipped = true
			}
			continue
		}
		if skipped {
			keep = append(keep, r)
		}
	}
	switch {
	case !skipped:
		return cl
	case len(keep) == 0:
		return nil
	}
	cp := *cl
	cp.Records = keep
	return &cp
}

// deadLetter is a record to set aside and why.
type deadLetter struct {
	rec        *Record
	err        error
	deliveries int
}

// redeliver handles the records of claim cl that the handler failed on
// (mine: cl without records replayed for other groups; herr: the
// failure), as ConsumerOpts.MaxDeliveries says. It returns the claim for
// Run to commit, or nil when there is nothing to commit: the claim was
// committed along with its dead letters, given back because ctx ended, or
// lost to another member (which delivers its records again).
func (cn *Consumer) redeliver(ctx context.Context, cl, mine *Claim, handler func(ctx context.Context, cl *Claim) error, herr error) (*Claim, error) {
	if ctx.Err() != nil {
		return nil, cn.release(ctx, cl)
	}
	if cn.opts.MaxDeliveries == 0 && cn.readsSeveral(cl.Topic) {
		// Retrying in place would hold up the member's other partitions
		// for as long as the records keep failing: give the claim back at
		// once; the claim order (least recently claimed first) hands the
		// others out before this one comes back.
		return nil, cn.release(ctx, cl)
	}
	var dead []deadLetter
	if cn.opts.MaxDeliveries == 0 || len(mine.Records) == 1 {
		// The whole claim again, until it succeeds or (one record) until
		// it has had its deliveries.
		for deliveries := 1; ; deliveries++ {
			if cn.opts.MaxDeliveries > 0 && deliveries >= cn.opts.MaxDeliveries {
				dead = append(dead, deadLetter{rec: mine.Records[0], err: herr, deliveries: deliveries})
				break
			}
			if keep, err := cn.backoff(ctx, cl, deliveries); !keep {
				return nil, err
			}
			if herr = cn.handle(ctx, mine, handler); herr == nil {
				return cl, nil
			}
		}
	} else {
		// Several records: one at a time, so that only the records that
		// fail on their own are set aside.
		for _, r := range mine.Records {
			one := *mine
			one.Records = []*Record{r}
			for deliveries := 0; ; deliveries++ {
				if deliveries > 0 {
					if deliveries >= cn.opts.MaxDeliveries {
						dead = append(dead, deadLetter{rec: r, err: herr, deliveries: deliveries})
						break
					}
					if keep, err := cn.backoff(ctx, cl, deliveries); !keep {
						return nil, err
					}
				}
				if herr = cn.handle(ctx, &one, handler); herr == nil {
					break
				}
				if ctx.Err() != nil {
					return nil, cn.release(ctx, cl)
				}
			}
		}
	}
	if len(dead) == 0 {
		return cl, nil
	}
	return nil, cn.setAside(ctx, cl, dead)
}

// backoff waits before delivery n+1 of a claim's records, with the claim's
// lease extended over the wait. It reports false (and what Run should
// return) when the records must not be handed over again here: ctx ended
// or the group is moving the partition to another member (the claim is
// given back: a hand-over waits for it), or the claim was lost.
func (cn *Consumer) backoff(ctx context.Context, cl *Claim, n int) (bool, error) {
	if ctx.Err() != nil || !cn.stillOwns(cl) {
		return false, cn.release(ctx, cl)
	}
	wait := cn.opts.RedeliveryBackoff
	for i := 1; i < n && wait < cn.opts.RedeliveryBackoffMax; i++ {
		wait *= 2 // both are at most durationMax: no overflow
	}
	wait = min(wait, cn.opts.RedeliveryBackoffMax)
	lease := cn.opts.Claim.Lease
	if lease == 0 {
		lease = cn.client.config.ClaimLease
	}
	if err := cn.client.Extend(ctx, cl, min(lease+wait, durationMax)); err != nil {
		if isLostClaim(err) {
			return false, nil
		}
		if ctx.Err() != nil {
			return false, cn.release(ctx, cl)
		}
		return false, err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, cn.release(ctx, cl)
	case <-t.C:
	}
	if !cn.stillOwns(cl) {
		return false, cn.release(ctx, cl)
	}
	return true, nil
}

// readsSeveral reports whether the consumer reads more than one partition
// (of topic, or several topics).
func (cn *Consumer) readsSeveral(topic string) bool {
	if len(cn.topics) > 1 {
		return true
	}
	if cn.manual() {
		return len(cn.opts.Partitions) > 1
	}
	n, _ := cn.member.Count(topic)
	return n > 1
}

// stillOwns reports whether the membership still gives cl's partition to
// this member (always, for a consumer of fixed partitions).
func (cn *Consumer) stillOwns(cl *Claim) bool {
	if cn.manual() {
		return true
	}
	return cn.member.Owns(cl.Topic, cl.Partition)
}

// setAside publishes dead to the claim's dead-letter topic and commits the
// claim, in one transaction: each record is set aside once, and the
// partition moves on. A claim lost meanwhile writes nothing.
func (cn *Consumer) setAside(ctx context.Context, cl *Claim, dead []deadLetter) error {
	c := cn.client
	ctx = context.WithoutCancel(ctx)
	dlq := deadLetterTopic(cn.opts.DeadLetterTopic, cl.Topic)
	partitions, err := c.ensureDeadLetterTopic(ctx, dlq, cl.Topic)
	if err != nil {
		return err
	}
	recs := make([]*Record, len(dead))
	offsets := make([]int64, len(dead))
	for i, d := range dead {
		h := map[string][]byte{}
		for k, v := range d.rec.Headers {
			if k != ReplayHeaderGroup && !strings.HasPrefix(k, "pgmsg.dlq.") {
				h[k] = v
			}
		}
		h[DeadLetterHeaderTopic] = []byte(cl.Topic)
		h[DeadLetterHeaderPartition] = []byte(strconv.Itoa(int(cl.Partition)))
		h[DeadLetterHeaderOffset] = []byte(strconv.FormatInt(d.rec.Offset, 10))
		h[DeadLetterHeaderGroup] = []byte(cn.group)
		h[DeadLetterHeaderError] = []byte(truncateUTF8(errorText(d.err), deadLetterErrorMax))
		h[DeadLetterHeaderDeliveries] = []byte(strconv.Itoa(d.deliveries))
		recs[i] = &Record{Topic: dlq, Partition: cl.Partition % int32(partitions), Key: d.rec.Key, Value: d.rec.Value,
			Headers: h, Timestamp: d.rec.Timestamp}
		offsets[i] = d.rec.Offset
	}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := c.PublishTx(ctx, tx, recs, &PublishOpts{ManualPartition: true}); err != nil {
			return fmt.Errorf("pgmsg: setting records of %s partition %d aside in %s: %w", cl.Topic, cl.Partition, dlq, err)
		}
		return c.CommitTx(ctx, tx, cl)
	})
	if isLostClaim(err) {
		return nil
	}
	if err != nil {
		return err
	}
	c.config.Logger.Warn("pgmsg: records set aside in the dead-letter topic after failing every delivery",
		"topic", cl.Topic, "partition", cl.Partition, "offsets", offsets, "group", cn.group,
		"dead_letter_topic", dlq, "error", errorText(dead[len(dead)-1].err))
	return nil
}

// ensureDeadLetterTopic creates dlq, with topic's partition count and room
// for its largest record plus the dead-letter headers, unless it exists,
// and returns its partition count.
func (c *Client) ensureDeadLetterTopic(ctx context.Context, dlq, topic string) (int, error) {
	if m, err := c.topicMeta(ctx, c.pool, dlq, false); err == nil {
		return m.partitions, nil
	} else if !errors.Is(err, ErrUnknownTopic) {
		return 0, err
	}
	src, err := c.topicMeta(ctx, c.pool, topic, false)
	if err != nil {
		return 0, err
	}
	cfg := TopicConfig{Partitions: src.partitions, MaxRecordBytes: int(min(int64(src.maxRecordBytes)+deadLetterHeadersRoom, math.MaxInt32))}
	if _, err := c.CreateTopic(ctx, dlq, cfg); err != nil && !errors.Is(err, ErrTopicExists) {
		return 0, err
	}
	m, err := c.topicMeta(ctx, c.pool, dlq, true)
	return m.partitions, err
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// DeadLetter is a record a consumer group set aside
// (ConsumerOpts.MaxDeliveries), as stored in the dead-letter topic.
type DeadLetter struct {
	// Record is the dead letter: its Topic, Partition and Offset are in
	// the dead-letter topic; key, value, timestamp and headers are the
	// source record's, plus the pgmsg.dlq.* headers.
	Record *Record
	// Topic, Partition and Offset say where it came from.
	Topic     string
	Partition int32
	Offset    int64
	// Group is the consumer group whose handler failed on it, Error that
	// handler's last error, Deliveries how many times it was handed over.
	Group      string
	Error      string
	Deliveries int
	// Replayed is true once ReplayDeadLetters published it back.
	Replayed bool
}

// DeadLettersOpts selects dead letters; nil means defaults.
type DeadLettersOpts struct {
	// DeadLetterTopic is the dead-letter topic, as in ConsumerOpts.
	// Default "<topic>.dlq".
	DeadLetterTopic string
	// Limit bounds the dead letters listed or replayed by one call.
	// Default 1000.
	Limit int
}

// resolve checks topic, group and o, and returns the dead-letter topic and
// the limit. The names stay checked in Go: the group is only matched
// against headers (SQL sees it only when the dead-letter topic exists),
// and the topic's and dead-letter topic's names come before the limit's
// Go check, so that a bad name is ErrInvalidName whatever else is wrong.
func (o *DeadLettersOpts) resolve(topic, group string) (string, int, error) {
	if err := ValidateName("topic", topic); err != nil {
		return "", 0, err
	}
	if err := ValidateName("group", group); err != nil {
		return "", 0, err
	}
	var opts DeadLettersOpts
	if o != nil {
		opts = *o
	}
	if opts.Limit < 0 {
		return "", 0, newError(ErrInvalidArgument, "limit must not be negative")
	}
	if opts.Limit == 0 {
		opts.Limit = 1000
	}
	dlq := deadLetterTopic(opts.DeadLetterTopic, topic)
	if err := ValidateName("dead-letter topic", dlq); err != nil {
		return "", 0, err
	}
	return dlq, opts.Limit, nil
}

// deadLetterOf reads a record of a dead-letter topic; ok is false when it
// is not one of group's dead letters of topic.
func deadLetterOf(r *Record, topic, group string) (*DeadLetter, bool) {
	if string(r.Headers[DeadLetterHeaderGroup]) != group || string(r.Headers[DeadLetterHeaderTopic]) != topic {
		return nil, false
	}
	p, err1 := strconv.ParseInt(string(r.Headers[DeadLetterHeaderPartition]), 10, 32)
	off, err2 := strconv.ParseInt(string(r.Headers[DeadLetterHeaderOffset]), 10, 64)
	n, err3 := strconv.Atoi(string(r.Headers[DeadLetterHeaderDeliveries]))
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, false
	}
	return &DeadLetter{Record: r, Topic: topic, Partition: int32(p), Offset: off, Group: group,
		Error: string(r.Headers[DeadLetterHeaderError]), Deliveries: n}, true
}

// DeadLetters lists group's dead letters of topic, oldest first in each
// partition of the dead-letter topic, at most opts.Limit. A topic whose
// dead-letter topic does not exist has none; an unknown topic is
// ErrUnknownTopic.
func (c *Client) DeadLetters(ctx context.Context, topic, group string, opts *DeadLettersOpts) ([]*DeadLetter, error) {
	dlq, limit, err := opts.resolve(topic, group)
	if err != nil {
		return nil, err
	}
	if _, err := c.topicMeta(ctx, c.pool, topic, false); err != nil {
		return nil, err
	}
	desc, err := c.DescribeTopic(ctx, dlq)
	if errors.Is(err, ErrUnknownTopic) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	replayed := map[int32]int64{}
	gs, err := c.ListGroups(ctx, dlq, group+ReplayGroupSuffix)
	if err != nil {
		return nil, err
	}
	for _, g := range gs {
		replayed[g.Partition] = g.NextOffset
	}
	var out []*DeadLetter
	for _, p := range desc.PartitionInfo {
		for from := p.StartOffset; from < p.NextOffset && len(out) < limit; {
			recs, err := c.Fetch(ctx, dlq, p.Partition, from, 500)
			if err != nil {
				return nil, err
			}
			from += 500
			for _, r := range recs {
				if d, ok := deadLetterOf(r, topic, group); ok && len(out) < limit {
					d.Replayed = r.Offset < replayed[p.Partition]
					out = append(out, d)
				}
			}
		}
	}
	return out, nil
}

// ReplayDeadLetters publishes group's dead letters of topic back to topic,
// each to the partition it came from, with its key, value and own headers
// and a ReplayHeaderGroup header naming group, so that only group's
// consumers handle it again (Consumers of other groups commit past it).
// Each dead letter is replayed once: the group "<group>.replay" on the
// dead-letter topic remembers how far replays went, committed in the
// transaction that publishes. It returns how many it replayed (at most
// opts.Limit; call again for more).
func (c *Client) ReplayDeadLetters(ctx context.Context, topic, group string, opts *DeadLettersOpts) (int, error) {
	dlq, limit, err := opts.resolve(topic, group)
	if err != nil {
		return 0, err
	}
	replayGroup := group + ReplayGroupSuffix
	// Stays in Go: the statements that follow do not check this name, and
	// a dead-letter topic that does not exist would answer 0 for it.
	if err := ValidateName("group", replayGroup); err != nil {
		return 0, err
	}
	if _, err := c.topicMeta(ctx, c.pool, topic, false); err != nil {
		return 0, err
	}
	if _, err := c.topicMeta(ctx, c.pool, dlq, false); errors.Is(err, ErrUnknownTopic) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	replayed := 0
	for replayed < limit {
		more := false
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			cl, err := c.ClaimTx(ctx, tx, dlq, replayGroup, &ClaimOpts{MaxRecords: min(limit-replayed, 500), Start: PositionEarliest})
			if err != nil || cl == nil {
				return err
			}
			more = true
			var recs []*Record
			for _, r := range cl.Records {
				d, ok := deadLetterOf(r, topic, group)
				if !ok {
					continue
				}
				h := map[string][]byte{ReplayHeaderGroup: []byte(group)}
				for k, v := range r.Headers {
					if !strings.HasPrefix(k, "pgmsg.dlq.") {
						h[k] = v
					}
				}
				recs = append(recs, &Record{Topic: topic, Partition: d.Partition, Key: r.Key, Value: r.Value,
					Headers: h, Timestamp: r.Timestamp})
			}
			if len(recs) > 0 {
				if err := c.PublishTx(ctx, tx, recs, &PublishOpts{ManualPartition: true}); err != nil {
					return err
				}
			}
			if err := c.CommitTx(ctx, tx, cl); err != nil {
				return err
			}
			replayed += len(recs)
			return nil
		})
		if err != nil {
			return replayed, err
		}
		if !more {
			break
		}
	}
	return replayed, nil
}
