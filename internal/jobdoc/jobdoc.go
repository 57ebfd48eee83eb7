// Package jobdoc encodes and checks the JSON documents a job keeps (its
// progress, result and metadata) as the SQL API does, for the client-side
// checks that run before any round trip (Job.SetResult has none).
package jobdoc

import (
	"bytes"
	"encoding/json"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// MaxBytes is the largest progress or result document a job keeps: 64 KiB
// of JSON text, as PostgreSQL writes it (jsonb's text form).
const MaxBytes = 64 << 10

// Encode encodes a job's progress, result or metadata (what names it in
// errors; v may be a json.RawMessage, taken as it is) and checks it as
// job_progress and job_complete_many do (_job_document_check), as far as
// the client can: the limit applies to jsonb's text form, which adds a
// space after each ':' and ',' of compact JSON, so a document near the
// limit may pass here and still be refused by the server (PM004).
func Encode(what string, v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	var b []byte
	switch x := v.(type) {
	case json.RawMessage:
		b = x
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, errs.New(errs.InvalidArgument, "job %s: %v", what, err)
		}
	}
	if b == nil || string(bytes.TrimSpace(b)) == "null" {
		return nil, nil // none (JSON null too: SQL NULL, not a jsonb null)
	}
	switch {
	case !json.Valid(b):
		return nil, errs.New(errs.InvalidArgument, "job %s is not valid JSON", what)
	case hasJSONNul(b):
		return nil, errs.New(errs.InvalidArgument, "job %s contains a NUL character (\\u0000), which PostgreSQL's jsonb cannot store", what)
	case len(b) > MaxBytes:
		return nil, errs.New(errs.InvalidArgument, "job %s is %d bytes, more than %d", what, len(b), MaxBytes)
	}
	return b, nil
}

// hasJSONNul reports whether the JSON text b has the escape \u0000 (a
// backslash that is not itself escaped, then u0000).
func hasJSONNul(b []byte) bool {
	for i := 0; ; {
		k := bytes.Index(b[i:], []byte(`u0000`))
		if k < 0 {
			return false
		}
		k += i
		n := 0 // backslashes right before the u
		for j := k - 1; j >= 0 && b[j] == '\\'; j-- {
			n++
		}
		if n%2 == 1 {
			return true
		}
		i = k + 1
	}
}
