package logpublish

// Murmur2 is Kafka's murmur2 hash (org.apache.kafka.common.utils.Utils.murmur2),
// the hash Kafka's default partitioner applies to record keys. The root's
// pgmsg.Murmur2 is this function.
func Murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	length := len(data)
	h := seed ^ uint32(length)
	n := length / 4
	for i := 0; i < n; i++ {
		i4 := i * 4
		k := uint32(data[i4]) | uint32(data[i4+1])<<8 | uint32(data[i4+2])<<16 | uint32(data[i4+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n*4:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// PartitionForKey returns the partition Kafka's default partitioner picks
// for key among partitions: toPositive(murmur2(key)) % partitions. The SQL
// function partition_for_key computes the same; the root's
// pgmsg.PartitionForKey is this function.
func PartitionForKey(key []byte, partitions int) int32 {
	return int32((uint32(Murmur2(key)) & 0x7fffffff) % uint32(partitions))
}
