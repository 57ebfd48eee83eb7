package pgmsgtype

import "time"

// Record is one entry of a topic partition. To publish, set Topic, Value and
// optionally Key, Headers and Timestamp; pgmsg fills in Partition, Offset and
// (when zero) Timestamp. Partition is only read when the publish asks for
// manual partitioning (pgmsg.PublishOpts.ManualPartition).
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	// Key is optional. Records with the same key go to the same partition,
	// the one Kafka's default partitioner would pick.
	Key   []byte
	Value []byte
	// Headers are optional name -> bytes pairs, stored as a jsonb object
	// whose values are base64.
	Headers map[string][]byte
	// Timestamp is set by the producer, or on publish (database clock) when zero.
	Timestamp time.Time
}
