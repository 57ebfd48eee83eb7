package pgmsg_test

import (
	"fmt"

	"github.com/pgmsg/pgmsg"
)

// Keys go to the partition Kafka's default partitioner picks (murmur2),
// so a key lands on the same partition number on pgmsg and on Kafka.
func ExamplePartitionForKey() {
	for _, key := range []string{"alice", "bob", "carol"} {
		fmt.Println(key, pgmsg.PartitionForKey([]byte(key), 6))
	}
	// Output:
	// alice 3
	// bob 0
	// carol 2
}
