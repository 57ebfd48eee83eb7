package pgmsg

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Record is one entry of a topic partition (pgmsgtype.Record). To publish,
// set Topic, Value and optionally Key, Headers and Timestamp; pgmsg fills in
// Partition, Offset and (when zero) Timestamp.
type Record = pgmsgtype.Record

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
