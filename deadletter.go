package pgmsg

import (
	"context"
	"errors"
	"time"

	"github.com/pgmsg/pgmsg/internal/deadletter"
)

// Dead letters: the public names of the poison-record options' defaults
// and of the dead-letter format, the options' checks, and the Client's
// listing and replay. When a record is set aside is the Consumer's engine's
// (internal/logconsumer); the format itself (headers, naming, decoding)
// is internal/deadletter's, whose constants these must spell alike
// (TestDeadLetterNames).

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
		dlq := deadletter.Topic(o.DeadLetterTopic, t)
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
	dlq := deadletter.Topic(opts.DeadLetterTopic, topic)
	if err := ValidateName("dead-letter topic", dlq); err != nil {
		return "", 0, err
	}
	return dlq, opts.Limit, nil
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
	ls, err := deadletter.List(ctx, c.deadLetterDB(), dlq, topic, group, limit)
	if err != nil || ls == nil {
		return nil, err
	}
	out := make([]*DeadLetter, len(ls))
	for i, l := range ls {
		out[i] = &DeadLetter{Record: l.Record, Topic: topic, Partition: l.Partition, Offset: l.Offset, Group: group,
			Error: l.Error, Deliveries: l.Deliveries, Replayed: l.Replayed}
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
	// Stays in Go: the statements that follow do not check this name, and
	// a dead-letter topic that does not exist would answer 0 for it.
	if err := ValidateName("group", group+ReplayGroupSuffix); err != nil {
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
	return deadletter.Replay(ctx, c.deadLetterDB(), dlq, topic, group, limit)
}

// deadLetterDB is what listing and replaying dead letters run on: the
// client's store, pool and engines, with the claim options' defaults.
func (c *Client) deadLetterDB() *deadletter.DB {
	return &deadletter.DB{Store: c.store, Pool: c.pool, Reader: c.reader, Publisher: c.publisher,
		Claim: c.claimParams("", "", nil)}
}
