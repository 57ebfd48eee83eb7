package pgmsg

import "github.com/pgmsg/pgmsg/internal/logpublish"

// Murmur2 is Kafka's murmur2 hash (org.apache.kafka.common.utils.Utils.murmur2),
// the hash Kafka's default partitioner applies to record keys.
func Murmur2(data []byte) int32 { return logpublish.Murmur2(data) }

// PartitionForKey returns the partition Kafka's default partitioner picks
// for key among partitions: toPositive(murmur2(key)) % partitions. The SQL
// function partition_for_key computes the same.
func PartitionForKey(key []byte, partitions int) int32 {
	return logpublish.PartitionForKey(key, partitions)
}
