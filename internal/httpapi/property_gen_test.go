package httpapi

// Request generation for the HTTP property test (property_test.go): a JSON
// writer that can say what encoding/json cannot (invalid UTF-8, lone
// surrogate escapes, duplicate keys, numbers of any size), hostile values,
// and one generator per route.

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// JSON values the writer understands: nil, bool, int, int64, string (its
// bytes as they are: invalid UTF-8 stays invalid), jraw (written verbatim),
// []any and jobj (ordered, duplicate keys allowed).
type (
	jraw string
	jobj []jkv
	jkv  struct {
		k string
		v any
	}
)

func (o *jobj) add(k string, v any) { *o = append(*o, jkv{k, v}) }

func writeJV(buf *bytes.Buffer, v any) {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(x))
	case int:
		buf.WriteString(strconv.Itoa(x))
	case int64:
		buf.WriteString(strconv.FormatInt(x, 10))
	case jraw:
		buf.WriteString(string(x))
	case string:
		quoteRaw(buf, x)
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJV(buf, e)
		}
		buf.WriteByte(']')
	case jobj:
		buf.WriteByte('{')
		for i, kv := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			quoteRaw(buf, kv.k)
			buf.WriteByte(':')
			writeJV(buf, kv.v)
		}
		buf.WriteByte('}')
	default:
		panic(fmt.Sprintf("writeJV: %T", v))
	}
}

// quoteRaw writes s as a JSON string, escaping only what JSON requires and
// leaving every other byte as it is.
func quoteRaw(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			buf.WriteByte('\\')
			buf.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(buf, `\u%04x`, c)
		default:
			buf.WriteByte(c)
		}
	}
	buf.WriteByte('"')
}

func encodeJV(v any) []byte {
	var buf bytes.Buffer
	writeJV(&buf, v)
	return buf.Bytes()
}

// Hostile values. Strings are sent as JSON strings and as query and path
// values; jraw values only in JSON.
var (
	hostileStrings = []string{
		"", " ", "\x00", "a\x00b", "\xff\xfe", "\xed\xa0\x80", "\xc0\xaf", "é", "日本語", "😀", "\u202eevil", "\ufeffbom",
		"..", ".", "a/b", "%2F", "%00", "'; DROP TABLE pgmsg.topic; --", "$$", "%s%I%L", "{{schema}}", "\\", "\"",
		"<script>alert(1)</script>", "\r\nX-Injected: 1", "\t", "null", "true", "0", "-1", "*", "t1*", "keep*",
		strings.Repeat("a", 200), strings.Repeat("a", 201), strings.Repeat("é", 150), strings.Repeat("x", 3000),
		"pgm_" + strings.Repeat("A", 43), "9223372036854775808", "1e400", "NaN", "Infinity",
	}
	// hostileRawStrings are JSON strings with escapes: lone surrogates, an
	// escaped NUL, an escaped surrogate pair.
	hostileRawStrings = []jraw{`"\ud800"`, `"x\udc00y"`, `"\ud800\u0041"`, `"\u0000"`, `"\ud83d\ude00"`, `"\uDBFF\uDFFF"`, `"\/"`}
	hostileNumbers    = []jraw{
		"0", "-0", "1", "-1", "2", "2147483647", "2147483648", "-2147483649", "4294967297", "4294967298",
		"9007199254740993", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
		"123456789012345678901234567890", "1e400", "-1e400", "1e-400", "1.5", "-0.5", "1e9", "1E2", "0.0000001", "1e18",
	}
	hostileTimestamps = []string{
		"0001-01-01T00:00:00Z", "0000-12-31T23:59:59Z", "0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59Z",
		"9999-12-31T23:59:59-23:59", "10000-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "2262-04-11T23:47:16.854775807Z",
		"1677-09-21T00:12:43Z", "294277-01-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-01-01", "now", "", "infinity",
		"2026-01-01T00:00:00.123456789123Z", "-0001-01-01T00:00:00Z", "2026-01-01T25:00:00Z", "2026-01-01T00:00:00+24:00",
		"2026-01-01T00:00:00z", "2026-01-01 00:00:00Z", "\x00", "1700000000",
	}
	hostileDurations = []string{
		"0", "0s", "1ns", "1ms", "30s", "-1s", "1e9", "1e10", "NaN", "nan", "Inf", "-Inf", "9223372036s", "2562047h",
		"2562048h", "1.5", "", "5 s", "1e-300", "0x10", "1_0", "-0", "+5s", "5S", "1h1h1h", "\xff",
	}
	hostilePositions = []string{"earliest", "latest", "EARLIEST", "-1", "0", "9223372036854775807", "9223372036854775808",
		"2026-01-01T00:00:00Z", "9999-12-31T23:59:59-23:59", "1e3", " 1"}
	// nested junk: wrong types for any field.
	junkValues = []any{nil, true, false, 0, jraw("1e400"), "", []any{}, jobj{}, []any{nil, []any{jobj{{"a", []any{}}}}},
		jobj{{"a", jobj{{"b", jobj{{"c", nil}}}}}}, jraw(strings.Repeat("[", 50) + strings.Repeat("]", 50)), jraw(`{"a":1,"a":2}`)}
)

// propGen makes the values of one request. level 0 makes a valid request,
// 1 one with some hostile values, 2 one that is hostile throughout.
type propGen struct {
	r     *rand.Rand
	h     *propHarness
	level int
}

func (g *propGen) intN(n int) int { return g.r.IntN(n) }

func pick[T any](g *propGen, xs ...T) T { return xs[g.r.IntN(len(xs))] }

// hostile reports whether the next value should be hostile.
func (g *propGen) hostile() bool {
	switch g.level {
	case 0:
		return false
	case 1:
		return g.intN(5) == 0
	}
	return g.intN(4) != 0
}

// omit reports whether an optional field or parameter is left out.
func (g *propGen) omit() bool { return g.intN(2) == 0 }

// drop reports whether a required field is left out (hostile requests).
func (g *propGen) drop() bool { return g.level > 0 && g.intN(12) == 0 }

func (g *propGen) hostileString() string {
	if g.intN(40) == 0 {
		// A long string: near and over the body limit in JSON, very long
		// in a query string.
		return strings.Repeat(pick(g, "x", "é", "\x00", "\xff"), pick(g, 1<<10, 60<<10, 70<<10))
	}
	return pick(g, hostileStrings...)
}

// jstr is a string value for JSON: valid is chosen from good unless the
// value is hostile; hostile values include wrong types.
func (g *propGen) jstr(good ...string) any {
	if !g.hostile() {
		return pick(g, good...)
	}
	switch g.intN(8) {
	case 0:
		return pick(g, junkValues...)
	case 1:
		return pick(g, hostileRawStrings...)
	case 2:
		return pick(g, hostileNumbers...)
	}
	return g.hostileString()
}

// jdoc is a job's progress or result: any JSON value; hostile ones are
// too large (as sent, or only in jsonb's text form, which adds a space
// after each ',') or hold a NUL character, which jsonb refuses.
func (g *propGen) jdoc() any {
	if !g.hostile() {
		return pick[any](g, nil, int64(3), "half", jobj{{"done", int64(1)}, {"of", int64(2)}}, []any{int64(1), "x"})
	}
	switch g.intN(4) {
	case 0:
		return strings.Repeat("p", 70000)
	case 1:
		return jraw("[" + strings.Repeat("1,", 29999) + "1]")
	case 2:
		return jraw(`"a\u0000b"`)
	}
	return pick(g, junkValues...)
}

// jnum is an integer for JSON.
func (g *propGen) jnum(good ...int64) any {
	if !g.hostile() {
		return pick(g, good...)
	}
	switch g.intN(6) {
	case 0:
		return pick(g, junkValues...)
	case 1:
		return pick(g, hostileStrings...)
	}
	return pick(g, hostileNumbers...)
}

// jbig is a limit that backpressure compares with (max_depth,
// max_lag_records, max_lag_bytes): never small and positive, so that no
// publish or enqueue of the test waits out a backpressure timeout.
func (g *propGen) jbig() any {
	if !g.hostile() {
		return pick(g, int64(0), int64(1)<<40)
	}
	return pick(g, append([]any{jraw("-1"), jraw("1e400"), jraw("9223372036854775808"), jraw("-9223372036854775809"),
		jraw("1e18"), "10", jraw("0.5")}, junkValues...)...)
}

// jlimit is a claim limit (rate_limit, max_running): none (0) or one too
// loose to hold back the test's claims, or a value to refuse; never small
// and positive.
func (g *propGen) jlimit(loose int64) any {
	if !g.hostile() {
		return pick(g, int64(0), loose)
	}
	return pick(g, append([]any{jraw("-1"), jraw("-0.5"), jraw("1e400"), jraw("2e6"), jraw("9223372036854775808"), "10"},
		junkValues...)...)
}

func (g *propGen) jbool() any {
	if !g.hostile() {
		return g.intN(2) == 0
	}
	return pick(g, append([]any{"true", jraw("1"), jraw("0")}, junkValues...)...)
}

// jduration is a JSON duration: a string such as "30s" or seconds.
func (g *propGen) jduration(good ...string) any {
	if !g.hostile() {
		d := pick(g, good...)
		if secs, err := time.ParseDuration(d); err == nil && g.intN(3) == 0 {
			return jraw(strconv.FormatFloat(secs.Seconds(), 'f', -1, 64))
		}
		return d
	}
	switch g.intN(5) {
	case 0:
		return pick(g, junkValues...)
	case 1:
		return pick(g, hostileNumbers...)
	}
	return pick(g, hostileDurations...)
}

func (g *propGen) jtimestamp() any {
	if !g.hostile() {
		t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(g.intN(1<<30)) * time.Second)
		if g.intN(4) == 0 {
			t = t.In(time.FixedZone("", pick(g, -12, -1, 5, 14)*3600))
		}
		return t.Format(pick(g, time.RFC3339, time.RFC3339Nano))
	}
	if g.intN(6) == 0 {
		return pick(g, append([]any{jraw("1700000000")}, junkValues...)...)
	}
	return pick(g, hostileTimestamps...)
}

// jvalue is a record value or job payload in the given request encoding.
func (g *propGen) jvalue(enc string) any {
	if !g.hostile() {
		switch enc {
		case "text":
			return pick(g, "hello", "é 日本 😀", "", strings.Repeat("t", 300))
		case "base64":
			return base64.StdEncoding.EncodeToString(g.bytes())
		}
		return pick[any](g, nil, jraw(`{"a":1,"b":[true,null,"x"]}`), jraw(`"s"`), jraw(`1.5e3`), jraw(`[]`),
			jraw(`{"nested":{"deep":{"deeper":[1,2,{"x":"é"}]}}}`), jraw(`"\ud83d\ude00"`), jraw("\"<tag>&amp;\""))
	}
	switch g.intN(10) {
	case 0:
		// Deep nesting: past encoding/json's limit of 10000.
		n := pick(g, 100, 10001)
		return jraw(strings.Repeat("[", n) + strings.Repeat("]", n))
	case 1:
		return pick(g, hostileRawStrings...)
	case 2:
		return pick(g, hostileNumbers...)
	case 3:
		return base64.StdEncoding.EncodeToString(g.bytes())
	case 4:
		return pick[any](g, "!!", "aGk", "aGk=\n", "====", "YQ==YQ==")
	case 5:
		return jraw(`{"a":"` + strings.Repeat("\\u0000", 10) + `"}`)
	}
	return pick(g, junkValues...)
}

// bytes are random binary contents for base64 values.
func (g *propGen) bytes() []byte {
	n := pick(g, 0, 1, 3, 16, 100)
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.intN(256))
	}
	return b
}

// jheaders is a record's headers: names to text (or base64) values.
func (g *propGen) jheaders(keyEnc string) any {
	if g.hostile() && g.intN(3) == 0 {
		return pick(g, junkValues...)
	}
	h := jobj{}
	for i := 0; i < pick(g, 0, 1, 2, 3); i++ {
		k := pick(g, "trace", "content-type", "h"+strconv.Itoa(i))
		if g.hostile() {
			k = g.hostileString()
		}
		var v any = pick(g, "abc", "é", "")
		if keyEnc == "base64" {
			v = base64.StdEncoding.EncodeToString(g.bytes())
		}
		if g.hostile() {
			v = g.jstr("x")
		}
		h.add(k, v)
	}
	return h
}

// name chooses a topic, group or queue name: an existing one, an unknown
// valid one or a hostile string.
func (g *propGen) name(good []string) string {
	if !g.hostile() {
		return pick(g, good...)
	}
	if g.intN(3) == 0 {
		return pick(g, "nope", "x", "Keep", "keep.", "t1.", "-", "_", strings.Repeat("n", 200))
	}
	return g.hostileString()
}

func (g *propGen) topic() string { return g.name(g.h.topicNames()) }
func (g *propGen) group() string { return g.name([]string{"g1", "g2", "g3"}) }
func (g *propGen) queue() string { return g.name([]string{"q1", "q2", propKeepQueue}) }

// query values.
func (g *propGen) qnum(good ...int) string {
	if !g.hostile() {
		return strconv.Itoa(pick(g, good...))
	}
	if g.intN(2) == 0 {
		return string(pick(g, hostileNumbers...))
	}
	return g.hostileString()
}

func (g *propGen) qduration(good ...string) string {
	if !g.hostile() {
		return pick(g, good...)
	}
	if g.intN(3) == 0 {
		return g.hostileString()
	}
	return pick(g, hostileDurations...)
}

func (g *propGen) qstr(good ...string) string {
	if !g.hostile() {
		return pick(g, good...)
	}
	return g.hostileString()
}

// qparams are a query string's pairs, in order (names may repeat).
type qparams [][2]string

func (q *qparams) add(k, v string) { *q = append(*q, [2]string{k, v}) }

// opt adds an optional parameter half of the time (always for hostile
// requests' extra noise).
func (g *propGen) opt(q *qparams, k string, v func() string) {
	if !g.omit() {
		q.add(k, v())
	}
}

// propRoute generates requests for one route and tells the test what the
// server will check the token against.
type propRoute struct {
	query func(g *propGen) qparams
	body  func(g *propGen) any
	// scopeName returns the topic or queue whose scope the server checks
	// for a route of a topic or queue scope kind, as the server reads it
	// from the request; ok is false when the request is too malformed to
	// name one (the server refuses it before authorizing).
	scopeName func(r *propRequest) (name string, ok bool)
	// destructive routes may delete or reconfigure the topic or queue in
	// their path: the test's admin requests never aim them at the topic
	// and queue whose records and jobs it checks at the end (requests
	// with other tokens do, and must be refused).
	destructive bool
}

const (
	propKeepTopic = "keep"
	propKeepQueue = "keepq"
)

// propRoutes has one generator per route, keyed "METHOD pattern"; an alias
// (Route.Alias) uses its target's. TestPropertyCoversEveryRoute fails if a
// route has none, so a new route cannot be left out.
var propRoutes = map[string]propRoute{
	"GET /healthz": {},
	"GET /readyz":  {},
	"GET /metrics": {},

	"POST /v1/pubsub/publish": {
		body: func(g *propGen) any {
			enc := ""
			if !g.omit() {
				enc = pick(g, "json", "text", "base64")
				if g.hostile() {
					enc = pick(g, "JSON", "auto", "utf8", "", "\x00")
				}
			}
			keyEnc := ""
			if !g.omit() {
				keyEnc = pick(g, "text", "base64")
				if g.hostile() {
					keyEnc = pick(g, "json", "auto", "Base64")
				}
			}
			body := jobj{}
			if !g.drop() {
				body.add("topic", g.jstr(g.h.topicNames()...))
			}
			if enc != "" {
				body.add("encoding", enc)
			}
			if keyEnc != "" {
				body.add("key_encoding", keyEnc)
			}
			manual := g.intN(3) == 0
			n := pick(g, 1, 1, 2, 5)
			if g.hostile() && g.intN(3) == 0 {
				n = pick(g, 0, propMaxRecords+1)
			}
			recs := make([]any, n)
			for i := range recs {
				rec := jobj{}
				if !g.omit() {
					k := pick[any](g, "alice", "bob", "é")
					if keyEnc == "base64" {
						k = base64.StdEncoding.EncodeToString(g.bytes())
					}
					if g.hostile() {
						k = g.jstr("k")
					}
					rec.add("key", k)
				}
				if !g.drop() {
					rec.add("value", g.jvalue(enc))
				}
				if g.intN(3) == 0 {
					rec.add("headers", g.jheaders(keyEnc))
				}
				if manual != (g.hostile() && g.intN(4) == 0) {
					rec.add("partition", g.jnum(0, 1))
				}
				if g.intN(3) == 0 {
					rec.add("timestamp", g.jtimestamp())
				}
				recs[i] = rec
			}
			body.add("records", recs)
			return body
		},
		scopeName: bodyName(func(b *PublishRequest) string { return b.Topic }),
	},
	"GET /v1/pubsub/consume": {
		query: func(g *propGen) qparams {
			var q qparams
			if !g.drop() {
				q.add("topic", g.topic())
			}
			if !g.drop() {
				q.add("group", g.group())
			}
			g.opt(&q, "max_records", func() string { return g.qnum(1, 3, propMaxRecords) })
			g.opt(&q, "max_bytes", func() string { return g.qnum(1, 100, 1<<16) })
			g.opt(&q, "wait", func() string { return g.qduration("0", "0s", "5ms", "0.001") })
			g.opt(&q, "lease", func() string { return g.qduration("30s", "1m", "10") })
			g.opt(&q, "partition", func() string { return g.qnum(0, 1, 2) })
			g.opt(&q, "start", func() string { return g.qstr(hostilePositions[:3]...) })
			g.opt(&q, "auto_commit", func() string { return g.qstr("true", "false", "1", "0") })
			g.opt(&q, "member", func() string { return g.qstr("m1", "m2") })
			g.opt(&q, "assigned", func() string { return g.qstr("false", "true") })
			g.opt(&q, "encoding", func() string { return g.qstr("auto", "json", "text", "base64") })
			return q
		},
		scopeName: func(r *propRequest) (string, bool) { return r.url.Query().Get("topic"), true },
	},
	"POST /v1/pubsub/commit":  claimRoute("commit"),
	"POST /v1/pubsub/extend":  claimRoute("extend"),
	"POST /v1/pubsub/release": claimRoute("release"),
	// Membership in groups of their own ("mg1", "mg2"): claims of the other
	// groups, whose cursors the harness tracks, are not moved by it.
	"POST /v1/pubsub/heartbeat": membershipRoute(true),
	"POST /v1/pubsub/leave":     membershipRoute(false),

	"POST /v1/queue/enqueue": {
		body: func(g *propGen) any {
			enc := ""
			if !g.omit() {
				enc = pick(g, "json", "text", "base64")
				if g.hostile() {
					enc = pick(g, "JSON", "auto", "")
				}
			}
			body := jobj{}
			if !g.drop() {
				body.add("queue", g.jstr("q1", "q2", propKeepQueue))
			}
			if enc != "" {
				body.add("encoding", enc)
			}
			n := pick(g, 1, 1, 2, 4)
			if g.hostile() && g.intN(3) == 0 {
				n = pick(g, 0, propMaxRecords+1)
			}
			jobs := make([]any, n)
			for i := range jobs {
				j := jobj{}
				if !g.omit() || g.level == 0 {
					j.add("payload", g.jvalue(enc))
				}
				if !g.omit() {
					j.add("kind", g.jstr("email", "report", ""))
				}
				if !g.omit() {
					j.add("priority", g.jnum(0, 1, -5, 100))
				}
				if g.intN(4) == 0 {
					j.add("delay", g.jduration("0s", "1h"))
				}
				if g.intN(4) == 0 {
					j.add("run_at", g.jtimestamp())
				}
				if !g.omit() {
					j.add("max_attempts", g.jnum(1, 2, 3, 25))
				}
				if g.intN(4) == 0 {
					j.add("unique_key", g.jstr("u1", "u2", "u3"))
					if g.intN(2) == 0 {
						j.add("unique_for", g.jduration("1h", "24h"))
					}
				}
				if g.intN(4) == 0 {
					tags := []any{g.jstr("eu", "customer:42", "a.b_c")}
					if g.hostile() {
						tags = pick(g, []any{"has space"}, []any{""}, []any{strings.Repeat("t", 101)}, make([]any, 21), []any{int64(1)})
					}
					j.add("tags", tags)
				}
				if g.intN(4) == 0 {
					var md any = jobj{{"by", g.jstr("ann", "bob")}}
					if g.hostile() {
						md = pick[any](g, []any{int64(1)}, "text", jraw(`{"a": "`+strings.Repeat("m", 70000)+`"}`), jraw(`{"a": "\u0000"}`))
					}
					j.add("metadata", md)
				}
				if g.intN(4) == 0 {
					j.add("timeout", g.jduration("1s", "1h"))
				}
				if g.intN(4) == 0 {
					j.add("name", g.jstr(fmt.Sprintf("n%d", i), "a"))
				} else if i == 1 {
					j.add("tenant", g.jstr("acme", "t-2"))
				}
				if g.intN(4) == 0 {
					deps := []any{g.jstr("a", "n0"), g.jnum(1, 2, 5)}
					if g.hostile() {
						deps = pick(g, []any{int64(0)}, []any{jraw("1.5")}, []any{jobj{}}, make([]any, 1001))
					}
					j.add("depends_on", deps)
					if g.intN(2) == 0 {
						j.add("ignore_cancelled_deps", true)
					}
					if g.intN(2) == 0 {
						j.add("ignore_dead_deps", true)
					}
				}
				jobs[i] = j
			}
			body.add("jobs", jobs)
			return body
		},
		scopeName: bodyName(func(b *EnqueueRequest) string { return b.Queue }),
	},
	"POST /v1/queues/{queue}/batches": {
		body: func(g *propGen) any {
			body := jobj{}
			n := pick(g, 1, 1, 2, 4)
			if g.hostile() && g.intN(3) == 0 {
				n = pick(g, 0, propMaxRecords+1)
			}
			jobs := make([]any, n)
			for i := range jobs {
				j := jobj{}
				if !g.omit() {
					j.add("payload", g.jvalue(""))
				}
				if !g.omit() {
					j.add("kind", g.jstr("email", "report"))
				}
				jobs[i] = j
			}
			body.add("jobs", jobs)
			// Callbacks go to a queue the test never claims from (a
			// callback's job is no enqueue's answer).
			for _, f := range []string{"on_complete", "on_discard", "on_finished"} {
				if g.omit() {
					continue
				}
				var cb any = jobj{{"kind", g.jstr("done", "report")}, {"queue", "cbq"}, {"args", jobj{{"n", g.jnum(1, 2)}}}}
				if g.hostile() {
					cb = pick[any](g, jobj{{"queue", "cbq"}}, jobj{{"kind", "k"}, {"queue", "has space"}},
						jobj{{"kind", "k"}, {"queue", "cbq"}, {"priority", int64(99999)}}, jobj{{"kind", "k"}, {"other", int64(1)}}, "text")
				}
				body.add(f, cb)
			}
			return body
		},
		scopeName: func(r *propRequest) (string, bool) {
			q := strings.TrimSuffix(strings.TrimPrefix(r.url.Path, "/v1/queues/"), "/batches")
			return q, validNames("queue", q) == nil // a bad name is refused first
		},
	},
	"GET /v1/batches/{id}": {},
	"GET /v1/queue/claim": {
		query: func(g *propGen) qparams {
			var q qparams
			if !g.drop() {
				q.add("queue", g.queue())
			}
			g.opt(&q, "max", func() string { return g.qnum(1, 2, 5) })
			g.opt(&q, "max_bytes", func() string { return g.qnum(1, 100, 1<<16) })
			g.opt(&q, "lease", func() string { return g.qduration("30s", "1m", "0.5") })
			g.opt(&q, "wait", func() string { return g.qduration("0", "5ms") })
			g.opt(&q, "encoding", func() string { return g.qstr("auto", "json", "text", "base64") })
			g.opt(&q, "worker", func() string { return g.qstr("w1", "w2") })
			return q
		},
		scopeName: func(r *propRequest) (string, bool) { return r.url.Query().Get("queue"), true },
	},
	"POST /v1/queue/ack":      jobRoute("ack"),
	"POST /v1/queue/fail":     jobRoute("fail"),
	"POST /v1/queue/extend":   jobRoute("extend"),
	"POST /v1/queue/progress": jobRoute("progress"),

	"GET /v1/queues":         {},
	"POST /v1/queues":        {body: func(g *propGen) any { return queueSettingsBody(g, true) }},
	"GET /v1/queues/{queue}": {},
	"PATCH /v1/queues/{queue}": {
		body:        func(g *propGen) any { return queueSettingsBody(g, false) },
		destructive: true,
	},
	"GET /v1/queues/{queue}/dead": {
		query: func(g *propGen) qparams {
			var q qparams
			g.opt(&q, "limit", func() string { return g.qnum(1, 10, propMaxRecords) })
			g.opt(&q, "after_id", func() string { return g.qnum(0, 1, 5) })
			g.opt(&q, "kind", func() string { return g.qstr("email", "report") })
			g.opt(&q, "encoding", func() string { return g.qstr("auto", "json", "text", "base64") })
			return q
		},
	},
	"GET /v1/queues/{queue}/jobs": {
		query: func(g *propGen) qparams {
			var q qparams
			g.opt(&q, "state", func() string { return g.qstr("available", "running", "dead", "completed", "cancelled") })
			g.opt(&q, "kind", func() string { return g.qstr("email", "report") })
			g.opt(&q, "tag", func() string { return g.qstr("eu", "customer:42") })
			g.opt(&q, "since", func() string { return g.qstr("2026-01-01T00:00:00Z", "2000-01-01T00:00:00.5+02:00") })
			g.opt(&q, "until", func() string { return g.qstr("2999-01-01T00:00:00Z", "9999-12-31T23:59:59Z") })
			g.opt(&q, "limit", func() string { return g.qnum(1, 10, 1000) })
			g.opt(&q, "after_id", func() string { return g.qnum(0, 1, 5) })
			g.opt(&q, "encoding", func() string { return g.qstr("auto", "json", "text", "base64") })
			return q
		},
	},
	"POST /v1/queues/{queue}/dead/requeue": {body: func(g *propGen) any { return deadBody(g, false) }, destructive: true},
	"POST /v1/queues/{queue}/dead/purge":   {body: func(g *propGen) any { return deadBody(g, true) }, destructive: true},
	"POST /v1/jobs/{id}/retry":             {destructive: true}, // the path's id is chosen by the harness
	"GET /v1/jobs/{id}": {
		query: func(g *propGen) qparams {
			var q qparams
			g.opt(&q, "encoding", func() string { return g.qstr("auto", "json", "text", "base64") })
			return q
		},
	},
	"GET /v1/jobs/{id}/workflow": {
		query: func(g *propGen) qparams {
			var q qparams
			g.opt(&q, "limit", func() string { return g.qnum(1, 10, 100000) })
			return q
		},
	},
	"GET /v1/jobs/{id}/logs":                         {},
	"POST /v1/queues/{queue}/pause":                  {destructive: true},
	"POST /v1/queues/{queue}/resume":                 {destructive: true},
	"GET /v1/queues/{queue}/sequences":               {},
	"POST /v1/queues/{queue}/sequences/{key}/resume": {},
	"GET /v1/queues/{queue}/limit-keys": {
		query: func(g *propGen) qparams {
			var q qparams
			g.opt(&q, "limit", func() string { return g.qnum(1, 10, 10000) })
			g.opt(&q, "after", func() string { return g.qstr("a", "customer-42", "seq-9") })
			return q
		},
	},
	"GET /v1/queues/{queue}/tenants": {
		query: func(g *propGen) qparams {
			var q qparams
			g.opt(&q, "limit", func() string { return g.qnum(1, 10, 10000) })
			g.opt(&q, "after", func() string { return g.qstr("a", "acme", "tenant-9") })
			return q
		},
	},
	"PUT /v1/queues/{queue}/tenants/{tenant}": {
		body: func(g *propGen) any {
			body := jobj{}
			if !g.drop() {
				body.add("weight", pick[any](g, jraw("1"), jraw("2.5"), jraw("0.001"), jraw("1000000"), jraw("0"), jraw("-1"), jraw("1e7"), "x"))
			}
			return body
		},
	},
	"GET /v1/queues/{queue}/periodic": {
		query: func(g *propGen) qparams {
			var q qparams
			g.opt(&q, "encoding", func() string { return g.qstr("auto", "json", "text", "base64") })
			return q
		},
	},
	"PUT /v1/queues/{queue}/periodic/{name}": {
		body: func(g *propGen) any {
			body := jobj{}
			if !g.drop() {
				body.add("schedule", g.jstr("@hourly", "*/5 * * * *", "@every 1m", "0 9 * * MON-FRI"))
			}
			if !g.omit() {
				body.add("time_zone", g.jstr("UTC", "Europe/Paris", "America/New_York"))
			}
			enc := ""
			if g.intN(3) == 0 {
				enc = pick(g, "json", "text", "base64")
				body.add("encoding", enc)
			}
			if !g.omit() {
				body.add("payload", g.jvalue(enc))
			}
			if !g.omit() {
				body.add("kind", g.jstr("report", ""))
			}
			if g.intN(3) == 0 {
				body.add("priority", g.jnum(0, 1, -5))
			}
			if g.intN(3) == 0 {
				body.add("max_attempts", g.jnum(1, 3))
			}
			if g.intN(4) == 0 {
				body.add("timeout", g.jduration("1s", "1h"))
			}
			if g.intN(4) == 0 {
				tags := []any{g.jstr("nightly", "eu")}
				if g.hostile() {
					tags = pick(g, []any{"has space"}, make([]any, 21), []any{int64(1)})
				}
				body.add("tags", tags)
			}
			if g.intN(4) == 0 {
				body.add("metadata", jobj{{"by", g.jstr("ann")}})
			}
			if g.intN(4) == 0 {
				body.add("run_on_start", g.jbool())
			}
			return body
		},
		destructive: true,
	},
	"DELETE /v1/queues/{queue}/periodic/{name}": {destructive: true},

	"GET /v1/topics": {},
	"POST /v1/topics": {
		body: func(g *propGen) any {
			body := jobj{}
			if !g.drop() {
				body.add("name", g.jstr("t1", "t2", "n1", "n2", propKeepTopic))
			}
			if !g.omit() {
				body.add("partitions", g.jnum(1, 2, 3))
			}
			if !g.omit() {
				body.add("segment_records", g.jnum(16, 1000, 1<<20))
			}
			if !g.omit() {
				body.add("max_record_bytes", g.jnum(100, 1<<20))
			}
			if g.intN(3) == 0 {
				body.add("settings", topicSettings(g))
			}
			return body
		},
	},
	"GET /v1/topics/{topic}": {},
	"PATCH /v1/topics/{topic}": {
		body: func(g *propGen) any {
			body := jobj{}
			if !g.drop() {
				body.add("settings", topicSettings(g))
			}
			return body
		},
		destructive: true,
	},
	"DELETE /v1/topics/{topic}": {destructive: true},
	"GET /v1/topics/{topic}/offsets": {
		query: func(g *propGen) qparams {
			var q qparams
			if !g.drop() {
				q.add("time", g.qstr("2026-01-01T00:00:00Z", "2000-01-01T00:00:00.5+02:00", "9999-12-31T23:59:59Z"))
			}
			return q
		},
	},

	"GET /v1/groups": {
		query: func(g *propGen) qparams {
			var q qparams
			g.opt(&q, "topic", g.topic)
			g.opt(&q, "group", g.group)
			g.opt(&q, "partitions", func() string { return g.qstr("true", "false") })
			return q
		},
	},
	"GET /v1/topics/{topic}/groups": {
		query: func(g *propGen) qparams {
			var q qparams
			g.opt(&q, "group", g.group)
			g.opt(&q, "partitions", func() string { return g.qstr("true", "false") })
			return q
		},
	},
	"GET /v1/topics/{topic}/groups/{group}": {},
	"POST /v1/topics/{topic}/groups/{group}/reset": {
		body: func(g *propGen) any {
			body := jobj{}
			if !g.drop() {
				body.add("to", g.jstr(hostilePositions[:3]...))
			}
			if !g.omit() {
				body.add("partition", g.jnum(0, 1))
			}
			return body
		},
	},
	"DELETE /v1/topics/{topic}/groups/{group}": {},
	"GET /v1/topics/{topic}/groups/{group}/dlq": {
		query: func(g *propGen) qparams {
			var q qparams
			g.opt(&q, "limit", func() string { return g.qnum(1, 10, propMaxRecords) })
			g.opt(&q, "encoding", func() string { return g.qstr("auto", "json", "text", "base64") })
			return q
		},
	},
	"POST /v1/topics/{topic}/groups/{group}/dlq/replay": {
		query: func(g *propGen) qparams {
			var q qparams
			g.opt(&q, "limit", func() string { return g.qnum(1, 10, propMaxRecords) })
			return q
		},
		destructive: true,
	},
}

// bodyName reads the scope's name from the request body as the server
// decodes it (into the server's own request type).
func bodyName[T any](name func(*T) string) func(r *propRequest) (string, bool) {
	return func(r *propRequest) (string, bool) {
		var v T
		if err := decodeStrict(r.body, &v); err != nil {
			return "", false
		}
		return name(&v), true
	}
}

// claimRoute is commit, extend or release of a log claim: with a claim the
// test got from a consume when valid.
func claimRoute(op string) propRoute {
	return propRoute{
		body: func(g *propGen) any {
			body := jobj{}
			cl, ok := g.h.learnedClaim(g)
			if !ok || g.hostile() {
				cl = ClaimJSON{Topic: g.topic(), Group: g.group(), Partition: int32(g.intN(3)), Epoch: g.r.Int64(), StartOffset: 0, NextOffset: 1}
			}
			if !g.drop() {
				body.add("topic", g.jstr(cl.Topic))
			}
			if !g.drop() {
				body.add("group", g.jstr(cl.Group))
			}
			if !g.drop() {
				body.add("partition", g.jnum(int64(cl.Partition)))
			}
			if !g.drop() {
				epoch := cl.Epoch
				if g.hostile() {
					epoch += pick(g, int64(-1), 1)
				}
				body.add("epoch", g.jnum(epoch))
			}
			if op == "commit" && g.intN(3) == 0 {
				body.add("next_offset", g.jnum(cl.NextOffset, cl.StartOffset+1, cl.StartOffset))
			}
			if op == "extend" && !g.omit() || g.hostile() && g.intN(4) == 0 {
				body.add("lease", g.jduration("30s", "1m", "5"))
			}
			return body
		},
		scopeName: bodyName(func(b *ClaimRequest) string { return b.Topic }),
	}
}

// membershipRoute is a heartbeat (or a leave) of a member of "mg1" or
// "mg2".
func membershipRoute(heartbeat bool) propRoute {
	return propRoute{
		body: func(g *propGen) any {
			body := jobj{}
			if !g.drop() {
				body.add("topic", g.jstr(g.topic()))
			}
			if !g.drop() {
				body.add("group", g.jstr("mg1", "mg2"))
			}
			if !g.drop() {
				body.add("member", g.jstr("m1", "m2", "m3"))
			}
			if heartbeat && !g.omit() || g.hostile() && g.intN(4) == 0 {
				body.add("session_timeout", g.jduration("10s", "30s"))
			}
			return body
		},
		scopeName: bodyName(func(b *MembershipRequest) string { return b.Topic }),
	}
}

// jobRoute is ack, fail or extend of a job: with a job the test claimed
// when valid.
func jobRoute(op string) propRoute {
	return propRoute{
		body: func(g *propGen) any {
			body := jobj{}
			j, ok := g.h.learnedJob(g)
			if !ok || g.hostile() {
				j = heldJob{queue: g.queue(), id: pick(g, int64(1), int64(2), g.r.Int64N(1000)), token: pick(g, int64(1), g.r.Int64())}
				if ok && g.intN(2) == 0 {
					// The right job with a wrong token, or the reverse.
					j2, _ := g.h.learnedJob(g)
					j.id, j.queue = j2.id, j2.queue
				}
			}
			if !g.drop() {
				body.add("queue", g.jstr(j.queue))
			}
			if !g.drop() {
				body.add("id", g.jnum(j.id))
			}
			if !g.drop() {
				body.add("lease_token", g.jnum(j.token))
			}
			switch op {
			case "fail":
				if !g.omit() {
					body.add("error", g.jstr("boom", "é", strings.Repeat("e", 5000)))
				}
				if !g.omit() {
					body.add("retry_in", g.jduration("0s", "1h", "10"))
				}
				if g.intN(3) == 0 {
					body.add("dead", g.jbool())
				}
			case "extend":
				if !g.omit() {
					body.add("lease", g.jduration("30s", "1m"))
				}
			case "ack":
				if !g.omit() {
					body.add("result", g.jdoc())
				}
			case "progress":
				if !g.drop() {
					body.add("progress", g.jdoc())
				}
			}
			if g.hostile() && g.intN(4) == 0 {
				// A field of another operation.
				body.add(pick(g, "lease", "dead", "retry_in", "error"), g.jduration("1s"))
			}
			return body
		},
		scopeName: bodyName(func(b *JobRequest) string { return b.Queue }),
	}
}

func queueSettingsBody(g *propGen, create bool) any {
	body := jobj{}
	if create && !g.drop() {
		body.add("name", g.jstr("q1", "q2", "nq1", "nq2", propKeepQueue))
	}
	if !create && g.hostile() && g.intN(4) == 0 {
		body.add("name", g.jstr("q1"))
	}
	for _, f := range []struct {
		k string
		v func() any
	}{
		{"max_attempts", func() any { return g.jnum(1, 3, 25) }},
		{"lease", func() any { return g.jduration("30s", "5m") }},
		{"retry_backoff", func() any { return g.jduration("1s", "10s") }},
		{"retry_backoff_max", func() any { return g.jduration("1m", "1h") }},
		{"archive_retention", func() any { return g.jduration("1h", "24h") }},
		{"max_payload_bytes", func() any { return g.jnum(1000, 1<<20) }},
		{"max_depth", g.jbig},
		{"backpressure_timeout", func() any { return g.jduration("0s") }},
		{"job_timeout", func() any { return g.jduration("0s", "30s") }},
		{"dead_retention", func() any { return g.jduration("0s", "720h") }},
		// Limits loose enough that the harness's claims are never held back.
		{"rate_limit", func() any { return g.jlimit(1000000) }},
		{"max_running", func() any { return g.jlimit(100000) }},
	} {
		if !g.omit() {
			body.add(f.k, f.v())
		}
	}
	return body
}

func deadBody(g *propGen, purge bool) any {
	if g.intN(3) == 0 {
		return nil // no body: every dead job
	}
	body := jobj{}
	if !g.omit() {
		ids := []any{}
		for i := 0; i < pick(g, 0, 1, 3); i++ {
			ids = append(ids, g.jnum(1, 2, 3, 10))
		}
		body.add("ids", ids)
	}
	if !g.omit() {
		body.add("kind", g.jstr("email", "report"))
	}
	if purge && !g.omit() || g.hostile() && g.intN(4) == 0 {
		body.add("older_than", g.jduration("0s", "1h"))
	}
	return body
}

// topicSettings is a settings object of PATCH /v1/topics/{topic} (and of
// a create).
func topicSettings(g *propGen) any {
	if g.hostile() && g.intN(4) == 0 {
		return pick(g, junkValues...)
	}
	s := jobj{}
	for i := 0; i < pick(g, 1, 2, 3); i++ {
		k := pick(g, "retention_ms", "retention_bytes", "retention_records", "hard_limit_ms", "hard_limit_bytes",
			"hard_limit_records", "group_ttl_ms", "cleanup_policy", "delete_retention_ms", "max_lag_records",
			"max_lag_bytes", "backpressure_timeout_ms", "segment_records", "max_record_bytes", "x-custom")
		var v any
		switch k {
		case "cleanup_policy":
			v = g.jstr("delete", "compact")
		case "max_lag_records", "max_lag_bytes":
			v = g.jbig()
		case "backpressure_timeout_ms":
			v = g.jnum(0)
		default:
			v = g.jnum(0, 1000, 1<<30)
		}
		if g.intN(8) == 0 {
			v = nil // removes the setting
		}
		s.add(k, v)
	}
	return s
}

// Request-level hostility.

var (
	contentTypes = []string{"", "text/plain", "application/x-www-form-urlencoded", "application/problem+json",
		"application/json; charset=latin1", "application/json;;", "application/jsonx", "multipart/form-data; boundary=x", "\xff"}
	oddMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodHead, http.MethodOptions, "TRACE", "ODD"}
	rawQueries = []string{"%", "%zz", "a=%ff%fe", "&&&=&", "topic=t1;group=g1", "topic=t1&topic=keep&group=g1&group=g2",
		"queue=q1&queue=%00", "=", "a==b", "%00=%00", strings.Repeat("a=b&", 3000), "topic=" + strings.Repeat("%C3%A9", 2000)}
)

// mutateBytes damages an encoded body.
func mutateBytes(g *propGen, b []byte) []byte {
	switch g.intN(9) {
	case 0:
		if len(b) > 0 {
			return b[:g.intN(len(b))]
		}
	case 1:
		if len(b) > 0 {
			i := g.intN(len(b))
			c := append([]byte{}, b...)
			c[i] = pick(g, byte(0), byte(0xff), byte('"'), byte('}'), byte(','), byte('\\'))
			return c
		}
	case 2:
		return append([]byte("\xef\xbb\xbf"), b...) // a BOM
	case 3:
		return append(append([]byte{}, b...), pick(g, "{}", " x", "\x00", "\n\n", "[")...)
	case 4:
		return []byte(pick(g, "", "null", "[]", "{}", "\xff", "\"x\"", "1", "{\"a\":", " ", "{\x00}"))
	case 5:
		return append([]byte("["), append(append([]byte{}, b...), ']')...)
	case 6:
		return bytes.ReplaceAll(b, []byte(`"`), []byte(`'`))
	case 7:
		return bytes.Repeat(b, pick(g, 2, 1000))
	}
	return append([]byte(" \t\r\n"), b...)
}

// byteSource is a rand source reading the fuzzer's bytes, so that the
// coverage-guided fuzzer steers the generator's choices; once they run out
// it goes on with a fixed pseudo-random sequence (a constant one would make
// rand's rejection sampling loop forever).
type byteSource struct {
	data []byte
	rest *rand.PCG
}

func (s *byteSource) Uint64() uint64 {
	if len(s.data) >= 8 {
		v := binary.LittleEndian.Uint64(s.data)
		s.data = s.data[8:]
		return v
	}
	if s.rest == nil {
		var b [8]byte
		copy(b[:], s.data)
		s.data = nil
		s.rest = rand.NewPCG(binary.LittleEndian.Uint64(b[:]), 14)
	}
	return s.rest.Uint64()
}
