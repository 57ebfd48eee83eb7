package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

type testBundle struct {
	*pgmsgtest.Env
	client *pgmsg.Client
	server *Server
	ts     *httptest.Server
	ctx    context.Context
	// admin is the secret of an admin token.
	admin string
}

// setup gives a test a migrated schema, a client, a server on it and an
// admin token. cfg may be nil; its Client is filled in.
func setup(t *testing.T, cfg *Config) *testBundle {
	t.Helper()
	b := pgmsgtest.New(t, pgtest.Pool(t, &pgtest.Opts{MaxConns: 12}), nil)
	ctx := pgtest.Context(t, time.Minute)
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Client = b.Client
	srv, err := New(c)
	require.NoError(t, err)
	ts := pgtest.Serve(t, srv, srv.Drain)
	return &testBundle{Env: b, client: b.Client, server: srv, ts: ts, ctx: ctx,
		admin: b.Token(t, "admin", pgmsg.ScopeAdmin)}
}

// topic creates a topic with 64-record segments, so that a test crosses
// segment boundaries with few records.
func (tb *testBundle) topic(t *testing.T, name string, partitions int) {
	t.Helper()
	_, err := tb.client.CreateTopic(tb.ctx, name, pgmsg.TopicConfig{Partitions: partitions, SegmentRecords: 64})
	require.NoError(t, err)
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

// errorCode returns the code of an error body, checking its shape.
func (r response) errorCode(t *testing.T) string {
	t.Helper()
	var eb struct {
		Error *ErrorDetail `json:"error"`
	}
	r.json(t, &eb)
	require.NotNil(t, eb.Error, "not an error body: %s", r.body)
	require.NotEmpty(t, eb.Error.Code)
	require.NotEmpty(t, eb.Error.Message)
	return eb.Error.Code
}

// do sends a request with token (none if "") and body (JSON-encoded unless
// it is []byte or string).
func (tb *testBundle) do(t *testing.T, method, path, token string, body any) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(tb.ctx, method, tb.ts.URL+path, rd)
	require.NoError(t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := tb.ts.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{status: res.StatusCode, header: res.Header, body: raw}
}

// token creates a token with scopes and returns its secret.
func (tb *testBundle) token(t *testing.T, name string, scopes ...string) string {
	return tb.Token(t, name, scopes...)
}
