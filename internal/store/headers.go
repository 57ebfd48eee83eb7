package store

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// EncodeHeaders encodes a record's headers as the SQL API stores them: a
// JSON object of base64 values (nil for none), which publish() takes and
// the direct publish statement inserts as jsonb.
func EncodeHeaders(h map[string][]byte) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(h))
	for k, v := range h {
		m[k] = base64.StdEncoding.EncodeToString(v)
	}
	return json.Marshal(m)
}

// DecodeHeaders turns stored headers (EncodeHeaders' form, nil or empty
// for none) back into a record's Headers.
func DecodeHeaders(raw []byte) (map[string][]byte, error) {
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
