package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
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
		return s.jsonFail(err)
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
	jsonType := mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
	if err != nil || !jsonType {
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
	case "", wire.EncodingJSON:
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return nil, newAPIError(errMalformedJSON, "%s is not JSON: %v", what, err)
		}
		return buf.Bytes(), nil
	case wire.EncodingText, wire.EncodingBase64:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, newAPIError(errInvalidParameter, "%s must be a JSON string with encoding %q", what, enc)
		}
		if enc == wire.EncodingText {
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
	case "", wire.EncodingText:
		return []byte(s), nil
	case wire.EncodingBase64:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, newAPIError(errInvalidParameter, "%s is not valid base64: %v", what, err)
		}
		return b, nil
	}
	return nil, newAPIError(errInvalidParameter, "invalid key_encoding %q: use text or base64", enc)
}

// outputEncoding is the "encoding" query parameter of an answer that
// carries values: auto (the default), json, text or base64.
func outputEncoding(q url.Values) (string, error) {
	switch enc := q.Get("encoding"); enc {
	case "":
		return wire.EncodingAuto, nil
	case wire.EncodingAuto, wire.EncodingJSON, wire.EncodingText, wire.EncodingBase64:
		return enc, nil
	default:
		return "", newAPIError(errInvalidParameter, "invalid encoding %q: use auto, json, text or base64", enc)
	}
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

// listBody is a request body that carries a list of items (the records of
// a publish, the jobs of an enqueue, the ids of a dead-job action): one
// JSON object with an optional name field (the topic or queue the token's
// scope is checked against), the list field and a few other fields.
// decodeList reads it as a stream, so that what a request costs is
// bounded by what the server accepts, not by what the client sends.
type listBody struct {
	// nameField is the field naming the topic or queue ("" if none);
	// name receives it.
	nameField string
	name      *string
	// authorize is called as soon as the name has been read (it may be
	// read before the list), so a token without the scope is refused
	// before the list is decoded.
	authorize func(name string) error
	// listField is the list; max is the most items accepted (413
	// too_many_records beyond it: decoding stops at the item past max).
	listField string
	max       int
	// item decodes the list's next item from dec (its index i).
	item func(dec *json.Decoder, i int) error
	// fields are the body's other fields, each a pointer to decode into.
	fields map[string]any
}

// decodeList decodes a listBody: 415 unless the body is JSON, 413
// body_too_large over MaxBodyBytes, 413 too_many_records at the item past
// b.max (nothing after it is read), 400 malformed_json for anything but
// one JSON object of the known fields, each at most once (a field named
// twice could change the name after it was authorized).
func (s *Server) decodeList(w http.ResponseWriter, r *http.Request, b *listBody) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	dec.DisallowUnknownFields()
	fail := s.jsonFail
	if err := expectDelim(dec, '{', "the body must be a JSON object"); err != nil {
		return fail(err)
	}
	known := []string{b.listField}
	if b.nameField != "" {
		known = append(known, b.nameField)
	}
	for f := range b.fields {
		known = append(known, f)
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		key, _ := t.(string)
		// Keys match as encoding/json matches them: exactly, else
		// without regard to case.
		field := ""
		for _, k := range known {
			if k == key || field == "" && strings.EqualFold(k, key) {
				field = k
			}
		}
		switch {
		case field == "":
			return newAPIError(errMalformedJSON, "malformed JSON: unknown field %q", key)
		case seen[field]:
			return newAPIError(errMalformedJSON, "malformed JSON: field %q is given twice", field)
		}
		seen[field] = true
		switch field {
		case b.nameField:
			if err := dec.Decode(b.name); err != nil {
				return fail(fieldError(err, field))
			}
			if *b.name != "" && b.authorize != nil {
				if err := b.authorize(*b.name); err != nil {
					return err
				}
			}
		case b.listField:
			if err := s.decodeItems(dec, b); err != nil {
				return err
			}
		default:
			if err := dec.Decode(b.fields[field]); err != nil {
				return fail(fieldError(err, field))
			}
		}
	}
	if err := expectDelim(dec, '}', "the body must hold exactly one JSON object"); err != nil {
		return fail(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fail(err)
		}
		return newAPIError(errMalformedJSON, "malformed JSON: the body must hold exactly one JSON object")
	}
	return nil
}

// decodeItems decodes the list of b, item by item, stopping at the first
// item past b.max. A null list is an empty one.
func (s *Server) decodeItems(dec *json.Decoder, b *listBody) error {
	fail := s.jsonFail
	t, err := dec.Token()
	if err != nil {
		return fail(err)
	}
	if t == nil {
		return nil
	}
	if d, ok := t.(json.Delim); !ok || d != '[' {
		return newAPIError(errMalformedJSON, "malformed JSON: field %q must be an array", b.listField)
	}
	for i := 0; dec.More(); i++ {
		if i == b.max {
			return newAPIError(errTooManyRecords, "%s: more than the server's limit of %d per request", b.listField, b.max)
		}
		if err := b.item(dec, i); err != nil {
			return fail(fieldError(err, fmt.Sprintf("%s[%d]", b.listField, i)))
		}
	}
	if _, err := dec.Token(); err != nil {
		return fail(err)
	}
	return nil
}

// jsonFail is jsonError for a streamed body: the shape errors of
// expectDelim keep their message, and a bound an item's decoding stops at
// (jobTags) its invalid_argument.
func (s *Server) jsonFail(err error) error {
	var ae *apiError
	if errors.As(err, &ae) && errors.Is(err, errMalformedJSON) && strings.HasPrefix(ae.msg, "malformed JSON: ") ||
		errors.Is(err, pgmsg.ErrInvalidArgument) {
		return err
	}
	return jsonError(err, s.cfg.MaxBodyBytes)
}

// expectDelim reads the next token and returns a malformed_json error
// with msg unless it is d.
func expectDelim(dec *json.Decoder, d json.Delim, msg string) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if got, ok := t.(json.Delim); !ok || got != d {
		return newAPIError(errMalformedJSON, "malformed JSON: %s", msg)
	}
	return nil
}

// fieldError puts the path of the value being decoded (a field, or a
// list item) in front of a type error's field.
func fieldError(err error, path string) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		te2 := *te
		if te2.Field == "" {
			te2.Field = path
		} else {
			te2.Field = path + "." + te2.Field
		}
		return &te2
	}
	return err
}
