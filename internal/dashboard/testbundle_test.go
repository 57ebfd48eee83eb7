package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/httpapi"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

type testBundle struct {
	client *pgmsg.Client
	api    *httpapi.Server
	ts     *httptest.Server
	ctx    context.Context
	// admin and reader are secrets of an admin and a read-only token.
	admin, reader string

	mu sync.Mutex
	// sessions are the session ids of the token secrets logged in by
	// cookieFor.
	sessions map[string]string
}

// setup gives a test a migrated schema, a server with the dashboard
// mounted as `pgmsg serve` mounts it, an admin and a read-only token.
func setup(t *testing.T, cfg *httpapi.Config) *testBundle {
	t.Helper()
	b := pgmsgtest.New(t, pgtest.Pool(t, &pgtest.Opts{MaxConns: 12}), nil)
	ctx := pgtest.Context(t, 3*time.Minute)
	c := httpapi.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Client = b.Client
	srv, err := httpapi.New(c)
	require.NoError(t, err)
	dash, err := New(Config{API: srv, Client: b.Client})
	require.NoError(t, err)
	srv.Mount(Prefix, dash)
	ts := pgtest.Serve(t, srv, srv.Drain)
	return &testBundle{client: b.Client, api: srv, ts: ts, ctx: ctx, sessions: map[string]string{},
		admin: b.Token(t, "admin", pgmsg.ScopeAdmin), reader: b.Token(t, "viewer", pgmsg.ScopeRead)}
}

// response is a decoded HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, v), "body: %s", r.body)
}

func (r response) errorCode(t *testing.T) string {
	t.Helper()
	var eb httpapi.ErrorBody
	r.json(t, &eb)
	require.NotEmpty(t, eb.Error.Message, "not an error body: %s", r.body)
	return eb.Error.Code
}

// request is one HTTP request of a test: a session cookie (a session id,
// or a token secret, for which cookieFor opens a session), a CSRF header,
// an Origin, a bearer token, a JSON body, each optional.
type request struct {
	method, path string
	cookie       string
	csrf         string
	origin       string
	bearer       string
	body         any
}

func (tb *testBundle) do(t *testing.T, q request) response {
	t.Helper()
	var rd io.Reader
	if q.body != nil {
		raw, err := json.Marshal(q.body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(tb.ctx, q.method, tb.ts.URL+q.path, rd)
	require.NoError(t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if q.cookie != "" {
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: tb.cookieFor(t, q.cookie)})
	}
	if q.csrf != "" {
		req.Header.Set(csrfHeader, q.csrf)
	}
	if q.origin != "" {
		req.Header.Set("Origin", q.origin)
	}
	if q.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+q.bearer)
	}
	return tb.send(t, req)
}

func (tb *testBundle) send(t *testing.T, req *http.Request) response {
	t.Helper()
	cl := *tb.ts.Client()
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := cl.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{status: res.StatusCode, header: res.Header, body: raw}
}

// cookieFor returns the session cookie to send for v: v itself unless it
// is a token secret ("pgm_..."), which is logged in once (the session is
// kept for the test's later requests); a secret that cannot log in is
// sent as it is.
func (tb *testBundle) cookieFor(t *testing.T, v string) string {
	t.Helper()
	if !strings.HasPrefix(v, "pgm_") {
		return v
	}
	tb.mu.Lock()
	id, ok := tb.sessions[v]
	tb.mu.Unlock()
	if ok {
		return id
	}
	res := tb.login(t, v, "")
	if res.status != http.StatusSeeOther {
		return v
	}
	id = sessionFromSetCookie(t, res.header)
	tb.mu.Lock()
	tb.sessions[v] = id
	tb.mu.Unlock()
	return id
}

// sessionFromSetCookie returns the session id a login answer set.
func sessionFromSetCookie(t *testing.T, h http.Header) string {
	t.Helper()
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == sessionCookie && c.Value != "" {
			return c.Value
		}
	}
	t.Fatalf("no session cookie in %v", h.Values("Set-Cookie"))
	return ""
}

// login posts the login form and returns the answer.
func (tb *testBundle) login(t *testing.T, secret, origin string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(tb.ctx, http.MethodPost, tb.ts.URL+Prefix+"login",
		strings.NewReader(url.Values{"token": {secret}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	return tb.send(t, req)
}

// csrf returns the CSRF token of a session.
func (tb *testBundle) csrf(t *testing.T, secret string) string {
	t.Helper()
	res := tb.do(t, request{method: http.MethodGet, path: Prefix + "api/session", cookie: secret})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	var s struct {
		CSRF string `json:"csrf"`
	}
	res.json(t, &s)
	require.NotEmpty(t, s.CSRF)
	return s.CSRF
}

// deadJobs enqueues n jobs in queue that die at their first failure and
// returns their ids.
func (tb *testBundle) deadJobs(t *testing.T, queue string, n int) []int64 {
	t.Helper()
	_, err := tb.client.EnsureQueue(tb.ctx, queue, pgmsg.QueueConfig{MaxAttempts: 1})
	require.NoError(t, err)
	params := make([]pgmsg.EnqueueParams, n)
	for i := range params {
		params[i] = pgmsg.EnqueueParams{Kind: "send_email", Payload: []byte(`{"to":"user` + string(rune('a'+i)) + `@example.com"}`)}
	}
	_, err = tb.client.EnqueueMany(tb.ctx, queue, params, nil)
	require.NoError(t, err)
	jobs, err := tb.client.ClaimJobs(tb.ctx, queue, &pgmsg.ClaimJobsOpts{Max: n})
	require.NoError(t, err)
	require.Len(t, jobs, n)
	ids := make([]int64, n)
	for i, j := range jobs {
		res, err := tb.client.Fail(tb.ctx, j, errSMTP, nil)
		require.NoError(t, err)
		require.Equal(t, pgmsg.JobStateDead, res.State)
		ids[i] = j.ID
	}
	return ids
}
