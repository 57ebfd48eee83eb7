package httpapi

// The HTTP property test: random and hostile requests to every
// route of the server, with a token of each scope, an unknown, a revoked
// and no token, each answer checked against what the API promises:
//
//   - no 5xx (the database is up throughout), and no 3xx (a redirect sends
//     a client that follows it to another resource);
//   - a 2xx has a status the operation documents, a body (unless the
//     document says 204), valid UTF-8, JSON that every parser accepts (no
//     lone surrogate escape) and that matches the operation's schema;
//   - an error has the body {"error":{"code","message"}} with a code of
//     docs/http-api.md's table and that code's status, and the headers its
//     status promises (WWW-Authenticate, Allow, Retry-After);
//   - a request without a valid token, or with one that lacks the scope,
//     learns nothing and changes nothing: only the errors the server can
//     give before it authorizes;
//   - a refused publish or enqueue writes nothing; an accepted one writes
//     exactly its records or jobs;
//   - no position is reported by two publishes, no record is delivered
//     that no publish reported, and a record reads the same every time; no
//     job is delivered that no enqueue reported, a job's payload reads the
//     same every time, and ack, fail and extend succeed only with the
//     lease token of the job's latest claim;
//   - records published and jobs enqueued before and after the traffic
//     (HTTP and Go client, odd bytes included) are all there at the end,
//     unchanged: records identical at their offsets, read with the Go
//     client and over HTTP; jobs unchanged unless the test's own claims,
//     acks and fails changed them, and then exactly as those calls say;
//   - the server logged no warning or error.
//
// The seed is fixed (propSeedDefault); PGMSG_HTTP_PROPERTY_SEED sets
// another ("random" picks one and logs it) and PGMSG_HTTP_PROPERTY_REQUESTS
// the number of requests (default 2000). The
// requests of a seed are the same from run to run, except where they reuse
// what answers held (lease tokens, claim epochs). FuzzHTTPProperty lets the
// fuzzer drive the same generator. Requests go to the server's handler
// directly (no network), one at a time.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/wire"
)

const (
	propSeedEnv         = "PGMSG_HTTP_PROPERTY_SEED"
	propRequestsEnv     = "PGMSG_HTTP_PROPERTY_REQUESTS"
	propSeedDefault     = 15
	propRequestsDefault = 3000
	propMaxRecords      = 50
)

func TestHTTPProperty(t *testing.T) {
	t.Parallel()
	seed, requests := propSettings(t)
	t.Logf("seed %d, %d requests (%s=<n|random> and %s=<n> to change)", seed, requests, propSeedEnv, propRequestsEnv)
	h := newPropHarness(t, fmt.Sprintf("%s=%d", propSeedEnv, seed))
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	h.publishKnown("before")
	h.enqueueKnown("before")
	for i := 0; i < requests && !t.Failed(); i++ {
		// Round robin over the routes, so that each gets its share.
		h.step(rng, h.routes[i%len(h.routes)], i)
	}
	h.publishKnown("after")
	h.enqueueKnown("after")
	h.verifyStored()
	h.verifyHTTP()
	// Every route answered 2xx, and every route that needs a token also
	// refused: the generator reached its handler's success path and its
	// refusals (in runs at least as long as the default; shorter ones may
	// not reach, say, an existing group of an existing topic).
	for _, rt := range h.routes {
		st := h.stats[routeKey(rt)]
		if !t.Failed() && requests >= propRequestsDefault && (st.ok == 0 || st.refused == 0 && rt.Scope != "") {
			t.Errorf("%s: %d requests, %d 2xx, %d refused: the generator does not cover it both ways", routeKey(rt), st.sent, st.ok, st.refused)
		}
	}
	var summary []string
	for _, rt := range h.routes {
		st := h.stats[routeKey(rt)]
		summary = append(summary, fmt.Sprintf("%s %d/%d", routeKey(rt), st.ok, st.sent))
	}
	t.Logf("2xx per route: %s", strings.Join(summary, ", "))
}

// FuzzHTTPProperty lets the fuzzer drive the property test's generator:
// its input is the generator's source of randomness, so coverage guides
// which routes, values and mutations are chosen. One server and model
// serve every input of a fuzzing process, in sequence (a failure may
// depend on earlier inputs; its message shows the request). After each
// input the known records and jobs are checked in the database.
//
//	go test -run '^$' -fuzz FuzzHTTPProperty -fuzztime 2m ./internal/httpapi
func FuzzHTTPProperty(f *testing.F) {
	h := newPropHarness(f, "FuzzHTTPProperty")
	h.publishKnown("before")
	h.enqueueKnown("before")
	for _, seed := range []string{"", "\x00", "\xff\xff\xff\xff\xff\xff\xff\xff", "publish consume commit ack fail",
		strings.Repeat("\x01\x80\xfe", 40), strings.Repeat("claim", 30)} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h.t = t
		rng := rand.New(&byteSource{data: data})
		for i := 0; i < 1+min(len(data)/24, 15) && !t.Failed(); i++ {
			h.step(rng, h.routes[rng.IntN(len(h.routes))], i)
		}
		h.verifyStored()
	})
}

// TestPropertyCoversEveryRoute fails when a route has no generator in
// propRoutes (or an entry names no route): a new route must be added to
// the property test.
func TestPropertyCoversEveryRoute(t *testing.T) {
	t.Parallel()
	srv, err := New(Config{Client: &pgmsg.Client{}})
	require.NoError(t, err)
	doc := loadAPIDoc(t)
	used := map[string]bool{}
	for _, rt := range srv.Routes() {
		key := specKey(rt)
		_, ok := propRoutes[key]
		require.True(t, ok, "route %s has no generator in propRoutes (property_gen_test.go)", routeKey(rt))
		used[key] = true
		require.NotNil(t, doc.ops[routeKey(rt)], "route %s is not in docs/openapi.yaml", routeKey(rt))
		spec := propRoutes[key]
		kindScope := rt.Scope != "" && rt.Scope != pgmsg.ScopeAdmin
		require.Equal(t, kindScope, spec.scopeName != nil, "%s: scopeName must be given exactly for routes of a topic or queue scope", routeKey(rt))
	}
	for key := range propRoutes {
		require.True(t, used[key], "propRoutes has %s, which is not a route", key)
	}
}

func propSettings(t *testing.T) (uint64, int) {
	seed, requests := uint64(propSeedDefault), propRequestsDefault
	if v := os.Getenv(propSeedEnv); v != "" {
		if v == "random" {
			seed = uint64(time.Now().UnixNano())
		} else {
			n, err := strconv.ParseUint(v, 10, 64)
			require.NoError(t, err, "%s", propSeedEnv)
			seed = n
		}
	}
	if v := os.Getenv(propRequestsEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "%s", propRequestsEnv)
		requests = n
	}
	return seed, requests
}

func routeKey(rt Route) string { return rt.Method + " " + rt.Pattern }

// specKey is the propRoutes key of a route: its alias target's for an alias.
func specKey(rt Route) string {
	if rt.Alias != "" {
		return rt.Method + " " + rt.Alias
	}
	return routeKey(rt)
}

type propToken struct {
	name string
	// header is the Authorization header sent; "" sends none.
	header string
	// tok is what the server must authenticate it as; nil: refused (401).
	tok *pgmsg.Token
}

type propRequest struct {
	n       int
	level   int
	token   *propToken
	method  string
	url     *url.URL
	rawPath bool
	header  http.Header
	body    []byte
	hasBody bool
	// chunked sends the body without a Content-Length.
	chunked bool
}

func (r *propRequest) String() string {
	body := r.body
	const max = 700
	suffix := ""
	if len(body) > max {
		body, suffix = body[:max], fmt.Sprintf("... (%d bytes)", len(r.body))
	}
	uri := r.url.RequestURI()
	if len(uri) > max {
		uri = uri[:max] + fmt.Sprintf("... (%d bytes)", len(r.url.RequestURI()))
	}
	return fmt.Sprintf("request %d (level %d): %s %s token=%s content-type=%q body=%q%s",
		r.n, r.level, r.method, uri, r.token.name, r.header.Get("Content-Type"), body, suffix)
}

type routeStats struct{ sent, ok, refused int }

type propHarness struct {
	t        testing.TB
	ctx      context.Context
	client   *pgmsg.Client
	srv      *Server
	doc      *apiDoc
	logs     *logCapture
	reproduc string

	routes  []Route
	byKey   map[string]Route
	tokens  []*propToken
	admin   *propToken
	byScope map[string]*propToken
	stats   map[string]*routeStats

	// topics the test knows to exist.
	topics map[string]bool
	// positions are the (partition, offset) pairs publishes reported, with
	// the timestamp they reported, per topic (forgotten when the topic is
	// deleted).
	positions map[string]map[[2]int64]time.Time
	// records are the records delivered so far, by topic and position.
	records map[string]map[[2]int64]*seenRecord
	// claims are the log claims consumes handed out and nothing ended
	// yet, oldest first.
	claims []ClaimJSON
	// cursors are the groups' committed offsets the test knows, by
	// cursorKey: where the group's next claim of the partition must
	// start (no record skipped, none read twice after a commit).
	cursors map[string]int64
	// jobs are every job an enqueue reported, by id; jobOrder in order.
	jobs     map[int64]*jobModel
	jobOrder []int64
	// batchIDs are the batches enqueued (for GET /v1/batches/{id}).
	batchIDs []int64
	// known are the records and jobs published and enqueued by the test
	// itself, whose contents it checks at the end.
	knownRecords []knownRecord
}

// seenRecord is a delivered record, as the answers gave it.
type seenRecord struct {
	key     []byte // nil: none
	value   []byte // nil: none (null)
	json    []byte // the value as JSON when answered json, else nil
	headers map[string][]byte
	ts      time.Time
}

type knownRecord struct {
	partition int32
	offset    int64
	rec       *pgmsg.Record
	// ts is checked when the record gave one.
	ts bool
	// what says where it comes from.
	what string
}

// jobModel is what the test knows of a job from its own calls.
type jobModel struct {
	id    int64
	queue string
	// strict jobs (queue keepq, which the test's admin requests never
	// reconfigure, requeue or purge) are checked at the end against this.
	strict bool
	// first is the job as the database had it after its enqueue.
	first *pgmsg.Job
	// payload is what the job must hold, when the test knows it.
	payload    []byte
	hasPayload bool
	// delivered is the payload as the first claim answer gave it.
	delivered *seenRecord
	claims    int
	// superseded counts the claims followed by another claim before the
	// test acked or failed them: their leases ran out (the tests asks for
	// leases as short as 1ns) and the job was rescued, which records an
	// error. The last claim may have been rescued too, or not: that
	// depends on time.
	superseded int
	// token is the lease token of the latest claim, 0 when none is live
	// (never claimed, or acked or failed since).
	token     int64
	attempt   int
	maxTries  int
	completed bool
	dead      bool
	fails     int
}

type heldJob struct {
	queue     string
	id, token int64
}

// logCapture keeps the server's warnings and errors.
type logCapture struct {
	mu   sync.Mutex
	recs []string
}

func (c *logCapture) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler           { return c }
func (c *logCapture) WithGroup(string) slog.Handler                { return c }
func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	c.mu.Lock()
	c.recs = append(c.recs, b.String())
	c.mu.Unlock()
	return nil
}

func (c *logCapture) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.recs
	c.recs = nil
	return out
}

func newPropHarness(tb testing.TB, reproduce string) *propHarness {
	tb.Helper()
	b := pgtest.Schema(tb, &pgtest.Opts{MaxConns: 6})
	// The client's own background work (segments created ahead) runs
	// concurrently with the requests, so what it logs depends on timing:
	// shown, not checked.
	clientLogs := &logCapture{}
	tb.Cleanup(func() {
		for _, l := range clientLogs.take() {
			tb.Logf("the client logged: %s", l)
		}
	})
	client, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema, PollInterval: 10 * time.Millisecond, Logger: slog.New(clientLogs)})
	require.NoError(tb, err)
	tb.Cleanup(client.Close)
	logs := &logCapture{}
	srv, err := New(Config{Client: client, MaxWait: 10 * time.Millisecond, MaxBodyBytes: 1 << 16, MaxRecords: propMaxRecords,
		MaxAnswerBytes: 1 << 16, Logger: slog.New(logs),
		// Every request comes from one address: with the failure limiter
		// on, most unauthenticated requests would be answered 429 before
		// their token is looked at. The limiter has its own tests.
		AuthFailureBurst: -1})
	require.NoError(tb, err)
	tb.Cleanup(srv.Drain)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	tb.Cleanup(cancel)
	h := &propHarness{
		t: tb, ctx: ctx, client: client, srv: srv, doc: loadAPIDoc(tb), logs: logs, reproduc: reproduce,
		routes: srv.Routes(), byKey: map[string]Route{}, byScope: map[string]*propToken{}, stats: map[string]*routeStats{},
		topics: map[string]bool{}, positions: map[string]map[[2]int64]time.Time{}, records: map[string]map[[2]int64]*seenRecord{},
		jobs: map[int64]*jobModel{}, cursors: map[string]int64{},
	}
	for _, rt := range h.routes {
		h.byKey[routeKey(rt)] = rt
		h.stats[routeKey(rt)] = &routeStats{}
	}
	for name, parts := range map[string]int{propKeepTopic: 3, "t1": 2, "t2": 1} {
		_, err := client.CreateTopic(ctx, name, pgmsg.TopicConfig{Partitions: parts, SegmentRecords: 64})
		require.NoError(tb, err)
		h.topics[name] = true
	}
	for _, q := range []string{propKeepQueue, "q1", "q2"} {
		_, err := client.CreateQueue(ctx, q, pgmsg.QueueConfig{})
		require.NoError(tb, err)
	}
	newToken := func(name string, scopes ...string) *propToken {
		secret, tok, err := client.CreateToken(ctx, name, scopes, nil)
		require.NoError(tb, err)
		pt := &propToken{name: name, header: "Bearer " + secret, tok: tok}
		h.tokens = append(h.tokens, pt)
		return pt
	}
	h.admin = newToken("admin", pgmsg.ScopeAdmin)
	for _, kind := range []string{pgmsg.ScopePublish, pgmsg.ScopeConsume, pgmsg.ScopeEnqueue, pgmsg.ScopeClaim} {
		h.byScope[kind] = newToken(kind, kind+":*")
	}
	newToken("narrow", "publish:t1", "consume:t*", "enqueue:q1", "claim:q*")
	revoked := newToken("revoked", pgmsg.ScopeAdmin)
	require.NoError(tb, client.RevokeToken(ctx, revoked.tok.ID))
	revoked.tok = nil
	h.tokens = append(h.tokens,
		&propToken{name: "none"},
		&propToken{name: "unknown", header: "Bearer pgm_" + strings.Repeat("x", 43)},
		&propToken{name: "basic", header: "Basic YWRtaW46YWRtaW4="},
		&propToken{name: "bearer-only", header: "Bearer"},
		&propToken{name: "hostile", header: "Bearer pgm_'; DROP TABLE pgmsg.token; --"},
	)
	return h
}

// topicNames are the topics the test knows to exist, sorted.
func (h *propHarness) topicNames() []string {
	out := make([]string, 0, len(h.topics))
	for t := range h.topics {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func (h *propHarness) learnedClaim(g *propGen) (ClaimJSON, bool) {
	if len(h.claims) == 0 {
		return ClaimJSON{}, false
	}
	// Mostly the latest ones: older claims have often expired.
	i := len(h.claims) - 1 - g.intN(min(len(h.claims), 3))
	return h.claims[i], true
}

// jobIDForPath is a job id for a path: mostly one the test enqueued (for an
// admin request never a strict job of keepq: a retry would move its run_at),
// else an id of no job or not a number at all.
func (h *propHarness) jobIDForPath(g *propGen, admin bool) string {
	if g.intN(5) > 0 {
		var ids []int64
		for _, id := range h.jobOrder {
			if !admin || !h.jobs[id].strict {
				ids = append(ids, id)
			}
		}
		if len(ids) > 0 {
			return strconv.FormatInt(ids[g.intN(len(ids))], 10)
		}
	}
	return pick(g, "0", "-1", "999999999999", "x", "1e3", "9223372036854775808")
}

func (h *propHarness) learnedJob(g *propGen) (heldJob, bool) {
	var held []heldJob
	for _, id := range h.jobOrder {
		if m := h.jobs[id]; m.token != 0 {
			held = append(held, heldJob{queue: m.queue, id: id, token: m.token})
		}
	}
	if len(held) == 0 {
		return heldJob{}, false
	}
	return held[g.intN(len(held))], true
}

// pickToken chooses the request's token: for a valid request one that
// allows the route, else any.
func (h *propHarness) pickToken(g *propGen, rt Route) *propToken {
	if g.level == 0 {
		if rt.Scope == "" || rt.Scope == pgmsg.ScopeAdmin || g.intN(3) == 0 {
			return h.admin
		}
		return h.byScope[rt.Scope]
	}
	return pick(g, h.tokens...)
}

// allows reports whether the request's token may use rt on name.
func allows(tok *pgmsg.Token, rt Route, name string) bool {
	switch {
	case rt.Scope == "":
		return true
	case tok == nil:
		return false
	case rt.Scope == pgmsg.ScopeAdmin:
		return tok.Allows(pgmsg.ScopeAdmin, "")
	}
	return tok.Allows(rt.Scope, name)
}

// build makes one request for rt.
func (h *propHarness) build(g *propGen, rt Route, n int) *propRequest {
	spec := propRoutes[specKey(rt)]
	req := &propRequest{n: n, level: g.level, method: rt.Method, header: http.Header{}}
	req.token = h.pickToken(g, rt)
	if req.token.header != "" {
		req.header.Set("Authorization", req.token.header)
	}
	admin := req.token.tok != nil && req.token.tok.Allows(pgmsg.ScopeAdmin, "")

	// The path, with its wildcards filled.
	req.rawPath = g.level > 0 && g.intN(10) == 0
	var path, escaped strings.Builder
	for _, seg := range strings.Split(strings.TrimPrefix(rt.Pattern, "/"), "/") {
		v := seg
		switch seg {
		case "{topic}":
			v = g.topic()
			if spec.destructive && admin && v == propKeepTopic {
				v = pick(g, "t1", "t2", "n1")
			}
		case "{queue}":
			v = g.queue()
			if spec.destructive && admin && v == propKeepQueue {
				v = pick(g, "q1", "q2", "nq1")
			}
		case "{group}":
			v = g.group()
		case "{name}":
			v = g.name([]string{"p1", "p2"})
		case "{key}":
			v = g.name([]string{"k1", "k2"})
		case "{tenant}":
			v = g.name([]string{"acme", "t-2"})
		case "{id}":
			v = h.jobIDForPath(g, admin)
			if strings.HasPrefix(rt.Pattern, "/v1/batches/") && len(h.batchIDs) > 0 && g.intN(5) > 0 {
				v = strconv.FormatInt(h.batchIDs[g.intN(len(h.batchIDs))], 10)
			}
		}
		path.WriteString("/" + v)
		if req.rawPath {
			escaped.WriteString("/" + v)
		} else {
			escaped.WriteString("/" + url.PathEscape(v))
		}
	}
	req.url = &url.URL{Scheme: "http", Host: "localhost", Path: path.String()}
	if !req.rawPath {
		req.url.RawPath = escaped.String()
	}

	// The query string.
	var q qparams
	if spec.query != nil {
		q = spec.query(g)
	}
	if g.level > 0 && g.intN(4) == 0 {
		// Parameters of other routes, unknown ones, repeats.
		for i := 0; i < 1+g.intN(3); i++ {
			name := pick(g, append([]string{"x", "", "topic", "queue", "\x00"}, h.doc.params...)...)
			q.add(name, g.qstr("1"))
		}
	}
	var qs []string
	for _, kv := range q {
		qs = append(qs, url.QueryEscape(kv[0])+"="+url.QueryEscape(kv[1]))
	}
	req.url.RawQuery = strings.Join(qs, "&")
	if g.level == 2 && g.intN(8) == 0 {
		req.url.RawQuery = pick(g, req.url.RawQuery+"&", "") + pick(g, rawQueries...)
	}

	// The body.
	switch {
	case spec.body != nil:
		if v := spec.body(g); v != nil {
			req.body, req.hasBody = encodeJV(v), true
		}
	case g.level > 0 && g.intN(10) == 0:
		// A body where none is read: it must still say it is JSON.
		req.body, req.hasBody = encodeJV(pick(g, junkValues...)), true
		if g.intN(2) == 0 {
			req.header.Set("Content-Type", pick(g, contentTypes...))
		}
	}
	if req.hasBody && g.level > 0 && g.intN(10) == 0 &&
		!bytes.Contains(req.body, []byte("max_depth")) && !bytes.Contains(req.body, []byte("max_lag")) {
		// Byte-level damage (not to bodies naming backpressure limits,
		// which a flipped byte could make small enough to make the
		// test's own publishes and enqueues wait).
		req.body = mutateBytes(g, req.body)
	}
	if req.hasBody && req.header.Get("Content-Type") == "" {
		ct := pick(g, "application/json", "application/json; charset=utf-8", "Application/JSON")
		if g.level > 0 && g.intN(20) == 0 {
			ct = pick(g, contentTypes...)
		}
		if ct != "" {
			req.header.Set("Content-Type", ct)
		}
		req.chunked = g.level > 0 && g.intN(30) == 0
	}
	if g.level > 0 && g.intN(30) == 0 {
		req.method = pick(g, oddMethods...)
	}
	return req
}

// step generates, sends and checks one request for rt.
func (h *propHarness) step(rng *rand.Rand, rt Route, n int) {
	g := &propGen{r: rng, h: h, level: pick(&propGen{r: rng}, 0, 0, 1, 1, 2)}
	req := h.build(g, rt, n)
	h.do(req)
}

func (h *propHarness) httpRequest(req *propRequest) *http.Request {
	hr := httptest.NewRequest(http.MethodGet, "http://localhost/", nil)
	hr.Method = req.method
	hr.URL = req.url
	hr.RequestURI = req.url.RequestURI()
	hr.Host = "localhost"
	hr.Header = req.header.Clone()
	hr = hr.WithContext(h.ctx)
	if req.hasBody {
		hr.Body = http.NoBody
		hr.ContentLength = int64(len(req.body))
		if len(req.body) > 0 {
			hr.Body = readCloser{bytes.NewReader(req.body)}
		}
		if req.chunked {
			hr.ContentLength = -1
		}
	}
	return hr
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// do sends req, checks the answer and learns from it.
func (h *propHarness) do(req *propRequest) {
	hr := h.httpRequest(req)
	// The route the server will run: the mux's choice (the path may not
	// be the intended route's, the method may have been changed).
	_, pattern := h.srv.mux.Handler(hr)
	served, matched := h.byKey[pattern]
	if cleanPath(hr.URL.Path) != hr.URL.Path {
		// Answered 404 before the mux, which would redirect it.
		served, matched = Route{}, false
	}
	var before *writeSnapshot
	if matched && (specKey(served) == "POST /v1/pubsub/publish" || specKey(served) == "POST /v1/queue/enqueue" ||
		specKey(served) == "POST /v1/queues/{queue}/batches") {
		before = h.snapshotWrites()
	}
	w := httptest.NewRecorder()
	start := time.Now()
	h.srv.ServeHTTP(w, hr)
	if d := time.Since(start); d > time.Second {
		// Not a failure (no test depends on speed), but worth knowing.
		h.t.Logf("slow request (%s): %s", d.Round(time.Millisecond), req)
	}

	errs := h.checkAnswer(req, w, served, matched)
	if matched {
		st := h.stats[routeKey(served)]
		st.sent++
		if w.Code < 300 {
			st.ok++
		} else {
			st.refused++
		}
		if before != nil {
			errs = append(errs, h.checkWrites(served, req, w, before)...)
		}
		if w.Code < 300 {
			// Also when the answer failed a check: the model must follow
			// what the server did, or the final checks report noise.
			errs = append(errs, h.learn(served, req, hr, w)...)
		}
	}
	for _, l := range h.logs.take() {
		errs = append(errs, "the server logged: "+l)
	}
	if len(errs) > 0 {
		h.t.Errorf("%s\n%s\nanswer %d: %.1000s\nproperty violated:\n  %s",
			h.reproduc, req, w.Code, w.Body.Bytes(), strings.Join(errs, "\n  "))
	}
}

// Errors the server may give a request before it authorizes it. A request
// without a valid token gets only these, and one whose token lacks the
// scope only these and forbidden: nothing that tells whether a topic,
// group, queue or job exists, and nothing written.
var (
	unauthenticatedCodes = []string{"unauthorized", "invalid_token", "unsupported_media_type"}
	unauthorizedCodes    = []string{"forbidden", "unsupported_media_type", "malformed_json", "invalid_parameter",
		"invalid_name", "body_too_large"}
)

// checkAnswer checks what every answer must be.
func (h *propHarness) checkAnswer(req *propRequest, w *httptest.ResponseRecorder, served Route, matched bool) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	status, body := w.Code, w.Body.Bytes()
	code := ""
	switch {
	case status >= 500:
		fail("status %d: no 5xx while the database is up", status)
	case status >= 400:
		var eb ErrorBody
		if err := decodeStrict(body, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			fail("status %d with a body that is not exactly {\"error\":{\"code\",\"message\"}}: %v", status, err)
			break
		}
		code = eb.Error.Code
		if doc, ok := h.doc.codes[code]; !ok {
			fail("error code %q is not in docs/http-api.md's table", code)
		} else if doc != status {
			fail("error code %q answered with %d, documented as %d", code, status, doc)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			fail("error with Content-Type %q", ct)
		}
		for st, header := range map[int]string{401: "WWW-Authenticate", 405: "Allow", 429: "Retry-After"} {
			if status == st && w.Header().Get(header) == "" {
				fail("%d without %s", status, header)
			}
		}
		if !utf8.Valid(body) || loneSurrogate(body) >= 0 {
			fail("error body is not portable UTF-8 JSON")
		}
	case status >= 300:
		// A redirect sends a client that follows it to another resource
		// (http.ServeMux redirected ".." paths to their parent).
		fail("status %d (Location %q): the API never redirects", status, w.Header().Get("Location"))
	case status >= 200:
		if !matched {
			fail("2xx from no route")
			break
		}
		errs = append(errs, h.check2xx(served, w)...)
	default:
		fail("status %d", status)
	}
	if !matched {
		if status >= 400 && code != "not_found" && code != "method_not_allowed" {
			fail("no route matches, yet the answer is %s", code)
		}
		return errs
	}
	if served.Scope == "" || status >= 500 {
		return errs
	}
	// Authentication and authorization.
	switch tok := req.token.tok; {
	case tok == nil:
		if status < 400 || !slices.Contains(unauthenticatedCodes, code) {
			fail("token %s must be refused (%v), got %d %s", req.token.name, unauthenticatedCodes, status, code)
		}
	case served.Scope == pgmsg.ScopeAdmin:
		if !tok.Allows(pgmsg.ScopeAdmin, "") && (status < 400 || !slices.Contains(unauthorizedCodes, code)) {
			fail("token %s lacks the admin scope (%v expected), got %d %s", req.token.name, unauthorizedCodes, status, code)
		}
	default:
		spec := propRoutes[specKey(served)]
		if name, ok := spec.scopeName(req); ok && !allows(tok, served, name) &&
			(status < 400 || !slices.Contains(unauthorizedCodes, code)) {
			fail("token %s has no %s scope for %q (%v expected), got %d %s", req.token.name, served.Scope, name, unauthorizedCodes, status, code)
		}
	}
	return errs
}

// check2xx checks a success against the operation's document.
func (h *propHarness) check2xx(rt Route, w *httptest.ResponseRecorder) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	op := h.doc.ops[routeKey(rt)]
	resp, ok := op.responses[w.Code]
	if !ok {
		return []string{fmt.Sprintf("status %d is not documented for %s", w.Code, routeKey(rt))}
	}
	body := w.Body.Bytes()
	ct, _, _ := strings.Cut(w.Header().Get("Content-Type"), ";")
	switch resp.mediaType {
	case "":
		if len(body) > 0 {
			fail("%d documented without a body, got %d bytes", w.Code, len(body))
		}
	case "text/plain":
		if len(body) == 0 || !utf8.Valid(body) || ct != "text/plain" {
			fail("%d: want a UTF-8 text/plain body, got %d bytes of %q", w.Code, len(body), ct)
		}
	case "application/json":
		switch {
		case len(body) == 0:
			fail("%d with an empty body", w.Code)
		case !utf8.Valid(body):
			fail("%d body is not valid UTF-8", w.Code)
		case !json.Valid(body):
			fail("%d body is not JSON", w.Code)
		case loneSurrogate(body) >= 0:
			fail("%d body has a lone surrogate escape at byte %d (Python, jq and serde refuse it)", w.Code, loneSurrogate(body))
		case ct != "application/json":
			fail("%d body with Content-Type %q", w.Code, ct)
		default:
			v, err := decodeJSONNumbers(body)
			if err != nil {
				fail("%d body: %v", w.Code, err)
				break
			}
			for _, e := range h.doc.validate(resp.schema, v, "body") {
				fail("%d body does not match docs/openapi.yaml: %s", w.Code, e)
			}
		}
	default:
		fail("unexpected documented media type %q", resp.mediaType)
	}
	return errs
}

// writeSnapshot is what a publish or enqueue may change.
type writeSnapshot struct {
	offsets map[string][]int64 // topic -> next offset per partition
	jobs    map[string]int64   // queue -> jobs in any state
}

func (h *propHarness) snapshotWrites() *writeSnapshot {
	s := &writeSnapshot{offsets: map[string][]int64{}, jobs: map[string]int64{}}
	for _, name := range h.topicNames() {
		d, err := h.client.DescribeTopic(h.ctx, name)
		require.NoError(h.t, err)
		for _, p := range d.PartitionInfo {
			s.offsets[name] = append(s.offsets[name], p.NextOffset)
		}
	}
	stats, err := h.client.AllQueueStats(h.ctx)
	require.NoError(h.t, err)
	for _, st := range stats {
		s.jobs[st.Queue] = st.Pending + st.Available + st.Scheduled + st.Running + st.Retrying + st.Dead + st.Archived
	}
	return s
}

// checkWrites: a refused publish or enqueue wrote nothing; an accepted
// one wrote exactly what it answered.
func (h *propHarness) checkWrites(rt Route, req *propRequest, w *httptest.ResponseRecorder, before *writeSnapshot) []string {
	after := h.snapshotWrites()
	var errs []string
	wantOffsets, wantJobs := before.offsets, before.jobs
	if w.Code < 300 {
		wantOffsets, wantJobs = map[string][]int64{}, map[string]int64{}
		for k, v := range before.offsets {
			wantOffsets[k] = slices.Clone(v)
		}
		for k, v := range before.jobs {
			wantJobs[k] = v
		}
		switch specKey(rt) {
		case "POST /v1/pubsub/publish":
			var resp PublishResponse
			if err := decodeStrict(w.Body.Bytes(), &resp); err != nil {
				return []string{fmt.Sprintf("publish answer: %v", err)}
			}
			for _, r := range resp.Records {
				if offs := wantOffsets[resp.Topic]; int(r.Partition) < len(offs) {
					offs[r.Partition]++
				}
			}
		case "POST /v1/queue/enqueue", "POST /v1/queues/{queue}/batches":
			var resp struct {
				Queue   string                 `json:"queue"`
				BatchID int64                  `json:"batch_id"`
				Jobs    []*pgmsg.EnqueueResult `json:"jobs"`
			}
			if err := decodeStrict(w.Body.Bytes(), &resp); err != nil {
				return []string{fmt.Sprintf("enqueue answer: %v", err)}
			}
			for _, j := range resp.Jobs {
				if !j.Duplicate {
					wantJobs[resp.Queue]++
				}
			}
		}
	}
	for name, offs := range wantOffsets {
		if !slices.Equal(offs, after.offsets[name]) {
			errs = append(errs, fmt.Sprintf("topic %s: next offsets %v before, %v after, want %v (status %d)",
				name, before.offsets[name], after.offsets[name], offs, w.Code))
		}
	}
	for q, n := range after.jobs {
		if n != wantJobs[q] {
			errs = append(errs, fmt.Sprintf("queue %s: %d jobs before, %d after, want %d (status %d)", q, before.jobs[q], n, wantJobs[q], w.Code))
		}
	}
	return errs
}

// learn updates the model with a 2xx answer and checks it against what
// the test knows.
func (h *propHarness) learn(rt Route, req *propRequest, hr *http.Request, w *httptest.ResponseRecorder) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	body := w.Body.Bytes()
	decode := func(v any) bool {
		if err := decodeStrict(body, v); err != nil {
			fail("answer does not decode into %T: %v", v, err)
			return false
		}
		return true
	}
	switch specKey(rt) {
	case "POST /v1/pubsub/publish":
		var resp PublishResponse
		if !decode(&resp) {
			break
		}
		for _, r := range resp.Records {
			errs = append(errs, h.published(resp.Topic, r.Partition, r.Offset, r.Timestamp)...)
		}
	case "GET /v1/pubsub/consume":
		var resp ConsumeResponse
		if !decode(&resp) {
			break
		}
		errs = append(errs, h.consumed(req, &resp)...)
	case "POST /v1/pubsub/commit", "POST /v1/pubsub/release", "POST /v1/pubsub/extend":
		var cr ClaimRequest
		if err := decodeStrict(req.body, &cr); err != nil {
			fail("2xx for a body the test cannot decode: %v", err)
			break
		}
		i := slices.IndexFunc(h.claims, func(c ClaimJSON) bool {
			return c.Topic == cr.Topic && c.Group == cr.Group && c.Partition == *cr.Partition && c.Epoch == *cr.Epoch
		})
		if i < 0 {
			fail("2xx for claim %s/%s/%d epoch %d, which is not the live claim of any consume answer", cr.Topic, cr.Group, *cr.Partition, *cr.Epoch)
			break
		}
		cl := h.claims[i]
		if specKey(rt) == "POST /v1/pubsub/commit" {
			next := cl.NextOffset
			if cr.NextOffset != nil {
				next = *cr.NextOffset
			}
			// Within the claim or just past it: a commit beyond would
			// skip records the group never read.
			if next < cl.StartOffset || next > cl.NextOffset {
				fail("commit of claim [%d, %d) to %d accepted", cl.StartOffset, cl.NextOffset, next)
			}
			h.cursors[cursorKey(cl.Topic, cl.Group, cl.Partition)] = next
		}
		if specKey(rt) != "POST /v1/pubsub/extend" {
			h.claims = slices.Delete(h.claims, i, i+1)
		}
	case "POST /v1/queue/enqueue":
		var resp struct {
			Queue string                 `json:"queue"`
			Jobs  []*pgmsg.EnqueueResult `json:"jobs"`
		}
		if !decode(&resp) {
			break
		}
		var er EnqueueRequest
		if err := decodeStrict(req.body, &er); err != nil || er.Queue != resp.Queue || len(er.Jobs) != len(resp.Jobs) {
			fail("enqueue answer for queue %q with %d jobs does not match the request (%v)", resp.Queue, len(resp.Jobs), err)
			break
		}
		for _, j := range resp.Jobs {
			errs = append(errs, h.enqueued(resp.Queue, j, nil, false)...)
		}
	case "POST /v1/queues/{queue}/batches":
		var resp struct {
			Queue   string                 `json:"queue"`
			BatchID int64                  `json:"batch_id"`
			Jobs    []*pgmsg.EnqueueResult `json:"jobs"`
		}
		if !decode(&resp) {
			break
		}
		var br BatchRequest
		if err := decodeStrict(req.body, &br); err != nil || resp.Queue != hr.PathValue("queue") || len(br.Jobs) != len(resp.Jobs) || resp.BatchID < 1 {
			fail("batch answer for queue %q with %d jobs does not match the request (%v)", resp.Queue, len(resp.Jobs), err)
			break
		}
		h.batchIDs = append(h.batchIDs, resp.BatchID)
		for _, j := range resp.Jobs {
			errs = append(errs, h.enqueued(resp.Queue, j, nil, false)...)
		}
	case "GET /v1/queue/claim":
		var resp struct {
			Queue string          `json:"queue"`
			Jobs  []*wire.JobJSON `json:"jobs"`
		}
		if !decode(&resp) {
			break
		}
		if q := req.url.Query().Get("queue"); resp.Queue != q {
			fail("claim answer names queue %q, the request %q", resp.Queue, q)
		}
		for _, j := range resp.Jobs {
			errs = append(errs, h.claimed(resp.Queue, j)...)
		}
	case "POST /v1/queue/ack", "POST /v1/queue/fail", "POST /v1/queue/extend", "POST /v1/queue/progress":
		var jr JobRequest
		if err := decodeStrict(req.body, &jr); err != nil {
			fail("2xx for a body the test cannot decode: %v", err)
			break
		}
		m := h.jobs[*jr.ID]
		// The server compares the request's queue with the job's only for
		// tokens limited to some queues (for the others it is just the
		// name their scope is checked against).
		anyQueue := req.token.tok != nil && req.token.tok.Allows(pgmsg.ScopeClaim, "*")
		if m == nil || m.token == 0 || m.token != *jr.LeaseToken || (m.queue != jr.Queue && !anyQueue) {
			fail("2xx for job %d in %q with lease token %d, which is not the live lease of the job's latest claim (%+v)", *jr.ID, jr.Queue, *jr.LeaseToken, m)
			break
		}
		switch specKey(rt) {
		case "POST /v1/queue/ack":
			m.completed, m.token = true, 0
		case "POST /v1/queue/fail":
			var resp struct {
				ID    int64          `json:"id"`
				State pgmsg.JobState `json:"state"`
				RunAt time.Time      `json:"run_at"`
			}
			if !decode(&resp) {
				break
			}
			m.fails++
			m.token = 0
			wantDead := jr.Dead || m.attempt >= m.maxTries
			m.dead = resp.State == pgmsg.JobStateDead
			if m.dead != wantDead || (!m.dead && resp.State != pgmsg.JobStateRetrying) {
				fail("fail of job %d (attempt %d of %d, dead %v) answered state %s", m.id, m.attempt, m.maxTries, jr.Dead, resp.State)
			}
		}
	case "POST /v1/topics":
		var tp pgmsg.Topic
		if decode(&tp) {
			h.topics[tp.Name] = true
		}
	case "DELETE /v1/topics/{topic}":
		h.forgetTopic(hr.PathValue("topic"))
	case "POST /v1/topics/{topic}/groups/{group}/reset", "DELETE /v1/topics/{topic}/groups/{group}":
		// The group's claims may no longer hold; its cursors moved.
		topic, group := hr.PathValue("topic"), hr.PathValue("group")
		h.claims = slices.DeleteFunc(h.claims, func(c ClaimJSON) bool { return c.Topic == topic && c.Group == group })
		h.forgetCursors(topic, group)
		if specKey(rt) == "POST /v1/topics/{topic}/groups/{group}/reset" {
			var resp struct {
				Partitions []pgmsg.GroupPartition `json:"partitions"`
			}
			if !decode(&resp) {
				break
			}
			for _, gp := range resp.Partitions {
				if gp.Topic != topic || gp.Group != group {
					fail("reset of %s/%s answered partition %d of %s/%s", topic, group, gp.Partition, gp.Topic, gp.Group)
				}
				h.cursors[cursorKey(topic, group, gp.Partition)] = gp.NextOffset
			}
		}
	case "POST /v1/queues/{queue}/dead/requeue", "POST /v1/queues/{queue}/dead/purge":
		queue := hr.PathValue("queue")
		if queue == propKeepQueue {
			fail("the dead jobs of %s were changed: no request of the test may do that", propKeepQueue)
		}
		for _, m := range h.jobs {
			if m.queue == queue && m.dead {
				m.dead = false // requeued or purged: claimable, or gone
			}
		}
	case "POST /v1/jobs/{id}/retry":
		var resp struct {
			ID    int64  `json:"id"`
			State string `json:"state"`
		}
		if !decode(&resp) {
			break
		}
		if strconv.FormatInt(resp.ID, 10) != hr.PathValue("id") || resp.State != string(pgmsg.JobStateAvailable) {
			fail("retry of job %s answered %+v", hr.PathValue("id"), resp)
		}
		if m := h.jobs[resp.ID]; m == nil || m.strict {
			fail("job %d was retried: it is unknown to the test, or a job of %s that no request may change", resp.ID, propKeepQueue)
		}
	case "PATCH /v1/queues/{queue}":
		if hr.PathValue("queue") == propKeepQueue {
			fail("%s was reconfigured: no request of the test may do that", propKeepQueue)
		}
	case "PATCH /v1/topics/{topic}":
		if hr.PathValue("topic") == propKeepTopic {
			fail("%s was reconfigured: no request of the test may do that", propKeepTopic)
		}
	}
	return errs
}

func (h *propHarness) forgetTopic(topic string) {
	if topic == propKeepTopic {
		h.t.Errorf("%s: topic %s was deleted: no request of the test may do that", h.reproduc, topic)
	}
	delete(h.topics, topic)
	delete(h.positions, topic)
	delete(h.records, topic)
	h.claims = slices.DeleteFunc(h.claims, func(c ClaimJSON) bool { return c.Topic == topic })
	h.forgetCursors(topic, "")
}

func cursorKey(topic, group string, partition int32) string {
	return fmt.Sprintf("%s\x00%s\x00%d", topic, group, partition)
}

// forgetCursors forgets the cursors of a topic's group (every group if
// group is "").
func (h *propHarness) forgetCursors(topic, group string) {
	prefix := topic + "\x00"
	if group != "" {
		prefix += group + "\x00"
	}
	for k := range h.cursors {
		if strings.HasPrefix(k, prefix) {
			delete(h.cursors, k)
		}
	}
}

// published records a position a publish reported.
func (h *propHarness) published(topic string, partition int32, offset int64, ts time.Time) []string {
	pos := h.positions[topic]
	if pos == nil {
		pos = map[[2]int64]time.Time{}
		h.positions[topic] = pos
	}
	k := [2]int64{int64(partition), offset}
	if _, dup := pos[k]; dup {
		return []string{fmt.Sprintf("position %s/%d/%d reported by two publishes", topic, partition, offset)}
	}
	pos[k] = ts
	return nil
}

// consumed checks a consume answer and learns its claim and records.
func (h *propHarness) consumed(req *propRequest, resp *ConsumeResponse) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	q := req.url.Query()
	cl := resp.Claim
	if cl == nil {
		if len(resp.Records) > 0 {
			fail("records without a claim")
		}
		return errs
	}
	auto, _ := strconv.ParseBool(q.Get("auto_commit"))
	switch {
	case len(resp.Records) == 0:
		fail("a claim without records")
	case cl.Topic != q.Get("topic") || cl.Group != q.Get("group"):
		fail("claim of %s/%s for a consume of %s/%s", cl.Topic, cl.Group, q.Get("topic"), q.Get("group"))
	case cl.Committed != auto:
		fail("claim committed=%v for auto_commit=%q", cl.Committed, q.Get("auto_commit"))
	case cl.NextOffset != cl.StartOffset+int64(len(resp.Records)):
		fail("claim [%d, %d) with %d records", cl.StartOffset, cl.NextOffset, len(resp.Records))
	}
	key := cursorKey(cl.Topic, cl.Group, cl.Partition)
	if cur, ok := h.cursors[key]; ok && cl.StartOffset != cur {
		fail("claim of %s/%s/%d starts at %d, but the group's cursor is at %d: records %s", cl.Topic, cl.Group, cl.Partition,
			cl.StartOffset, cur, map[bool]string{true: "skipped", false: "delivered again after their commit"}[cl.StartOffset > cur])
	}
	h.cursors[key] = cl.StartOffset
	if cl.Committed {
		h.cursors[key] = cl.NextOffset
	}
	for i, r := range resp.Records {
		if r.Topic != cl.Topic || r.Partition != cl.Partition || r.Offset != cl.StartOffset+int64(i) {
			fail("record %d is %s/%d/%d in claim %s/%d from %d", i, r.Topic, r.Partition, r.Offset, cl.Topic, cl.Partition, cl.StartOffset)
			continue
		}
		errs = append(errs, h.seen(r)...)
	}
	if !cl.Committed {
		// A new claim of the partition ends the group's earlier ones there.
		h.claims = slices.DeleteFunc(h.claims, func(c ClaimJSON) bool {
			return c.Topic == cl.Topic && c.Group == cl.Group && c.Partition == cl.Partition
		})
		h.claims = append(h.claims, *cl)
	}
	return errs
}

// decodeRecord turns an answered record into its stored bytes.
func decodeRecord(r wire.RecordJSON) (*seenRecord, error) {
	s := &seenRecord{ts: r.Timestamp}
	var err error
	if r.Key != nil {
		if s.key, err = decodeAs(*r.Key, r.KeyEncoding, "key"); err != nil {
			return nil, err
		}
		if s.key == nil {
			s.key = []byte{}
		}
	}
	if s.value, s.json, err = decodeAnswered(r.Value, r.ValueEncoding); err != nil {
		return nil, err
	}
	if len(r.Headers) > 0 {
		s.headers = map[string][]byte{}
		for k, v := range r.Headers {
			if s.headers[k], err = decodeAs(v, r.HeadersEncoding, "header "+k); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

func decodeAs(s, enc, what string) ([]byte, error) {
	switch enc {
	case wire.EncodingText:
		return []byte(s), nil
	case wire.EncodingBase64:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", what, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%s has encoding %q (want text or base64)", what, enc)
}

// decodeAnswered decodes a value or payload as its encoding says: the
// stored bytes (nil for no value), or for JSON the JSON as answered.
func decodeAnswered(raw json.RawMessage, enc string) (value, asJSON []byte, err error) {
	if string(raw) == "null" && enc != wire.EncodingJSON {
		return nil, nil, nil
	}
	switch enc {
	case wire.EncodingJSON:
		return nil, raw, nil
	case wire.EncodingText, wire.EncodingBase64:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, fmt.Errorf("value with encoding %s is not a string: %s", enc, raw)
		}
		b, err := decodeAs(s, enc, "value")
		if b == nil && err == nil {
			b = []byte{}
		}
		return b, nil, err
	}
	return nil, nil, fmt.Errorf("value_encoding %q", enc)
}

// sameValue compares two deliveries of a value: stored bytes with stored
// bytes, JSON with JSON, and stored bytes with JSON as the server's
// encoder renders them.
func sameValue(aVal, aJSON, bVal, bJSON []byte) bool {
	// The server's rendering of a JSON value: compact, not HTML-escaped.
	render := func(v []byte) []byte {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(json.RawMessage(v)); err != nil {
			return nil
		}
		return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	switch {
	case aJSON != nil && bJSON != nil:
		return bytes.Equal(aJSON, bJSON)
	case aJSON != nil:
		return bVal != nil && bytes.Equal(render(bVal), aJSON)
	case bJSON != nil:
		return aVal != nil && bytes.Equal(render(aVal), bJSON)
	}
	return (aVal == nil) == (bVal == nil) && bytes.Equal(aVal, bVal)
}

// seen checks a delivered record against the publishes and the earlier
// deliveries of its position.
func (h *propHarness) seen(r wire.RecordJSON) []string {
	k := [2]int64{int64(r.Partition), r.Offset}
	ts, ok := h.positions[r.Topic][k]
	if !ok {
		return []string{fmt.Sprintf("record %s/%d/%d delivered, but no publish reported that position", r.Topic, r.Partition, r.Offset)}
	}
	if !ts.Equal(r.Timestamp) {
		return []string{fmt.Sprintf("record %s/%d/%d delivered with timestamp %s, its publish answered %s",
			r.Topic, r.Partition, r.Offset, r.Timestamp.Format(time.RFC3339Nano), ts.Format(time.RFC3339Nano))}
	}
	s, err := decodeRecord(r)
	if err != nil {
		return []string{fmt.Sprintf("record %s/%d/%d: %v", r.Topic, r.Partition, r.Offset, err)}
	}
	recs := h.records[r.Topic]
	if recs == nil {
		recs = map[[2]int64]*seenRecord{}
		h.records[r.Topic] = recs
	}
	prev := recs[k]
	if prev == nil {
		recs[k] = s
		return nil
	}
	if !sameRecord(prev, s) {
		return []string{fmt.Sprintf("record %s/%d/%d changed between deliveries: %+v then %+v", r.Topic, r.Partition, r.Offset, prev, s)}
	}
	if prev.json == nil && s.json != nil {
		return nil
	}
	if prev.json != nil && s.json == nil {
		recs[k] = s // keep the exact bytes
	}
	return nil
}

func sameRecord(a, b *seenRecord) bool {
	if (a.key == nil) != (b.key == nil) || !bytes.Equal(a.key, b.key) || !a.ts.Equal(b.ts) || len(a.headers) != len(b.headers) {
		return false
	}
	for k, v := range a.headers {
		if w, ok := b.headers[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return sameValue(a.value, a.json, b.value, b.json)
}

// enqueued records a job an enqueue reported (payload: what it must hold,
// when known).
func (h *propHarness) enqueued(queue string, res *pgmsg.EnqueueResult, payload []byte, known bool) []string {
	if res.Duplicate {
		m := h.jobs[res.ID]
		if m == nil || m.queue != queue {
			return []string{fmt.Sprintf("enqueue reported job %d of %s as a duplicate, but the test never enqueued it there", res.ID, queue)}
		}
		return nil
	}
	if h.jobs[res.ID] != nil {
		return []string{fmt.Sprintf("enqueue reported job %d as new twice", res.ID)}
	}
	m := &jobModel{id: res.ID, queue: queue, strict: queue == propKeepQueue, payload: payload, hasPayload: known}
	if m.strict {
		j, err := h.client.GetJob(h.ctx, res.ID)
		require.NoError(h.t, err)
		m.first = j
	}
	h.jobs[res.ID] = m
	h.jobOrder = append(h.jobOrder, res.ID)
	return nil
}

// claimed checks a job a claim answer handed out and learns its lease.
func (h *propHarness) claimed(queue string, j *wire.JobJSON) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	m := h.jobs[j.ID]
	if m == nil || m.queue != queue {
		return []string{fmt.Sprintf("claim handed out job %d of %q, which no enqueue to that queue reported", j.ID, queue)}
	}
	if m.completed || m.dead {
		fail("claim handed out job %d, which was completed or dead (%+v)", j.ID, m)
	}
	if j.Queue != queue || j.State != pgmsg.JobStateRunning || j.LeaseToken <= 0 {
		fail("claimed job %d: queue %q, state %s, lease token %d", j.ID, j.Queue, j.State, j.LeaseToken)
	}
	value, asJSON, err := decodeAnswered(j.Payload, j.PayloadEncoding)
	if err != nil {
		fail("job %d payload: %v", j.ID, err)
	} else {
		got := &seenRecord{value: value, json: asJSON}
		switch {
		case m.hasPayload && !sameValue(m.payload, nil, value, asJSON):
			fail("job %d payload %q (%s), enqueued as %q", j.ID, j.Payload, j.PayloadEncoding, m.payload)
		case m.delivered != nil && !sameValue(m.delivered.value, m.delivered.json, value, asJSON):
			fail("job %d payload changed between claims: %q then %q (%s)", j.ID, m.delivered.json, j.Payload, j.PayloadEncoding)
		case m.delivered == nil || m.delivered.json != nil && asJSON == nil:
			m.delivered = got
		}
	}
	m.claims++
	if m.token != 0 {
		m.superseded++
	}
	if m.strict && j.Attempt != m.claims {
		fail("job %d: attempt %d on its claim number %d", j.ID, j.Attempt, m.claims)
	}
	m.token, m.attempt, m.maxTries, m.dead = j.LeaseToken, j.Attempt, j.MaxAttempts, false
	return errs
}

// publishKnown publishes records the test checks at the end: over HTTP
// with every request encoding, and through the Go client with bytes HTTP
// cannot send as JSON.
func (h *propHarness) publishKnown(when string) {
	t := h.t
	ts1 := time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC) // the first instant after the zero time ("none")
	ts2 := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	ts3 := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)
	type rec struct {
		key     *string
		value   any
		stored  []byte
		headers map[string]string
		hstored map[string][]byte
		ts      *time.Time
	}
	str := func(s string) *string { return &s }
	bin := []byte{0xff, 0x00, 0xfe, 'x'}
	batches := []struct {
		encoding, keyEncoding string
		partition             *int32
		recs                  []rec
	}{
		{"", "", nil, []rec{
			{key: str("alice"), value: jraw(`{"n":1,"s":"é 😀 <b>&</b>","a":[true,null,1.5e300]}`), stored: []byte(`{"n":1,"s":"é 😀 <b>&</b>","a":[true,null,1.5e300]}`),
				headers: map[string]string{"trace": "abc", "empty": ""}, hstored: map[string][]byte{"trace": []byte("abc"), "empty": {}}, ts: &ts1},
			{key: str(""), value: jraw(`"\ud83d\ude00"`), stored: []byte(`"\ud83d\ude00"`), ts: &ts2},
			{value: nil, stored: nil},
			{key: str("k" + when), value: jraw(`123456789012345678901234567890`), stored: []byte(`123456789012345678901234567890`), ts: &ts3},
		}},
		{"text", "", nil, []rec{
			{value: "plain é", stored: []byte("plain é")},
			{value: "", stored: []byte{}},
			{value: "null", stored: []byte("null")},
			{value: `"\ud800"`, stored: []byte(`"\ud800"`)},
		}},
		{"base64", "base64", func() *int32 { p := int32(2); return &p }(), []rec{
			{key: str(base64.StdEncoding.EncodeToString(bin)), value: base64.StdEncoding.EncodeToString(bin), stored: bin,
				headers: map[string]string{"bin": base64.StdEncoding.EncodeToString(bin)}, hstored: map[string][]byte{"bin": bin}},
			{value: base64.StdEncoding.EncodeToString([]byte("\"a\xffb\"")), stored: []byte("\"a\xffb\"")},
			{value: base64.StdEncoding.EncodeToString(nil), stored: []byte{}},
		}},
	}
	for _, b := range batches {
		body := jobj{{"topic", propKeepTopic}}
		if b.encoding != "" {
			body.add("encoding", b.encoding)
		}
		if b.keyEncoding != "" {
			body.add("key_encoding", b.keyEncoding)
		}
		var recs []any
		for _, r := range b.recs {
			o := jobj{{"value", r.value}}
			if r.key != nil {
				o.add("key", *r.key)
			}
			if r.headers != nil {
				hs := jobj{}
				for _, k := range sortedKeys(boolKeys(r.headers)) {
					hs.add(k, r.headers[k])
				}
				o.add("headers", hs)
			}
			if b.partition != nil {
				o.add("partition", int(*b.partition))
			}
			if r.ts != nil {
				o.add("timestamp", r.ts.Format(time.RFC3339Nano))
			}
			recs = append(recs, o)
		}
		body.add("records", recs)
		req := &propRequest{n: -1, token: h.admin, method: http.MethodPost, header: http.Header{},
			url: &url.URL{Path: "/v1/pubsub/publish"}, body: encodeJV(body), hasBody: true}
		req.header.Set("Authorization", h.admin.header)
		req.header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.srv.ServeHTTP(w, h.httpRequest(req))
		require.Equal(t, http.StatusOK, w.Code, "known publish (%s): %s", when, w.Body.Bytes())
		var resp PublishResponse
		require.NoError(t, decodeStrict(w.Body.Bytes(), &resp))
		require.Len(t, resp.Records, len(b.recs))
		for i, r := range b.recs {
			pr := resp.Records[i]
			rec := &pgmsg.Record{Value: r.stored, Headers: r.hstored}
			if r.key != nil {
				k := []byte(*r.key)
				if b.keyEncoding == "base64" {
					k, _ = base64.StdEncoding.DecodeString(*r.key)
				}
				rec.Key = k
			}
			if r.ts != nil {
				rec.Timestamp = *r.ts
			}
			h.knownRecords = append(h.knownRecords, knownRecord{partition: pr.Partition, offset: pr.Offset, rec: rec, ts: r.ts != nil,
				what: fmt.Sprintf("%s: HTTP publish, encoding %q, record %d", when, b.encoding, i)})
			for _, e := range h.published(propKeepTopic, pr.Partition, pr.Offset, pr.Timestamp) {
				t.Error(e)
			}
		}
	}
	// Through the Go client: bytes that are not UTF-8 or not portable JSON.
	goRecs := []*pgmsg.Record{
		{Topic: propKeepTopic, Key: []byte("\xff"), Value: []byte("\xff\xfe"), Headers: map[string][]byte{"h": []byte("\x00\xff")}},
		{Topic: propKeepTopic, Value: []byte(`{"a":"\udc00"}`)},
		{Topic: propKeepTopic, Value: []byte(`{ "spaced" : [ 1 , 2 ] }`), Timestamp: ts1},
		{Topic: propKeepTopic, Value: []byte("null")},
		{Topic: propKeepTopic, Key: []byte{}, Value: []byte{}},
	}
	require.NoError(t, h.client.Publish(h.ctx, goRecs, nil))
	for i, r := range goRecs {
		want := *r
		h.knownRecords = append(h.knownRecords, knownRecord{partition: r.Partition, offset: r.Offset, rec: &want, ts: !r.Timestamp.IsZero(),
			what: fmt.Sprintf("%s: Go publish, record %d", when, i)})
		for _, e := range h.published(propKeepTopic, r.Partition, r.Offset, r.Timestamp) {
			t.Error(e)
		}
	}
}

func boolKeys[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// enqueueKnown enqueues jobs the test checks at the end, into keepq.
func (h *propHarness) enqueueKnown(when string) {
	t := h.t
	type job struct {
		body   jobj
		stored []byte
	}
	bin := []byte{0, 0xff, 0x80}
	batches := []struct {
		encoding string
		jobs     []job
	}{
		{"", []job{
			{jobj{{"payload", jraw(`{"to":"a@b","n":[1,2,3]}`)}, {"kind", "email"}, {"priority", 5}}, []byte(`{"to":"a@b","n":[1,2,3]}`)},
			// Never due while the test runs: nothing may touch it.
			{jobj{{"payload", jraw(`"later"`)}, {"run_at", "9999-12-31T23:59:59Z"}, {"unique_key", "known-later-" + when}}, []byte(`"later"`)},
			{jobj{{"payload", jraw(`"delayed"`)}, {"delay", "24h"}, {"max_attempts", 1}}, []byte(`"delayed"`)},
			// The Go library stores a job without payload as an empty one
			// (job.go), delivered as "" (text).
			{jobj{{"payload", nil}, {"priority", -1000}}, []byte{}},
		}},
		{"text", []job{{jobj{{"payload", "text é"}, {"kind", "report"}}, []byte("text é")}}},
		{"base64", []job{{jobj{{"payload", base64.StdEncoding.EncodeToString(bin)}, {"max_attempts", 2}}, bin}}},
	}
	for _, b := range batches {
		body := jobj{{"queue", propKeepQueue}}
		if b.encoding != "" {
			body.add("encoding", b.encoding)
		}
		var jobs []any
		for _, j := range b.jobs {
			jobs = append(jobs, j.body)
		}
		body.add("jobs", jobs)
		req := &propRequest{n: -1, token: h.admin, method: http.MethodPost, header: http.Header{},
			url: &url.URL{Path: "/v1/queue/enqueue"}, body: encodeJV(body), hasBody: true}
		req.header.Set("Authorization", h.admin.header)
		req.header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.srv.ServeHTTP(w, h.httpRequest(req))
		require.Equal(t, http.StatusOK, w.Code, "known enqueue (%s): %s", when, w.Body.Bytes())
		var resp struct {
			Queue string                 `json:"queue"`
			Jobs  []*pgmsg.EnqueueResult `json:"jobs"`
		}
		require.NoError(t, decodeStrict(w.Body.Bytes(), &resp))
		require.Len(t, resp.Jobs, len(b.jobs))
		for i, res := range resp.Jobs {
			require.False(t, res.Duplicate)
			for _, e := range h.enqueued(propKeepQueue, res, b.jobs[i].stored, true) {
				t.Error(e)
			}
		}
	}
	for _, p := range [][]byte{[]byte("\xff\xfe"), []byte(`["\ud800"]`), []byte(`{ "spaced": true }`)} {
		res, err := h.client.Enqueue(h.ctx, propKeepQueue, pgmsg.EnqueueParams{Payload: p, Kind: "go"}, nil)
		require.NoError(t, err)
		for _, e := range h.enqueued(propKeepQueue, res, p, true) {
			t.Error(e)
		}
	}
}

// verifyStored checks, after the traffic, that nothing was lost or
// changed in the database: the known records (read with the Go client)
// and the jobs of keepq.
func (h *propHarness) verifyStored() {
	t := h.t
	// Known records, read with the Go client: identical at their offsets.
	for _, k := range h.knownRecords {
		got, err := h.client.Fetch(h.ctx, propKeepTopic, k.partition, k.offset, 1)
		require.NoError(t, err)
		if len(got) != 1 || got[0].Offset != k.offset {
			t.Errorf("%s: known record %s at %d/%d is gone (%d records read)", h.reproduc, k.what, k.partition, k.offset, len(got))
			continue
		}
		want := &seenRecord{key: k.rec.Key, value: k.rec.Value, headers: k.rec.Headers, ts: got[0].Timestamp}
		if k.ts {
			want.ts = k.rec.Timestamp
		}
		have := &seenRecord{key: got[0].Key, value: got[0].Value, headers: got[0].Headers, ts: got[0].Timestamp}
		if !sameRecord(want, have) {
			t.Errorf("%s: known record %s at %d/%d changed:\n want key %q value %q headers %q ts %s\n have key %q value %q headers %q ts %s",
				h.reproduc, k.what, k.partition, k.offset, want.key, want.value, want.headers, want.ts, have.key, have.value, have.headers, have.ts)
		}
	}
	h.verifyJobs()
	for _, l := range h.logs.take() {
		t.Errorf("%s: the server logged: %s", h.reproduc, l)
	}
}

// verifyHTTP reads the whole of topic keep over HTTP, as a new group, in
// each encoding: every position a publish reported, gapless, the known
// records identical.
func (h *propHarness) verifyHTTP() {
	t := h.t
	for _, enc := range []string{wire.EncodingBase64, wire.EncodingAuto, wire.EncodingJSON, wire.EncodingText} {
		read := h.readAll(propKeepTopic, "verify-"+enc, enc)
		for pos := range h.positions[propKeepTopic] {
			if read[pos] == nil {
				t.Errorf("%s: record %s/%d/%d was published but is not delivered (encoding %s)", h.reproduc, propKeepTopic, pos[0], pos[1], enc)
			}
		}
		for _, k := range h.knownRecords {
			got := read[[2]int64{int64(k.partition), k.offset}]
			if got == nil {
				continue
			}
			want := &seenRecord{key: k.rec.Key, value: k.rec.Value, headers: k.rec.Headers, ts: got.ts}
			if k.ts {
				want.ts = k.rec.Timestamp
			}
			if !sameRecord(want, got) {
				t.Errorf("%s: known record %s at %d/%d reads differently over HTTP (encoding %s):\n want key %q value %q headers %q ts %s\n have key %q value %q json %s headers %q ts %s",
					h.reproduc, k.what, k.partition, k.offset, enc, want.key, want.value, want.headers, want.ts, got.key, got.value, got.json, got.headers, got.ts)
			}
		}
	}
}

// verifyJobs checks the jobs of keepq: unchanged, or changed exactly as
// the test's own claims, acks and fails say.
func (h *propHarness) verifyJobs() {
	t := h.t
	for _, id := range h.jobOrder {
		m := h.jobs[id]
		if !m.strict {
			continue
		}
		j, err := h.client.GetJob(h.ctx, id)
		if err != nil {
			t.Errorf("%s: job %d of %s: %v", h.reproduc, id, m.queue, err)
			continue
		}
		f := m.first
		var bad []string
		if j.Queue != f.Queue || j.Kind != f.Kind || j.Priority != f.Priority || j.MaxAttempts != f.MaxAttempts ||
			j.UniqueKey != f.UniqueKey || !j.EnqueuedAt.Equal(f.EnqueuedAt) || !bytes.Equal(j.Payload, f.Payload) || (j.Payload == nil) != (f.Payload == nil) {
			bad = append(bad, fmt.Sprintf("fields changed: was %+v", *f))
		}
		if m.hasPayload && ((j.Payload == nil) != (m.payload == nil) || !bytes.Equal(j.Payload, m.payload)) {
			bad = append(bad, fmt.Sprintf("payload %q, enqueued as %q", j.Payload, m.payload))
		}
		if j.Attempt != m.claims {
			bad = append(bad, fmt.Sprintf("attempt %d after %d claims", j.Attempt, m.claims))
		}
		// One error per fail and per rescue (of a superseded claim, and
		// maybe of the last one if it is still open).
		lo, hi := m.fails+m.superseded, m.fails+m.superseded
		if m.token != 0 {
			hi++
		}
		if len(j.Errors) < lo || len(j.Errors) > hi {
			bad = append(bad, fmt.Sprintf("%d errors after %d fails and %d rescues (%d if the open claim was rescued)", len(j.Errors), m.fails, lo-m.fails, hi-m.fails))
		}
		var want []pgmsg.JobState
		switch {
		case m.claims == 0:
			want = []pgmsg.JobState{f.State}
			if f.RunAt != nil && (j.RunAt == nil || !j.RunAt.Equal(*f.RunAt)) {
				bad = append(bad, fmt.Sprintf("run_at %v, enqueued with %v", j.RunAt, f.RunAt))
			}
		case m.completed:
			want = []pgmsg.JobState{pgmsg.JobStateCompleted}
		case m.dead:
			want = []pgmsg.JobState{pgmsg.JobStateDead}
		case m.token != 0 && len(j.Errors) < hi:
			want = []pgmsg.JobState{pgmsg.JobStateRunning}
			if j.LeaseToken != m.token {
				bad = append(bad, fmt.Sprintf("lease token %d, the latest claim's is %d", j.LeaseToken, m.token))
			}
		case m.token != 0:
			// The open claim's lease ran out and the job was rescued.
			want = []pgmsg.JobState{pgmsg.JobStateRetrying, pgmsg.JobStateAvailable, pgmsg.JobStateScheduled}
			if j.Attempt >= j.MaxAttempts {
				want = []pgmsg.JobState{pgmsg.JobStateDead}
			}
		default: // failed, to be retried
			want = []pgmsg.JobState{pgmsg.JobStateRetrying, pgmsg.JobStateAvailable, pgmsg.JobStateScheduled}
		}
		if !slices.Contains(want, j.State) {
			bad = append(bad, fmt.Sprintf("state %s, want one of %v", j.State, want))
		}
		if len(bad) > 0 {
			t.Errorf("%s: job %d (%s): %s\nmodel: %+v", h.reproduc, id, m.queue, strings.Join(bad, "; "), m)
		}
	}
}

// readAll consumes a whole topic over HTTP as a new group, committing as
// it goes, and returns its records by position.
func (h *propHarness) readAll(topic, group, enc string) map[[2]int64]*seenRecord {
	t := h.t
	out := map[[2]int64]*seenRecord{}
	next := map[int32]int64{}
	for i := 0; ; i++ {
		require.Less(t, i, 10000, "reading %s does not end", topic)
		req := &propRequest{n: -1, token: h.admin, method: http.MethodGet, header: http.Header{},
			url: &url.URL{Path: "/v1/pubsub/consume", RawQuery: url.Values{"topic": {topic}, "group": {group}, "encoding": {enc},
				"max_records": {strconv.Itoa(propMaxRecords)}, "auto_commit": {"true"}}.Encode()}}
		req.header.Set("Authorization", h.admin.header)
		w := httptest.NewRecorder()
		h.srv.ServeHTTP(w, h.httpRequest(req))
		require.Equal(t, http.StatusOK, w.Code, "%s: %s", req, w.Body.Bytes())
		for _, e := range h.check2xx(h.byKey["GET /v1/pubsub/consume"], w) {
			t.Errorf("%s: %s: %s", h.reproduc, req, e)
		}
		var resp ConsumeResponse
		require.NoError(t, decodeStrict(w.Body.Bytes(), &resp))
		if resp.Claim == nil {
			return out
		}
		for _, e := range h.consumed(req, &resp) {
			t.Errorf("%s: %s: %s", h.reproduc, req, e)
		}
		for _, r := range resp.Records {
			if r.Offset != next[r.Partition] {
				t.Errorf("%s: reading %s as %s: partition %d offset %d after %d: a gap", h.reproduc, topic, group, r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition] = r.Offset + 1
			s, err := decodeRecord(r)
			require.NoError(t, err)
			out[[2]int64{int64(r.Partition), r.Offset}] = s
		}
	}
}
