package pgmsg

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
)

// Record is one entry of a topic partition. To publish, set Topic, Value and
// optionally Key, Headers and Timestamp; pgmsg fills in Partition, Offset and
// (when zero) Timestamp. Partition is only read when the publish asks for
// manual partitioning (PublishOpts.ManualPartition).
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

func encodeHeaders(h map[string][]byte) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(h))
	for k, v := range h {
		m[k] = base64.StdEncoding.EncodeToString(v)
	}
	return json.Marshal(m)
}

func decodeHeaders(raw []byte) (map[string][]byte, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("pgmsg: decode headers: %w", err)
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("pgmsg: decode header %q: %w", k, err)
		}
		out[k] = b
	}
	return out, nil
}
