package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgmsg/pgmsg"
)

// Value encodings: how a value travels in JSON.
const (
	// EncodingJSON: the value is any JSON document, stored as its compact text.
	EncodingJSON = "json"
	// EncodingText: the value is a JSON string, stored as its UTF-8 bytes.
	EncodingText = "text"
	// EncodingBase64: the value is a JSON string of standard base64, for binary.
	EncodingBase64 = "base64"
	// EncodingAuto (responses only): JSON if the stored bytes are JSON that
	// every parser accepts (valid UTF-8, no lone surrogate escape), else
	// text if they are UTF-8, else base64; each record says which.
	EncodingAuto = "auto"
)

// decodeBody decodes the JSON request body into v: 413 when it is over
// MaxBodyBytes, 400 malformed_json when it is not exactly one JSON value
// of the expected shape, 415 unsupported_media_type unless the content
// type is JSON (requireJSON).
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, s.cfg.MaxBodyBytes)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return jsonError(err, s.cfg.MaxBodyBytes)
		}
		return newAPIError(errMalformedJSON, "malformed JSON: the body must hold exactly one JSON object")
	}
	return nil
}

// requireJSON returns 415 unsupported_media_type unless the request says
// its body is JSON: Content-Type application/json (or application/*+json),
// parameters such as charset allowed. A missing type and the types a
// browser may send cross-site without a CORS preflight (form encodings,
// text/plain) are refused, so that a web page cannot post to the API.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return newAPIError(errUnsupportedMedia, "missing Content-Type: send the body as application/json")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
		return newAPIError(errUnsupportedMedia, "content type %q is not supported: send application/json (with curl: -H 'Content-Type: application/json')", ct)
	}
	return nil
}

func jsonError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return newAPIError(errBodyTooLarge, "request body is larger than the server's limit of %d bytes", limit)
	case errors.Is(err, io.EOF):
		return newAPIError(errMalformedJSON, "malformed JSON: the body is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newAPIError(errMalformedJSON, "malformed JSON: the body ends early")
	case errors.As(err, &se):
		return newAPIError(errMalformedJSON, "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field != "" {
			return newAPIError(errMalformedJSON, "malformed JSON: field %q must be %s, got %s", te.Field, te.Type, te.Value)
		}
		return newAPIError(errMalformedJSON, "malformed JSON: expected %s, got %s", te.Type, te.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return newAPIError(errMalformedJSON, "malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return newAPIError(errMalformedJSON, "malformed JSON: %v", err)
}

// decodeValue turns a request's JSON value into stored bytes. An absent or
// null value is stored as NULL.
func decodeValue(raw json.RawMessage, enc, what string) ([]byte, error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	switch enc {
	case "", EncodingJSON:
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return nil, newAPIError(errMalformedJSON, "%s is not JSON: %v", what, err)
		}
		return buf.Bytes(), nil
	case EncodingText, EncodingBase64:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, newAPIError(errInvalidParameter, "%s must be a JSON string with encoding %q", what, enc)
		}
		if enc == EncodingText {
			return []byte(s), nil
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, newAPIError(errInvalidParameter, "%s is not valid base64: %v", what, err)
		}
		return b, nil
	}
	return nil, newAPIError(errInvalidParameter, "invalid encoding %q: use json, text or base64", enc)
}

// decodeText decodes a key or header value: text (default) or base64.
func decodeText(s, enc, what string) ([]byte, error) {
	switch enc {
	case "", EncodingText:
		return []byte(s), nil
	case EncodingBase64:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, newAPIError(errInvalidParameter, "%s is not valid base64: %v", what, err)
		}
		return b, nil
	}
	return nil, newAPIError(errInvalidParameter, "invalid key_encoding %q: use text or base64", enc)
}

// RecordJSON is a record as the API (and `pgmsg consume`) prints it.
type RecordJSON struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Key is null when the record has none.
	Key         *string `json:"key"`
	KeyEncoding string  `json:"key_encoding,omitempty"`
	// Value is a JSON value, a string of text or a base64 string, as
	// ValueEncoding says; null without a ValueEncoding when the record has
	// none (null with ValueEncoding json is a value: the JSON text null).
	Value           json.RawMessage   `json:"value"`
	ValueEncoding   string            `json:"value_encoding,omitempty"`
	Headers         map[string]string `json:"headers,omitempty"`
	HeadersEncoding string            `json:"headers_encoding,omitempty"`
	Timestamp       time.Time         `json:"timestamp"`
}

// EncodeRecord renders r with its value in enc (json, text, base64 or
// auto). A value that is not valid in enc (not JSON, not UTF-8) falls back
// to base64; keys and headers are text unless they are not UTF-8. The
// encoding of every key, header and value there is is set.
func EncodeRecord(r *pgmsg.Record, enc string) RecordJSON {
	out := RecordJSON{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC()}
	if r.Key != nil {
		k, e := textOrBase64(r.Key)
		out.Key, out.KeyEncoding = &k, e
	}
	out.Value, out.ValueEncoding = encodeValue(r.Value, enc)
	if len(r.Headers) > 0 {
		out.Headers = make(map[string]string, len(r.Headers))
		out.HeadersEncoding = EncodingText
		for _, v := range r.Headers {
			if !utf8.Valid(v) {
				out.HeadersEncoding = EncodingBase64
			}
		}
		for k, v := range r.Headers {
			if out.HeadersEncoding == EncodingBase64 {
				out.Headers[k] = base64.StdEncoding.EncodeToString(v)
			} else {
				out.Headers[k] = string(v)
			}
		}
	}
	return out
}

func textOrBase64(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), EncodingText
	}
	return base64.StdEncoding.EncodeToString(b), EncodingBase64
}

// encodeValue renders stored bytes in enc and says which encoding it used.
// No value (nil) is null with no encoding, so that it cannot be taken for
// a value holding the JSON text null, which is null with encoding json.
func encodeValue(v []byte, enc string) (json.RawMessage, string) {
	if v == nil {
		return json.RawMessage("null"), ""
	}
	asString := func(s string) json.RawMessage {
		b, _ := json.Marshal(s)
		return b
	}
	switch enc {
	case EncodingJSON:
		if portableJSON(v) {
			return json.RawMessage(v), EncodingJSON
		}
	case EncodingText:
		if utf8.Valid(v) {
			return asString(string(v)), EncodingText
		}
	case EncodingAuto, "":
		if portableJSON(v) {
			return json.RawMessage(v), EncodingJSON
		}
		if utf8.Valid(v) {
			return asString(string(v)), EncodingText
		}
	}
	return asString(base64.StdEncoding.EncodeToString(v)), EncodingBase64
}

// portableJSON reports whether v can be embedded as is in a JSON answer that
// every parser accepts: valid JSON, valid UTF-8 (json.Valid alone lets bytes
// such as 0xff through inside strings), and no \u escape of a lone
// surrogate (which serde, for one, refuses). Values written through the
// Go library or SQL are arbitrary bytes, so this is checked per value.
func portableJSON(v []byte) bool {
	return utf8.Valid(v) && json.Valid(v) && !hasLoneSurrogate(v)
}

// hasLoneSurrogate reports whether valid JSON v holds a \u escape of a
// UTF-16 surrogate that is not a high surrogate followed by a low one.
// Backslashes only occur in strings of valid JSON, as escapes.
func hasLoneSurrogate(v []byte) bool {
	hex4 := func(i int) rune {
		if i+6 > len(v) || v[i] != '\\' || v[i+1] != 'u' {
			return -1
		}
		n, err := strconv.ParseUint(string(v[i+2:i+6]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(n)
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			continue
		}
		if v[i+1] != 'u' {
			i++ // a two-byte escape such as \\ or \"
			continue
		}
		r := hex4(i)
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if lo := hex4(i + 6); lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		default:
			i += 5
		}
	}
	return false
}

func validOutputEncoding(enc string) error {
	switch enc {
	case EncodingAuto, EncodingJSON, EncodingText, EncodingBase64:
		return nil
	}
	return newAPIError(errInvalidParameter, "invalid encoding %q: use auto, json, text or base64", enc)
}

// query parameters

type params struct{ url.Values }

func (p params) required(name string) (string, error) {
	v := p.Get(name)
	if v == "" {
		return "", newAPIError(errInvalidParameter, "query parameter %q is required", name)
	}
	return v, nil
}

func (p params) int(name string, def int) (int, error) {
	v := p.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, newAPIError(errInvalidParameter, "query parameter %q must be an integer, got %q", name, v)
	}
	return n, nil
}

// maxBytes reads max_bytes: the byte cap of a consume or claim, at most
// limit (the server's), limit when absent.
func (p params) maxBytes(limit int64) (int64, error) {
	v := p.Get("max_bytes")
	if v == "" {
		return limit, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, newAPIError(errInvalidParameter, "query parameter \"max_bytes\" must be a positive integer, got %q", truncateParam(v))
	}
	if n > limit {
		return 0, newAPIError(errLimitExceeded, "max_bytes %d is more than the server's limit of %d", n, limit)
	}
	return n, nil
}

// truncateParam shortens a parameter value quoted in an error.
func truncateParam(v string) string {
	if len(v) > 40 {
		return v[:40] + "..."
	}
	return v
}

func (p params) optInt32(name string) (*int32, error) {
	v := p.Get(name)
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return nil, newAPIError(errInvalidParameter, "query parameter %q must be an integer, got %q", name, v)
	}
	n32 := int32(n)
	return &n32, nil
}

func (p params) bool(name string) (bool, error) {
	v := p.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, newAPIError(errInvalidParameter, "query parameter %q must be true or false, got %q", name, v)
	}
	return b, nil
}

func (p params) duration(name string, def time.Duration) (time.Duration, error) {
	v := p.Get(name)
	if v == "" {
		return def, nil
	}
	return parseDuration(name, v)
}

// parseDuration accepts a Go duration ("500ms", "5s") or a number of seconds.
func parseDuration(name, v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if !(f >= 0 && f <= 1e9) { // also refuses NaN
			return 0, newAPIError(errInvalidParameter, "%s must be between 0 and 1e9 seconds, got %q", name, v)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, newAPIError(errInvalidParameter, "%s must be a duration such as 5s or 500ms, or seconds, got %q", name, v)
	}
	if d < 0 {
		return 0, newAPIError(errInvalidParameter, "%s must not be negative, got %q", name, v)
	}
	return d, nil
}

// utcPtr is t in UTC. Answers give times in UTC: pgx and the client
// return them in the process's zone, in which a valid time near the ends
// of the UTC years 0001..9999 (a record timestamp 9999-12-31T23:59:59Z,
// east of Greenwich) falls outside them and cannot be encoded (a 500).
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// Duration is a JSON duration: "5s", "500ms" or a number of seconds.
type Duration time.Duration

// MarshalJSON writes the duration as a string such as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts a string duration or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var f float64
		if err := json.Unmarshal(b, &f); err != nil {
			return newAPIError(errMalformedJSON, "a duration must be a string such as \"30s\" or a number of seconds")
		}
		s = strconv.FormatFloat(f, 'f', -1, 64)
	}
	v, err := parseDuration("duration", s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// validNames returns 400 invalid_name unless every (kind, name) pair is a
// valid topic, group or queue name, before the name reaches the database.
func validNames(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := pgmsg.ValidateName(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}
