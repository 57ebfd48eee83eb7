package pgmsg

import (
	"context"
	"time"
)

// Backend is the log as an application sees it (publish, consume in a
// group, administer topics and groups), with two implementations: the
// PostgreSQL one, NewBackend(client), and the Kafka one in package
// pgmsgkafka. An application written against Backend, LogProducer and
// LogConsumer moves between them by changing the constructor; the same
// conformance suite (internal/conformance) runs against both.
//
// What exists on one side only stays off the interface: ProcessTx and
// CommitTx (the handler's writes and the group's progress in one
// PostgreSQL transaction: exactly-once effects in PostgreSQL) are on
// *Consumer and *Client; Kafka transactions are options of the Kafka
// client (pgmsgkafka.Backend.Client). docs/backends.md shows the
// equivalents and the differences in behaviour.
type Backend interface {
	LogAdmin
	// Publish stores records (each naming its Topic) and waits for them;
	// on success each record's Partition, Offset and Timestamp are set.
	// A record goes to the partition PartitionForKey picks for its key
	// (Kafka's default partitioner), or to Record.Partition under
	// PublishOpts.ManualPartition; records without a key share a random
	// partition. On PostgreSQL the call is atomic; on Kafka each
	// partition's records are stored or fail on their own.
	Publish(ctx context.Context, records []*Record, opts *PublishOpts) error
	// NewLogProducer returns a batching producer (cfg nil: defaults).
	NewLogProducer(cfg *ProducerConfig) (LogProducer, error)
	// NewLogConsumer returns a member of group reading topics (opts nil:
	// defaults). Close it when done.
	NewLogConsumer(group string, topics []string, opts *LogConsumerOpts) (LogConsumer, error)
	// Close releases what the backend holds (the Kafka connections; on
	// PostgreSQL nothing: the caller owns the Client).
	Close()
}

// LogAdmin creates, describes and deletes topics and lists, describes and
// resets consumer groups. *Client implements it.
type LogAdmin interface {
	// CreateTopic fails with ErrTopicExists, ErrInvalidName or
	// ErrInvalidArgument.
	CreateTopic(ctx context.Context, name string, cfg TopicConfig) (*Topic, error)
	// DescribeTopic fails with ErrUnknownTopic.
	DescribeTopic(ctx context.Context, name string) (*TopicDescription, error)
	// DeleteTopic fails with ErrUnknownTopic.
	DeleteTopic(ctx context.Context, name string) error
	// ListGroups returns the partitions of every group with their cursor
	// and lag, optionally of one topic and/or group ("" for all).
	ListGroups(ctx context.Context, topic, group string) ([]GroupPartition, error)
	// DescribeGroup fails with ErrUnknownGroup.
	DescribeGroup(ctx context.Context, topic, group string) (*GroupDescription, error)
	// ResetGroup moves group's cursors on topic (or one partition) to
	// PositionEarliest, PositionLatest, an offset or an RFC 3339
	// timestamp, and returns them. Kafka refuses it while the group has
	// members (as kafka-consumer-groups --reset-offsets does).
	ResetGroup(ctx context.Context, topic, group, position string, partition *int32) ([]GroupPartition, error)
}

// LogProducer batches records from many goroutines; records to one
// partition are stored in the order Produce was called. *Producer
// implements it.
type LogProducer interface {
	// Produce queues rec and calls promise once it is stored (Partition,
	// Offset and Timestamp set) or failed.
	Produce(ctx context.Context, rec *Record, promise func(*Record, error))
	// ProduceSync produces records and waits for them; the first error.
	ProduceSync(ctx context.Context, records ...*Record) error
	// Flush waits until every record produced before it is stored or failed.
	Flush(ctx context.Context) error
	// Close flushes and stops the producer.
	Close(ctx context.Context) error
}

// LogConsumer is one member of a consumer group. *Consumer implements it.
type LogConsumer interface {
	// Run hands claims (records of one partition, in offset order) to
	// handler until ctx ends. A claim is committed when handler returns
	// nil; when it returns an error, the same records are handed over
	// again after LogConsumerOpts.RedeliveryBackoff (doubling). Records
	// handled but not committed when a member stops are delivered again,
	// to whichever member owns their partition then.
	Run(ctx context.Context, handler func(ctx context.Context, cl *Claim) error) error
	// Assignment returns the partitions this member owns now, per topic.
	Assignment() map[string][]int32
	// MemberID is this member's id in the group.
	MemberID() string
	// Close leaves the group: its partitions move to the other members.
	// Call it after Run returns.
	Close()
}

// LogConsumerOpts configure a LogConsumer; nil means defaults. Each field
// has the same meaning on both backends.
type LogConsumerOpts struct {
	// Start is where a group that has no cursor yet starts:
	// PositionEarliest (default), PositionLatest, an offset or an RFC 3339
	// timestamp.
	Start string
	// MaxRecords caps the records of a claim. Default 100 (on PostgreSQL
	// a consumer left at the default grows it up to 1,000 while its
	// claims come back full: ClaimOpts.MaxRecords).
	MaxRecords int
	// MemberID names the member. Default: generated. (On Kafka the broker
	// assigns member ids; this becomes the client id.)
	MemberID string
	// HeartbeatInterval is how often the member heartbeats. Default 3s.
	HeartbeatInterval time.Duration
	// SessionTimeout is how long the group waits for a heartbeat before it
	// moves the member's partitions. Default 10s on PostgreSQL, 45s on
	// Kafka.
	SessionTimeout time.Duration
	// RedeliveryBackoff is the wait before records a handler failed on are
	// handed over again; it doubles up to RedeliveryBackoffMax. Defaults
	// 100ms and 30s.
	RedeliveryBackoff    time.Duration
	RedeliveryBackoffMax time.Duration
	// OnAssigned, OnRevoked and OnLost are called as in ConsumerOpts:
	// partitions newly assigned, handed over to another member (in-flight
	// work is finished first), or lost without a hand-over.
	OnAssigned func(topic string, partitions []int32)
	OnRevoked  func(topic string, partitions []int32)
	OnLost     func(topic string, partitions []int32)
}

// Interface checks: the PostgreSQL types are the interfaces' first
// implementation.
var (
	_ LogAdmin    = (*Client)(nil)
	_ LogProducer = (*Producer)(nil)
	_ LogConsumer = (*Consumer)(nil)
	_ Backend     = (*pgBackend)(nil)
)

// NewBackend returns client as a Backend. Closing the backend leaves the
// client open: its owner closes it.
func NewBackend(client *Client) Backend { return &pgBackend{client} }

type pgBackend struct{ *Client }

func (b *pgBackend) NewLogProducer(cfg *ProducerConfig) (LogProducer, error) {
	return b.NewProducer(cfg)
}

func (b *pgBackend) NewLogConsumer(group string, topics []string, opts *LogConsumerOpts) (LogConsumer, error) {
	o := LogConsumerOpts{}
	if opts != nil {
		o = *opts
	}
	return b.NewGroupConsumer(group, topics, &ConsumerOpts{
		Claim:             ClaimOpts{Start: o.Start, MaxRecords: o.MaxRecords},
		MemberID:          o.MemberID,
		HeartbeatInterval: o.HeartbeatInterval, SessionTimeout: o.SessionTimeout,
		RedeliveryBackoff: o.RedeliveryBackoff, RedeliveryBackoffMax: o.RedeliveryBackoffMax,
		OnAssigned: o.OnAssigned, OnRevoked: o.OnRevoked, OnLost: o.OnLost,
	})
}

// Close does nothing: the client belongs to the caller of NewBackend.
func (b *pgBackend) Close() {}
