package dashboard

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/httpapi"
)

var errSMTP = errors.New("smtp: 550 mailbox unavailable")

// TestLoginCookie: a valid token sets the session cookie HttpOnly,
// SameSite=Strict, scoped to /ui/; a wrong token, an empty one, a token
// with neither read nor admin, and a cross-origin form are refused with a
// message and no cookie.
func TestLoginCookie(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.login(t, tb.admin, "")
	require.Equal(t, http.StatusSeeOther, res.status, "%s", res.body)
	require.Equal(t, Prefix, res.header.Get("Location"))
	cookie := res.header.Get("Set-Cookie")
	// The cookie holds a session id of the dashboard's own, never the token.
	id := sessionFromSetCookie(t, res.header)
	require.True(t, strings.HasPrefix(id, sessionIDPrefix), cookie)
	require.NotContains(t, cookie, tb.admin)
	require.NotContains(t, cookie, strings.TrimPrefix(tb.admin, "pgm_"))
	require.Contains(t, cookie, "HttpOnly")
	require.Contains(t, cookie, "SameSite=Strict")
	require.Contains(t, cookie, "Path=/ui/")
	require.NotContains(t, cookie, "Secure", "plain HTTP: a Secure cookie would never come back")

	producer, _, err := tb.client.CreateToken(tb.ctx, "producer", []string{"publish:*"}, nil)
	require.NoError(t, err)
	for name, c := range map[string]struct {
		secret, origin string
		status         int
		says           string
	}{
		"unknown":      {"pgm_notatoken", "", http.StatusUnauthorized, "unknown, revoked or expired"},
		"empty":        {"", "", http.StatusBadRequest, "Enter a token"},
		"no read":      {producer, "", http.StatusForbidden, "neither the read nor the admin scope"},
		"cross-origin": {tb.admin, "https://evil.example", http.StatusForbidden, "cross-origin"},
	} {
		res := tb.login(t, c.secret, c.origin)
		require.Equal(t, c.status, res.status, "%s: %s", name, res.body)
		require.Contains(t, string(res.body), c.says, name)
		require.Empty(t, res.header.Get("Set-Cookie"), name)
	}
}

// TestSessionForwardsToAPI: with the cookie, /ui/api/v1/... answers what
// the API answers the same token; without it, 401; the data plane is not
// forwarded at all.
func TestSessionForwardsToAPI(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "orders", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	viaUI := tb.do(t, request{method: http.MethodGet, path: Prefix + "api/v1/topics/orders", cookie: tb.reader})
	require.Equal(t, http.StatusOK, viaUI.status, "%s", viaUI.body)
	viaAPI := tb.do(t, request{method: http.MethodGet, path: "/v1/topics/orders", bearer: tb.reader})
	require.Equal(t, http.StatusOK, viaAPI.status, "%s", viaAPI.body)
	require.JSONEq(t, string(viaAPI.body), string(viaUI.body))

	// The data plane is not forwarded: a claim or consume is a GET that
	// changes state.
	for _, p := range []string{"api/v1/queue/claim?queue=q", "api/v1/pubsub/consume?topic=orders&group=g"} {
		res := tb.do(t, request{method: http.MethodGet, path: Prefix + p, cookie: tb.admin})
		require.Equal(t, http.StatusNotFound, res.status, "%s: %s", p, res.body)
		require.Equal(t, "not_found", res.errorCode(t))
	}

	res := tb.do(t, request{method: http.MethodGet, path: Prefix + "api/v1/topics"})
	require.Equal(t, http.StatusUnauthorized, res.status)
	require.Equal(t, "unauthorized", res.errorCode(t))
	// The API itself never takes the cookie: bearer clients are unchanged.
	res = tb.do(t, request{method: http.MethodGet, path: "/v1/topics", cookie: tb.admin})
	require.Equal(t, http.StatusUnauthorized, res.status)
}

// TestCSRF: every state-changing request made with the cookie needs the
// session's CSRF token and, if it sends an Origin, this host's; the
// token of one session does not work for another.
func TestCSRF(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ids := tb.deadJobs(t, "emails", 2)
	path := Prefix + "api/v1/queues/emails/dead/requeue"
	good := tb.csrf(t, tb.admin)
	for name, q := range map[string]request{
		"no token":          {cookie: tb.admin},
		"other session's":   {cookie: tb.admin, csrf: tb.csrf(t, tb.reader)},
		"garbage":           {cookie: tb.admin, csrf: "x" + good},
		"foreign origin":    {cookie: tb.admin, csrf: good, origin: "https://evil.example"},
		"own endpoint, bad": {cookie: tb.admin, path: Prefix + "api/tokens"},
	} {
		q.method = http.MethodPost
		if q.path == "" {
			q.path = path
		}
		res := tb.do(t, q)
		require.Equal(t, http.StatusForbidden, res.status, "%s: %s", name, res.body)
		require.Equal(t, "csrf_failed", res.errorCode(t), name)
	}
	st, err := tb.client.QueueStats(tb.ctx, "emails")
	require.NoError(t, err)
	require.EqualValues(t, len(ids), st.Dead, "a refused request changed nothing")

	res := tb.do(t, request{method: http.MethodPost, path: path, cookie: tb.admin, csrf: good, origin: tb.ts.URL})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	st, err = tb.client.QueueStats(tb.ctx, "emails")
	require.NoError(t, err)
	require.Zero(t, st.Dead)
}

// TestReadOnlyToken: a token with the read scope reads everything the
// dashboard shows, and every action, through the API or the dashboard's
// own endpoints, is 403 forbidden, even with a valid CSRF token.
func TestReadOnlyToken(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.deadJobs(t, "emails", 1)
	_, err := tb.client.CreateTopic(tb.ctx, "orders", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	csrf := tb.csrf(t, tb.reader)
	for _, p := range []string{"api/session", "api/log", "api/events", "api/latency", "api/records?topic=orders",
		"api/v1/topics", "api/v1/queues", "api/v1/queues/emails/jobs?state=dead", "api/v1/groups"} {
		res := tb.do(t, request{method: http.MethodGet, path: Prefix + p, cookie: tb.reader})
		require.Equal(t, http.StatusOK, res.status, "%s: %s", p, res.body)
	}
	for _, q := range []request{
		{method: http.MethodPost, path: "api/v1/queues/emails/dead/requeue"},
		{method: http.MethodPost, path: "api/v1/queues/emails/pause"},
		{method: http.MethodPost, path: "api/v1/topics", body: map[string]any{"name": "x", "partitions": 1}},
		{method: http.MethodDelete, path: "api/v1/topics/orders"},
		{method: http.MethodPost, path: "api/tokens", body: map[string]any{"name": "x", "scopes": []string{"admin"}}},
		{method: http.MethodGet, path: "api/tokens"},
		{method: http.MethodPost, path: "api/jobs/1/cancel"},
	} {
		q.path, q.cookie, q.csrf = Prefix+q.path, tb.reader, csrf
		res := tb.do(t, q)
		require.Equal(t, http.StatusForbidden, res.status, "%s %s: %s", q.method, q.path, res.body)
		require.Equal(t, "forbidden", res.errorCode(t))
	}
	st, err := tb.client.QueueStats(tb.ctx, "emails")
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Dead)
	require.False(t, st.Paused)
	var info struct {
		Admin  bool `json:"admin"`
		Logout bool `json:"logout"`
	}
	tb.do(t, request{method: http.MethodGet, path: Prefix + "api/session", cookie: tb.reader}).json(t, &info)
	require.False(t, info.Admin, "the pages show no actions to a read-only session")
	require.True(t, info.Logout, "a logged-in session can log out")
}

// TestBadInput: the dashboard's own endpoints answer a client's mistakes
// 400 (or 404) with the API's error body, never 500.
func TestBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "orders", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	csrf := tb.csrf(t, tb.admin)
	for _, c := range []struct {
		q      request
		status int
	}{
		{request{method: http.MethodGet, path: "api/records?topic=orders&partition=-1"}, http.StatusBadRequest},
		{request{method: http.MethodGet, path: "api/records?topic=orders&limit=100000"}, http.StatusBadRequest},
		{request{method: http.MethodGet, path: "api/records?topic=orders&offset=1&time=2026-01-01T00:00:00Z"}, http.StatusBadRequest},
		{request{method: http.MethodGet, path: "api/records?topic=orders&time=yesterday"}, http.StatusBadRequest},
		{request{method: http.MethodGet, path: "api/records?topic=bad%20name"}, http.StatusBadRequest},
		{request{method: http.MethodGet, path: "api/records?topic=nosuch"}, http.StatusNotFound},
		{request{method: http.MethodGet, path: "api/log?topic=bad%20name"}, http.StatusBadRequest},
		{request{method: http.MethodPost, path: "api/tokens", body: map[string]any{"name": "t", "scopes": []string{"root"}}}, http.StatusBadRequest},
		{request{method: http.MethodPost, path: "api/tokens", body: map[string]any{"nme": "t"}}, http.StatusBadRequest},
		{request{method: http.MethodPost, path: "api/tokens/abc/revoke"}, http.StatusBadRequest},
		{request{method: http.MethodPost, path: "api/tokens/999999/revoke"}, http.StatusNotFound},
		{request{method: http.MethodGet, path: "nosuchpage"}, http.StatusNotFound},
	} {
		q := c.q
		q.path, q.cookie, q.csrf = Prefix+q.path, tb.admin, csrf
		res := tb.do(t, q)
		require.Equal(t, c.status, res.status, "%s %s: %s", q.method, q.path, res.body)
		res.errorCode(t)
	}
}

// TestRecordsPage: the record browser reads by offset and by time, and
// answers keys, headers and values as the API encodes them.
func TestRecordsPage(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateTopic(tb.ctx, "orders", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	recs := []*pgmsg.Record{
		{Topic: "orders", Key: []byte("k1"), Value: []byte(`{"n":1}`), Headers: map[string][]byte{"trace": []byte("abc")}},
		{Topic: "orders", Value: []byte("plain text")},
		{Topic: "orders", Value: []byte{0xff, 0x00}},
	}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))
	var got struct {
		From    int64 `json:"from"`
		Records []struct {
			Offset        int64             `json:"offset"`
			Key           *string           `json:"key"`
			Value         any               `json:"value"`
			ValueEncoding string            `json:"value_encoding"`
			Headers       map[string]string `json:"headers"`
		} `json:"records"`
	}
	res := tb.do(t, request{method: http.MethodGet, path: Prefix + "api/records?topic=orders&offset=0", cookie: tb.reader})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res.json(t, &got)
	require.Len(t, got.Records, 3)
	require.Equal(t, "k1", *got.Records[0].Key)
	require.Equal(t, "abc", got.Records[0].Headers["trace"])
	require.Equal(t, `{"n":1}`, got.Records[0].Value, "stored bytes, as they are")
	require.Equal(t, []string{"text", "text", "base64"}, []string{got.Records[0].ValueEncoding, got.Records[1].ValueEncoding, got.Records[2].ValueEncoding})
	res = tb.do(t, request{method: http.MethodGet, path: Prefix + "api/records?topic=orders&offset=1&limit=1", cookie: tb.reader})
	res.json(t, &got)
	require.Len(t, got.Records, 1)
	require.EqualValues(t, 1, got.Records[0].Offset)
	at := recs[2].Timestamp.UTC().Format("2006-01-02T15:04:05.999999999Z07:00")
	res = tb.do(t, request{method: http.MethodGet, path: Prefix + "api/records?topic=orders&time=" + strings.ReplaceAll(at, "+", "%2B"), cookie: tb.reader})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res.json(t, &got)
	require.NotEmpty(t, got.Records)
	require.LessOrEqual(t, got.From, int64(2), "the time of the last record finds it or an earlier one of the same time")
}

// TestLogFiguresOfOneTopic: the topic page's ?topic=T asks for that
// topic's groups only, summed over their partitions as the overview sums
// them; an unknown topic has none.
func TestLogFiguresOfOneTopic(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for _, name := range []string{"orders", "payments"} {
		_, err := tb.client.CreateTopic(tb.ctx, name, pgmsg.TopicConfig{Partitions: 2})
		require.NoError(t, err)
		_, err = tb.client.CreateGroup(tb.ctx, name, "billing", pgmsg.PositionEarliest)
		require.NoError(t, err)
	}
	_, err := tb.client.CreateGroup(tb.ctx, "orders", "audit", pgmsg.PositionEarliest)
	require.NoError(t, err)
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "orders", Partition: 1, Value: []byte("x")}},
		&pgmsg.PublishOpts{ManualPartition: true}))
	type group struct {
		Topic      string `json:"topic"`
		Group      string `json:"group"`
		Partitions int    `json:"partitions"`
		Lag        int64  `json:"lag"`
	}
	var got struct {
		Topics []json.RawMessage `json:"topics"`
		Groups []group           `json:"groups"`
	}
	res := tb.do(t, request{method: http.MethodGet, path: Prefix + "api/log?topic=orders", cookie: tb.reader})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res.json(t, &got)
	require.Empty(t, got.Topics)
	require.Equal(t, []group{{"orders", "audit", 2, 1}, {"orders", "billing", 2, 1}}, got.Groups)
	res = tb.do(t, request{method: http.MethodGet, path: Prefix + "api/log?topic=nosuch", cookie: tb.reader})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res.json(t, &got)
	require.Empty(t, got.Groups)
	// Without ?topic: every topic's totals and every group's, from the
	// aggregate queries.
	type topic struct {
		Name       string `json:"name"`
		Partitions int    `json:"partitions"`
		EndOffset  int64  `json:"end_offset"`
		Records    int64  `json:"records"`
		Segments   int    `json:"segments"`
		Groups     int    `json:"groups"`
		Lag        int64  `json:"lag"`
	}
	var all struct {
		Topics []topic `json:"topics"`
		Groups []group `json:"groups"`
	}
	res = tb.do(t, request{method: http.MethodGet, path: Prefix + "api/log", cookie: tb.reader})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res.json(t, &all)
	require.Len(t, all.Topics, 2)
	for i := range all.Topics {
		require.Positive(t, all.Topics[i].Segments)
		all.Topics[i].Segments = 0
	}
	require.Equal(t, []topic{{"orders", 2, 1, 1, 0, 2, 2}, {"payments", 2, 0, 0, 0, 1, 0}}, all.Topics)
	require.Equal(t, []group{{"orders", "audit", 2, 1}, {"orders", "billing", 2, 1}, {"payments", "billing", 2, 0}}, all.Groups)
}

// TestInsecureNoAuth: under --insecure-no-auth the dashboard needs no
// login, still requires the CSRF token, and refuses foreign Hosts as
// the API does.
func TestInsecureNoAuth(t *testing.T) {
	t.Parallel()
	tb := setup(t, &httpapi.Config{InsecureNoAuth: true})
	tb.deadJobs(t, "emails", 1)
	res := tb.do(t, request{method: http.MethodGet, path: Prefix + "api/session"})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	var info struct {
		Logout *bool `json:"logout"`
	}
	res.json(t, &info)
	require.NotNil(t, info.Logout)
	require.False(t, *info.Logout, "no login, so the pages offer no Log out")
	path := Prefix + "api/v1/queues/emails/dead/requeue"
	res = tb.do(t, request{method: http.MethodPost, path: path})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Equal(t, "csrf_failed", res.errorCode(t))
	res = tb.do(t, request{method: http.MethodPost, path: path, csrf: tb.csrf(t, "")})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)

	req, err := http.NewRequestWithContext(tb.ctx, http.MethodGet, tb.ts.URL+Prefix, nil)
	require.NoError(t, err)
	req.Host = "attacker.example"
	res = tb.send(t, req)
	require.Equal(t, http.StatusForbidden, res.status)
	require.Equal(t, "host_not_allowed", res.errorCode(t))
}

// TestStaticEmbedded: the pages and the chart library come from the
// binary, with a policy that loads nothing from elsewhere; the shell sends
// a visitor without a valid session to the login form.
func TestStaticEmbedded(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for _, cookie := range []string{"", "pgm_revoked"} {
		res := tb.do(t, request{method: http.MethodGet, path: Prefix, cookie: cookie})
		require.Equal(t, http.StatusSeeOther, res.status)
		require.Equal(t, Prefix+"login", res.header.Get("Location"))
	}
	for _, p := range []string{"", "login", "static/app.js", "static/style.css", "static/vendor/uPlot.iife.min.js", "static/vendor/uPlot.min.css"} {
		res := tb.do(t, request{method: http.MethodGet, path: Prefix + p, cookie: tb.reader})
		require.Equal(t, http.StatusOK, res.status, p)
		require.NotEmpty(t, res.body, p)
		require.Contains(t, res.header.Get("Content-Security-Policy"), "default-src 'self'", p)
		require.Equal(t, "DENY", res.header.Get("X-Frame-Options"), p)
	}
}

// TestLogoutAndTLS: logout needs the CSRF token and expires the cookie;
// over TLS the session cookie is Secure.
func TestLogoutAndTLS(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.do(t, request{method: http.MethodPost, path: Prefix + "logout", cookie: tb.admin})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Equal(t, "csrf_failed", res.errorCode(t))
	res = tb.do(t, request{method: http.MethodPost, path: Prefix + "logout", cookie: tb.admin, csrf: tb.csrf(t, tb.admin)})
	require.Equal(t, http.StatusNoContent, res.status, "%s", res.body)
	require.Contains(t, res.header.Get("Set-Cookie"), sessionCookie+"=;")
	require.Contains(t, res.header.Get("Set-Cookie"), "Max-Age=0")

	req := httptest.NewRequestWithContext(tb.ctx, http.MethodPost, "https://127.0.0.1"+Prefix+"login",
		strings.NewReader(url.Values{"token": {tb.admin}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.TLS = &tls.ConnectionState{}
	rec := httptest.NewRecorder()
	tb.api.ServeHTTP(rec, req)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	cookie := rec.Header().Get("Set-Cookie")
	require.Contains(t, cookie, "Secure")
	require.Contains(t, cookie, "HttpOnly")
	require.Contains(t, cookie, "SameSite=Strict")
}

// TestSessionOfItsOwn: the cookie is a session id that is no API token
// (refused as a bearer token), a new one at each login; logout ends the
// session at once, on the pages and on the forwarded API, while the token
// itself stays valid.
func TestSessionOfItsOwn(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.login(t, tb.admin, "")
	require.Equal(t, http.StatusSeeOther, res.status, "%s", res.body)
	id := sessionFromSetCookie(t, res.header)
	again := sessionFromSetCookie(t, tb.login(t, tb.admin, "").header)
	require.NotEqual(t, id, again, "a login reuses a session id")
	// A login with a session's cookie replaces that session.
	req, err := http.NewRequestWithContext(tb.ctx, http.MethodPost, tb.ts.URL+Prefix+"login",
		strings.NewReader(url.Values{"token": {tb.admin}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: again})
	res = tb.send(t, req)
	require.Equal(t, http.StatusSeeOther, res.status)
	replaced := again
	again = sessionFromSetCookie(t, res.header)
	require.Equal(t, http.StatusUnauthorized, tb.do(t, request{method: http.MethodGet, path: Prefix + "api/session", cookie: replaced}).status)

	require.Equal(t, http.StatusUnauthorized, tb.do(t, request{method: http.MethodGet, path: "/v1/topics", bearer: id}).status,
		"the session id works as an API token")
	require.Equal(t, http.StatusOK, tb.do(t, request{method: http.MethodGet, path: Prefix + "api/v1/topics", cookie: id}).status)
	require.Equal(t, http.StatusOK, tb.do(t, request{method: http.MethodGet, path: Prefix, cookie: id}).status)

	csrf := tb.csrf(t, id)
	res = tb.do(t, request{method: http.MethodPost, path: Prefix + "logout", cookie: id, csrf: csrf})
	require.Equal(t, http.StatusNoContent, res.status, "%s", res.body)
	// A copy of the cookie kept after logout is worth nothing.
	res = tb.do(t, request{method: http.MethodGet, path: Prefix + "api/v1/topics", cookie: id})
	require.Equal(t, http.StatusUnauthorized, res.status, "%s", res.body)
	require.Equal(t, "unauthorized", res.errorCode(t))
	res = tb.do(t, request{method: http.MethodGet, path: Prefix + "api/session", cookie: id})
	require.Equal(t, http.StatusUnauthorized, res.status)
	res = tb.do(t, request{method: http.MethodGet, path: Prefix, cookie: id})
	require.Equal(t, http.StatusSeeOther, res.status)
	res = tb.do(t, request{method: http.MethodPost, path: Prefix + "api/tokens", cookie: id, csrf: csrf, body: map[string]any{"name": "x", "scopes": []string{"read"}}})
	require.Equal(t, http.StatusUnauthorized, res.status)
	// The other session and the token are unaffected.
	require.Equal(t, http.StatusOK, tb.do(t, request{method: http.MethodGet, path: Prefix + "api/v1/topics", cookie: again}).status)
	require.Equal(t, http.StatusOK, tb.do(t, request{method: http.MethodGet, path: "/v1/topics", bearer: tb.admin}).status)
}

// TestSessionIdleAndCap: a session unused for sessionIdleTimeout ends; the
// store keeps at most sessionsMax, forgetting the least recently used.
func TestSessionIdleAndCap(t *testing.T) {
	t.Parallel()
	s := newSessionStore()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	first, err := s.open("a")
	require.NoError(t, err)
	now = now.Add(sessionIdleTimeout)
	require.Equal(t, "a", s.secret(first), "used within the timeout")
	now = now.Add(sessionIdleTimeout + time.Second)
	require.Empty(t, s.secret(first), "idle past the timeout")

	ids := make([]string, sessionsMax)
	for i := range ids {
		now = now.Add(time.Millisecond)
		if ids[i], err = s.open("s"); err != nil {
			t.Fatal(err)
		}
	}
	require.Equal(t, "s", s.secret(ids[0])) // now the most recently used
	_, err = s.open("new")
	require.NoError(t, err)
	require.Len(t, s.m, sessionsMax)
	require.Empty(t, s.secret(ids[1]), "the least recently used was kept")
	require.Equal(t, "s", s.secret(ids[0]))
}

// TestRevokeAtOnce: a token revoked from the dashboard is refused by this
// server at once, though the server caches verified tokens (an hour here).
func TestRevokeAtOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t, &httpapi.Config{TokenCacheTTL: time.Hour})
	victim, tok, err := tb.client.CreateToken(tb.ctx, "victim", []string{pgmsg.ScopeRead}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, tb.do(t, request{method: http.MethodGet, path: "/v1/topics", bearer: victim}).status)
	viewer := tb.cookieFor(t, victim)
	res := tb.do(t, request{method: http.MethodPost, path: Prefix + "api/tokens/" + strconv.FormatInt(tok.ID, 10) + "/revoke",
		cookie: tb.admin, csrf: tb.csrf(t, tb.admin)})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res = tb.do(t, request{method: http.MethodGet, path: "/v1/topics", bearer: victim})
	require.Equal(t, http.StatusUnauthorized, res.status, "a revoked token served from the cache")
	require.Equal(t, http.StatusUnauthorized, tb.do(t, request{method: http.MethodGet, path: Prefix + "api/v1/topics", cookie: viewer}).status,
		"a session of a revoked token")
}

// TestForwardedNotCached: what the forwarded API answers a session (data,
// and errors) is never cached.
func TestForwardedNotCached(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for _, p := range []string{"api/v1/topics", "api/v1/topics/nope", "api/v1/queues"} {
		res := tb.do(t, request{method: http.MethodGet, path: Prefix + p, cookie: tb.reader})
		require.Equal(t, "no-store", res.header.Get("Cache-Control"), "%s: %d", p, res.status)
	}
}

// TestSequenceAndLimitsAPI: the job page's sequence progress and the queue
// page's limits, to a read-only session, and their refusals.
func TestSequenceAndLimitsAPI(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateQueue(tb.ctx, "lim", pgmsg.QueueConfig{KeyLimit: 1, MaxRunning: 7})
	require.NoError(t, err)
	for _, p := range []pgmsg.EnqueueParams{{LimitKey: "a"}, {LimitKey: "a"}, {LimitKey: "b"}} {
		_, err := tb.client.Enqueue(tb.ctx, "lim", p, nil)
		require.NoError(t, err)
	}
	seq := make([]int64, 2)
	for i := range seq {
		r, err := tb.client.Enqueue(tb.ctx, "lim", pgmsg.EnqueueParams{SequenceKey: "s"}, nil)
		require.NoError(t, err)
		seq[i] = r.ID
	}
	var lim struct {
		MaxRunning int               `json:"max_running"`
		KeyLimit   int               `json:"key_limit"`
		LimitKeys  int               `json:"limit_keys"`
		TopKeys    []*pgmsg.LimitKey `json:"top_keys"`
		Sequences  int               `json:"sequences"`
	}
	res := tb.do(t, request{method: http.MethodGet, path: Prefix + "api/queue-limits?queue=lim", cookie: tb.reader})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res.json(t, &lim)
	require.Equal(t, 7, lim.MaxRunning)
	require.Equal(t, 1, lim.KeyLimit)
	require.Equal(t, 2, lim.LimitKeys)
	require.Len(t, lim.TopKeys, 2)
	require.Equal(t, int64(1), lim.TopKeys[0].Pending+lim.TopKeys[1].Pending, "a's second job waits")
	require.Equal(t, 1, lim.Sequences)

	var sq pgmsg.SequenceJobs
	res = tb.do(t, request{method: http.MethodGet, path: Prefix + "api/sequence?queue=lim&key=s", cookie: tb.reader})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res.json(t, &sq)
	require.Equal(t, seq[0], sq.Head.ID)
	require.Len(t, sq.Pending, 1)
	require.Equal(t, seq[1], sq.Pending[0].ID)

	for path, code := range map[string]int{
		"api/queue-limits":                  http.StatusBadRequest,
		"api/queue-limits?queue=nope":       http.StatusNotFound,
		"api/sequence?queue=lim":            http.StatusBadRequest,
		"api/sequence?queue=nope&key=s":     http.StatusNotFound,
		"api/sequence?queue=bad%20name&key": http.StatusBadRequest,
	} {
		res := tb.do(t, request{method: http.MethodGet, path: Prefix + path, cookie: tb.reader})
		require.Equal(t, code, res.status, "%s: %s", path, res.body)
	}
	res = tb.do(t, request{method: http.MethodGet, path: Prefix + "api/sequence?queue=lim&key=s"})
	require.Equal(t, http.StatusUnauthorized, res.status)
}

// TestBatchViaUI: the batch page's data, GET /v1/batches/{id}, is
// forwarded with the session's token.
func TestBatchViaUI(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res, err := tb.client.EnqueueBatch(tb.ctx, "bq", []pgmsg.EnqueueParams{{Payload: []byte("1")}},
		&pgmsg.BatchOpts{OnComplete: &pgmsg.BatchCallback{Kind: "done"}})
	require.NoError(t, err)
	viaUI := tb.do(t, request{method: http.MethodGet, path: Prefix + "api/v1/batches/" + strconv.FormatInt(res.ID, 10), cookie: tb.admin})
	require.Equal(t, http.StatusOK, viaUI.status, "%s", viaUI.body)
	var b pgmsg.Batch
	require.NoError(t, json.Unmarshal(viaUI.body, &b))
	require.Equal(t, 1, b.Total)
	require.EqualValues(t, 1, b.Available)
}
