package httpapi

// Fuzz targets for the HTTP API's request decoders: query parameters,
// durations, value encodings, and whole requests to every route, which
// must never answer 5xx nor anything but the documented error body.
// Corpora live in testdata/fuzz/<FuzzName>; `make fuzz-smoke` fuzzes each
// target for a few seconds.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// ignoreKnown (PGMSG_FUZZ_IGNORE_KNOWN=1) skips inputs of bugs already
// reported, so that a fuzzing session can look for new ones. By default
// they fail: they are the regression tests of those bugs.
var ignoreKnown = os.Getenv("PGMSG_FUZZ_IGNORE_KNOWN") != ""

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"5s", "500ms", "0", "1.5", "-1", "1e9", "1e10", "NaN", "nan", "Inf", "-Inf", "+Inf",
		"0x10", "1_0", "9223372036s", "2562047h", "-0", "", " ", "5 s", "1e-300"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ignoreKnown && strings.Contains(strings.ToLower(s), "nan") {
			t.Skip("known bug: NaN parses as a negative duration")
		}
		d, err := parseDuration("wait", s)
		if err != nil {
			if _, ok := err.(*apiError); !ok {
				t.Fatalf("parseDuration(%q): error %T is not an API error", s, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("parseDuration(%q) = %s: accepted a negative duration", s, d)
		}
	})
}

func FuzzDecodeValue(f *testing.F) {
	for _, enc := range []string{"", "json", "text", "base64", "auto", "JSON"} {
		for _, raw := range []string{`{"a":1}`, `"aGk="`, `"x"`, `null`, `[1, 2 ]`, `"\u0000"`, `1e400`, `{`, `"\ud800"`} {
			f.Add([]byte(raw), enc)
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, enc string) {
		b, err := decodeValue(json.RawMessage(raw), enc, "value")
		if err != nil {
			if _, ok := err.(*apiError); !ok {
				t.Fatalf("decodeValue(%q, %q): error %T is not an API error", raw, enc, err)
			}
			return
		}
		if (enc == "" || enc == wire.EncodingJSON) && b != nil && !json.Valid(b) {
			t.Fatalf("decodeValue(%q, json) stored %q, which is not JSON", raw, b)
		}
		// What was stored encodes back to something a client can decode.
		out := wire.EncodeRecord(&pgmsg.Record{Value: b}, wire.EncodingAuto)
		if _, err := json.Marshal(out); err != nil {
			t.Fatalf("wire.EncodeRecord of %q: %v", b, err)
		}
	})
}

// fuzzServer is a server on a migrated schema with topic "t" (2
// partitions, one record) and queue "q" (one job), authenticating every
// request as admin, with long polls disabled so no request waits.
func fuzzServer(f *testing.F, auth bool) (*Server, *pgmsg.Client, string) {
	b := pgtest.Schema(f, &pgtest.Opts{MaxConns: 6})
	client, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema, PollInterval: 10 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(client.Close)
	srv, err := New(Config{Client: client, InsecureNoAuth: !auth, MaxWait: 10 * time.Millisecond, MaxBodyBytes: 1 << 16,
		TokenCacheTTL: -1, Logger: slog.New(slog.DiscardHandler),
		// Every fuzzed request comes from one address: with the failure
		// limiter on, all but the first ten would be answered 429 before
		// the header is parsed. The limiter has its own tests.
		AuthFailureBurst: -1})
	if err != nil {
		f.Fatal(err)
	}
	srv.Drain()
	ctx := context.Background()
	if _, err := client.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 2, SegmentRecords: 16}); err != nil {
		f.Fatal(err)
	}
	if err := client.Publish(ctx, []*pgmsg.Record{{Topic: "t", Value: []byte(`{"a":1}`)}}, nil); err != nil {
		f.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte(`{}`)}, nil); err != nil {
		f.Fatal(err)
	}
	secret := ""
	if auth {
		if secret, _, err = client.CreateToken(ctx, "p", []string{pgmsg.ScopePublish + ":t"}, nil); err != nil {
			f.Fatal(err)
		}
	}
	return srv, client, secret
}

// checkResponse fails on a 5xx and on an error answer that is not the
// documented {"error": {"code", "message"}} body.
func checkResponse(t *testing.T, w *httptest.ResponseRecorder, what string) {
	t.Helper()
	if w.Code >= 500 {
		t.Fatalf("%s: status %d: %s", what, w.Code, w.Body.Bytes())
	}
	if w.Code >= 400 {
		var eb struct {
			Error *ErrorDetail `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || eb.Error == nil || eb.Error.Code == "" {
			t.Fatalf("%s: status %d with a body that is not an error body: %.300s", what, w.Code, w.Body.Bytes())
		}
	}
}

// FuzzRequest sends a fuzzed body and query string to every route (path
// wildcards filled with a fuzzed name).
func FuzzRequest(f *testing.F) {
	seeds := []struct{ query, body, name string }{
		{"topic=t&group=g&max_records=5", `{"topic":"t","records":[{"value":{"x":1}}]}`, "t"},
		{"topic=t&group=g&wait=NaN", `{"topic":"t","encoding":"base64","records":[{"value":"!!"}]}`, "q"},
		{"queue=q&max=1&lease=1e9", `{"queue":"q","jobs":[{"payload":{"a":1}}]}`, "q"},
		{"topic=t&group=g&partition=99999999999", `{"topic":"t","group":"g","partition":0,"epoch":1}`, "g"},
		{"topic=%27;--&group=%22", `{"topic":"t","records":[{"value":1,"partition":-1}]}`, "';--"},
		{"queue=q&lease=-1s", `{"id":1,"lease_token":1}`, strings.Repeat("x", 300)},
		{"", `{"topic":"t","records":[{"value":null,"headers":{"h":"\u0000"},"timestamp":"0001-01-01T00:00:00Z"}]}`, "t"},
		{"to=earliest", `{"to":"9223372036854775808"}`, "g"},
		{"", `[]`, ""}, {"", `{"name":"n","partitions":1e9}`, "n"}, {"", "\xff\xfe", "\x00"},
	}
	for _, s := range seeds {
		f.Add(s.query, []byte(s.body), s.name)
	}
	srv, _, _ := fuzzServer(f, false)
	routes := srv.Routes()
	f.Fuzz(func(t *testing.T, query string, body []byte, name string) {
		if ignoreKnown && strings.ContainsRune(name, 0) {
			t.Skip("known bug: a NUL in a path name answers 500")
		}
		for _, rt := range routes {
			path := rt.Pattern
			for _, w := range []string{"{topic}", "{group}", "{queue}"} {
				path = strings.ReplaceAll(path, w, url.PathEscape(name))
			}
			if rt.Pattern == "/readyz" {
				continue // 503 while draining, by design
			}
			if rt.Method == http.MethodDelete && strings.Count(path, "/") <= 3 {
				continue // keep the topic and queue the other requests use
			}
			r := httptest.NewRequest(rt.Method, "http://localhost"+path, bytes.NewReader(body)) // InsecureNoAuth: loopback Host
			r.URL.RawQuery = query
			if len(body) > 0 {
				r.Header.Set("Content-Type", "application/json")
			}
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, r)
			checkResponse(t, w, rt.Method+" "+path+"?"+query)
		}
	})
}

// FuzzAuthorization sends fuzzed Authorization headers: every answer is
// 200 (the valid token) or 401 with the error body, never a 5xx.
func FuzzAuthorization(f *testing.F) {
	srv, _, secret := fuzzServer(f, true)
	for _, h := range []string{"", "Bearer", "Bearer ", "bearer x", "Basic dTpw", "Bearer " + secret, "Bearer " + secret + "x",
		"Bearer  " + secret + " ", "Bearer " + strings.Repeat("A", 10000), "Bearer \x00", "Bearer pgmsg_'--"} {
		f.Add(h)
	}
	body := `{"topic":"t","records":[{"value":1}]}`
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest(http.MethodPost, "http://x/v1/pubsub/publish", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", h)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		checkResponse(t, w, "Authorization: "+h)
		if w.Code != http.StatusOK && w.Code != http.StatusUnauthorized {
			t.Fatalf("Authorization %q: status %d: %s", h, w.Code, w.Body.Bytes())
		}
	})
}
