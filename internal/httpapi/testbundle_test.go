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
)

type testBundle struct {
	*pgtest.Bundle
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
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 12})
	client, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Client = client
	srv, err := New(c)
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Drain)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	admin, _, err := client.CreateToken(ctx, "admin", []string{pgmsg.ScopeAdmin}, nil)
	require.NoError(t, err)
	return &testBundle{Bundle: b, client: client, server: srv, ts: ts, ctx: ctx, admin: admin}
}

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
	t.Helper()
	secret, _, err := tb.client.CreateToken(tb.ctx, name, scopes, nil)
	require.NoError(t, err)
	return secret
}
