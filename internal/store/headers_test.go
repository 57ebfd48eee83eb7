package store

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// FuzzHeaders: decoding stored headers never panics, and encoding then
// decoding gives the headers back.
func FuzzHeaders(f *testing.F) {
	f.Add([]byte(`{"a":"YQ=="}`), "k", []byte("v"))
	f.Add([]byte(`{"a":"not base64"}`), "", []byte{})
	f.Add([]byte(`[]`), "\x00", []byte{0xff})
	f.Add([]byte(`{"a":1}`), "é", []byte("日本"))
	f.Add([]byte(`null`), `"`, []byte(`\`))
	f.Fuzz(func(t *testing.T, raw []byte, k string, v []byte) {
		_, _ = DecodeHeaders(raw)
		if !utf8.ValidString(k) {
			return // JSON object keys are UTF-8; invalid bytes are replaced
		}
		enc, err := EncodeHeaders(map[string][]byte{k: v})
		if err != nil {
			t.Fatalf("encodeHeaders: %v", err)
		}
		got, err := DecodeHeaders(enc)
		if err != nil {
			t.Fatalf("decodeHeaders(%s): %v", enc, err)
		}
		if len(got) != 1 || !bytes.Equal(got[k], v) {
			t.Fatalf("round trip of %q=%q gave %v", k, v, got)
		}
	})
}
