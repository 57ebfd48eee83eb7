package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// loginAs creates a login role that is a member of the schema's role
// (named after the schema, so that tests running at once on one server
// never share one) and returns the session's URL for it.
func loginAs(t *testing.T, s *session, role string) string {
	t.Helper()
	ctx := context.Background()
	login := s.b.Schema + "_login_" + role
	_, err := s.b.Pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{login}.Sanitize()+" LOGIN IN ROLE "+
		pgx.Identifier{s.b.Schema + "_" + role}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = s.b.Pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{login}.Sanitize())
	})
	u, err := url.Parse(s.b.URL)
	require.NoError(t, err)
	u.User = url.User(login)
	return u.String()
}

// runAs runs pgmsg with the database URL given.
func runAs(t *testing.T, s *session, dbURL, stdin string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	full := append([]string{"--database-url", dbURL, "--schema", s.b.Schema}, args...)
	code := Main(full, strings.NewReader(stdin), &stdout, &stderr)
	require.Zero(t, code, "pgmsg %v: %s", args, stderr.String())
	return stdout.String()
}

// Issue 51, finding 6: each command runs as the login role the docs give
// it (docs/operations.md, "Database roles"), the start-up's migration
// check included: publish as a producer, consume as a consumer, queue work
// as a worker, serve as the admin.
func TestCommandsRunAsTheirRoles(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "topic", "create", "orders", "--partitions", "2")
	s.ok("", "queue", "enqueue", "emails", "a")
	s.ok("", "queue", "enqueue", "emails", "b")
	secret := secretRE.FindString(s.ok("", "token", "create", "ops", "--scope", "admin", "-o", "json"))
	require.NotEmpty(t, secret)

	producer := loginAs(t, s, "producer")
	consumer := loginAs(t, s, "consumer")
	worker := loginAs(t, s, "worker")
	admin := loginAs(t, s, "admin")

	runAs(t, s, producer, "one\ntwo\nthree\n", "publish", "orders")
	out := runAs(t, s, consumer, "", "consume", "orders", "--group", "g", "-o", "json")
	for _, v := range []string{"one", "two", "three"} {
		require.Contains(t, out, v)
	}
	runAs(t, s, worker, "", "queue", "work", "emails", "--max", "2")
	require.Contains(t, s.ok("", "queue", "stats", "emails", "-o", "json"), `"archived": 2`)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr strings.Builder
	g := &globals{databaseURL: admin, schema: s.b.Schema, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, output: "table"}
	addrc := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- g.serve(ctx, serveOpts{listen: "127.0.0.1:0", maxConns: 4, authBurst: 10, maintenance: true,
			maxRecords: 100, maxBodyBytes: 1 << 20, maxAnswerBytes: 1 << 20, maxWait: time.Second,
			ready: func(a string) { addrc <- a }})
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-served:
		t.Fatalf("serve as the admin role: %v", err)
	}
	do := func(method, path, body string) int {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusOK, do(http.MethodGet, "/v1/topics", ""))
	require.Equal(t, http.StatusOK, do(http.MethodPost, "/v1/pubsub/publish",
		`{"topic":"orders","encoding":"text","records":[{"value":"four"}]}`))
	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	require.NotContains(t, stderr.String(), "permission denied")
}
