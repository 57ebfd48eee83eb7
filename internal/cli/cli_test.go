package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

func TestGoldenTopics(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "topic", "create", "orders", "--partitions", "3")
	s.fail("", "topic", "create", "orders")
	s.fail("", "topic", "create", "bad name!")
	s.fail("", "topic", "create", "big", "--partitions", "5000")
	s.ok("", "topic", "create", "audit")
	s.ok("", "topic", "list")
	s.ok("", "topic", "describe", "orders")
	var desc pgmsg.TopicDescription
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "topic", "describe", "audit", "-o", "json")), &desc))
	require.Equal(t, "audit", desc.Name)
	require.Len(t, desc.PartitionInfo, 1)
	s.fail("", "topic", "describe", "nope")
	s.ok("", "topic", "config", "orders")
	s.ok("", "topic", "config", "orders", "max_lag_bytes=1073741824", "backpressure_timeout_ms=2000", "cleanup_policy=compact")
	s.ok("", "topic", "config", "orders", "cleanup_policy=")
	s.fail("", "topic", "config", "orders", "max_lag_records=-5")
	s.fail("", "topic", "config", "orders", "novalue")
	s.fail("", "topic", "config", "nope", "max_lag_records=5")
	var cfg struct {
		Topic    string         `json:"topic"`
		Settings map[string]any `json:"settings"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "topic", "config", "orders", "-o", "json")), &cfg))
	require.Equal(t, map[string]any{"max_lag_bytes": 1073741824.0, "backpressure_timeout_ms": 2000.0}, cfg.Settings)
	s.ok("", "topic", "delete", "audit")
	s.fail("", "topic", "delete", "audit")
	var topics []pgmsg.Topic
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "topic", "list", "-o", "json")), &topics))
	require.Len(t, topics, 1)
	require.Equal(t, "orders", topics[0].Name)
	s.fail("", "topic", "list", "-o", "xml")
	s.check("topics")
}

func TestGoldenPublishConsume(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "topic", "create", "orders", "--partitions", "3")
	s.ok("alice:{\"n\":1}\nbob:{\"n\":2}\ncarol:plain text\nalice:{\"n\":4}\nbob:{\"n\":5}\n", "publish", "orders", "--key-separator", ":")
	var pub struct {
		Topic      string         `json:"topic"`
		Published  int            `json:"published"`
		Partitions map[string]int `json:"partitions"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("one\ntwo\n", "publish", "orders", "--partition", "2", "--header", "source=test", "-o", "json")), &pub))
	require.Equal(t, 2, pub.Published)
	require.Equal(t, map[string]int{"2": 2}, pub.Partitions)
	s.fail("x\n", "publish", "orders", "--partition", "9")
	s.fail("x\n", "publish", "nope")
	s.fail("", "publish", "orders", "--header", "novalue")
	s.ok("", "consume", "orders", "--group", "billing")
	s.ok("", "consume", "orders", "--group", "billing")
	s.ok("", "consume", "orders", "--group", "audit", "--max", "2")
	s.ok("", "group", "list")
	s.ok("", "group", "list", "--partitions")
	// JSON output is checked by shape, not golden: the library's structs
	// grow fields.
	var sums []pgmsg.GroupSummary
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "group", "list", "-o", "json")), &sums))
	require.Len(t, sums, 2) // one row per group, not per partition
	require.Equal(t, "audit", sums[0].Group)
	require.Equal(t, int32(3), sums[0].Partitions)
	require.Equal(t, int64(5), sums[0].Lag) // 7 records, 2 read
	require.Equal(t, "billing", sums[1].Group)
	require.Equal(t, int64(0), sums[1].Lag)
	var gps []pgmsg.GroupPartition
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "group", "list", "orders", "-o", "json")), &gps))
	require.Len(t, gps, 6)
	require.Equal(t, "audit", gps[0].Group)
	require.Equal(t, int64(2), gps[0].Lag)
	s.ok("", "group", "describe", "audit")
	s.ok("", "group", "reset", "billing", "orders", "--to", "earliest")
	s.ok("", "consume", "orders", "--group", "billing", "--max", "1", "--partition", "2")
	s.fail("", "group", "reset", "billing", "orders", "--to", "not-a-time")
	s.fail("", "group", "reset", "billing", "orders", "--to", "yesterday")
	s.fail("", "group", "reset", "nope", "orders", "--to", "latest")
	s.fail("", "group", "reset", "billing", "orders")
	s.fail("", "consume", "orders")
	s.ok("", "consume", "orders", "--group", "late", "--from", "latest")
	s.ok("", "group", "delete", "late", "orders")
	s.fail("", "group", "delete", "late", "orders")
	s.fail("", "group", "describe", "late")
	s.ok("", "group", "list", "orders")
	// --follow joins the group as a member and stops after --max records.
	s.ok("", "consume", "orders", "--group", "follower", "--follow", "--max", "3")
	// A topic with records and groups is deleted only with --force.
	s.fail("", "topic", "delete", "orders")
	s.ok("", "topic", "delete", "orders", "--force")
	s.check("publish_consume")
}

// Queue administration: create, show and change settings (the depth limit
// trips and is removed), list, delete.
func TestGoldenQueueAdmin(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "queue", "list")
	s.ok("", "queue", "create", "emails", "--max-attempts", "5", "--lease", "1m")
	s.fail("", "queue", "create", "emails")
	s.fail("", "queue", "create", "bad name!")
	s.fail("", "queue", "create", "x", "--max-depth", "-3")
	s.ok("", "queue", "config", "emails")
	s.ok("", "queue", "config", "emails", "--max-depth", "2", "--backpressure-timeout", "0")
	s.ok("", "queue", "enqueue", "emails", "one")
	s.ok("", "queue", "enqueue", "emails", "two")
	s.fail("", "queue", "enqueue", "emails", "three")
	s.ok("", "queue", "config", "emails", "--max-depth", "0")
	s.ok("", "queue", "enqueue", "emails", "three")
	var q pgmsg.Queue
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "config", "emails", "-o", "json")), &q))
	require.Equal(t, 5, q.MaxAttempts)
	require.Equal(t, time.Minute, q.Lease)
	require.Zero(t, q.MaxDepth)
	s.fail("", "queue", "config", "nope")
	s.ok("", "queue", "list")
	s.ok("", "queue", "list", "-o", "wide")
	s.fail("", "queue", "delete", "emails")
	s.ok("", "queue", "delete", "emails", "--force")
	s.check("queue_admin")
}

func TestGoldenQueue(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.scrubs = append(s.scrubs, func(out string) string { return ageColumn.ReplaceAllString(out, "  <AGE>") })
	s.ok("", "queue", "stats")
	s.ok("", "queue", "enqueue", "emails", `{"to":"a@example.com"}`)
	s.ok("{\"to\":\"b\"}\n{\"to\":\"c\"}\n", "queue", "enqueue", "emails", "--priority", "5", "--kind", "welcome")
	s.ok("", "queue", "enqueue", "emails", "later", "--delay", "1h")
	s.ok("", "queue", "enqueue", "reports", "r1", "--unique-key", "day-1")
	s.ok("", "queue", "enqueue", "reports", "r1-again", "--unique-key", "day-1")
	s.fail("", "queue", "enqueue", "emails", "x", "--priority", "99999")
	s.fail("", "queue", "enqueue", "emails")
	s.ok("", "queue", "stats")
	s.ok("", "queue", "work", "emails", "--max", "2")
	var st []pgmsg.QueueStats
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "stats", "emails", "-o", "json")), &st))
	require.Equal(t, int64(2), st[0].Archived)
	require.Equal(t, int64(1), st[0].Available)
	s.fail("", "queue", "stats", "nope")

	// A dead job, made through the library as a worker would.
	c := newClient(t, s)
	_, err := c.Enqueue(context.Background(), "jobs", pgmsg.EnqueueParams{Payload: []byte(`{"id":7}`), MaxAttempts: 1, Kind: "sync"}, nil)
	require.NoError(t, err)
	jobs, err := c.ClaimJobs(context.Background(), "jobs", nil)
	require.NoError(t, err)
	_, err = c.Fail(context.Background(), jobs[0], errors.New("upstream timeout"), nil)
	require.NoError(t, err)

	s.ok("", "queue", "dead", "list", "jobs")
	s.ok("", "queue", "dead", "requeue", "jobs")
	s.ok("", "queue", "work", "jobs")
	s.ok("", "queue", "work", "jobs")
	s.ok("", "queue", "work", "emails", "--follow", "--max", "1")
	s.ok("", "queue", "dead", "purge", "jobs")
	s.fail("", "queue", "dead", "list", "nope")
	s.check("queue")
}

func TestGoldenTokens(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "token", "create", "billing-svc", "--scope", "consume:orders", "--scope", "publish:invoices.*")
	s.ok("", "token", "create", "ops", "--scope", "admin", "--expires-in", "720h")
	s.fail("", "token", "create", "ops", "--scope", "admin")
	s.fail("", "token", "create", "x", "--scope", "root")
	s.fail("", "token", "create", "x")
	s.ok("", "token", "list")
	s.ok("", "token", "revoke", "billing-svc")
	s.fail("", "token", "revoke", "billing-svc")
	s.fail("", "token", "revoke", "99")
	s.ok("", "token", "list")
	out := s.ok("", "token", "create", "ci", "--scope", "publish:*,consume:*", "-o", "json")
	var created struct {
		Token  string   `json:"token"`
		Scopes []string `json:"scopes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &created))
	require.Equal(t, []string{"publish:*", "consume:*"}, created.Scopes)
	tok, err := newClient(t, s).VerifyToken(context.Background(), created.Token)
	require.NoError(t, err)
	require.Equal(t, "ci", tok.Name)
	s.check("tokens")
}

func TestGoldenErrors(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.fail("", "serve", "--insecure-no-auth", "--listen", "0.0.0.0:0")
	s.fail("", "consume", "orders", "--group", "g", "--encoding", "xml")
	s.fail("", "publish")
	s.check("errors")

	var stdout, stderr strings.Builder
	code := Main([]string{"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "topic", "list"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "pgmsg: error: cannot connect to PostgreSQL")
	// pgx's connect error spans lines; root.go's oneLine should fold it
	// (requested in the report) before this can require a single line.
}

// TestServe runs `pgmsg serve` and talks to it with a token made by
// `pgmsg token create`; cancelling the context shuts it down.
func TestServe(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "topic", "create", "orders", "--partitions", "2")
	out := s.ok("", "token", "create", "app", "--scope", "publish:orders", "--scope", "consume:orders", "-o", "json")
	var created struct {
		Token string `json:"token"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &created))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr strings.Builder
	g := &globals{databaseURL: s.b.URL, schema: s.b.Schema, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, output: "table"}
	addrc := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- g.serve(ctx, serveOpts{listen: "127.0.0.1:0", maxConns: 4, ready: func(a string) { addrc <- a }})
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-served:
		t.Fatalf("serve: %v", err)
	}
	do := func(method, path, token, body string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := do("POST", "/pubsub/publish", created.Token, `{"topic":"orders","records":[{"key":"k","value":{"a":1}}]}`)
	require.Equal(t, http.StatusOK, code, body)
	code, body = do("GET", "/pubsub/consume?topic=orders&group=g&wait=5s&auto_commit=true", created.Token, "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"value":{"a":1}`)
	code, _ = do("GET", "/v1/topics", created.Token, "")
	require.Equal(t, http.StatusForbidden, code)
	code, _ = do("GET", "/v1/topics", "", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = do("GET", "/readyz", "", "")
	require.Equal(t, http.StatusOK, code)
	// The dashboard is mounted: its login page is served.
	code, body = do("GET", "/ui/login", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `name="token"`)
	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	require.Contains(t, stdout.String(), "pgmsg serving HTTP on http://127.0.0.1:")
	require.Contains(t, stdout.String(), "pgmsg dashboard on http://127.0.0.1:")
	require.Contains(t, stdout.String(), "server stopped")
	http.DefaultClient.CloseIdleConnections()
}

// ageColumn matches the OLDEST WAITING column, which depends on timing.
var ageColumn = regexp.MustCompile(`(?m)  \d[0-9hms.]*s$`)

func newClient(t *testing.T, s *session) *pgmsg.Client {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), s.b.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: s.b.Schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestQueueRetry(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	c := newClient(t, s)
	res, err := c.Enqueue(context.Background(), "q", pgmsg.EnqueueParams{Payload: []byte("x"), Delay: time.Hour}, nil)
	require.NoError(t, err)
	id := strconv.FormatInt(res.ID, 10)
	require.Equal(t, "job "+id+" is available\n", s.ok("", "queue", "retry", id))
	var out struct {
		ID    int64  `json:"id"`
		State string `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "retry", id, "-o", "json")), &out))
	require.Equal(t, res.ID, out.ID)
	require.Equal(t, "available", out.State)
	require.Contains(t, s.fail("", "queue", "retry", "abc"), "positive integer")
	require.Contains(t, s.fail("", "queue", "retry", "999999999"), "[PM107]")
}

// --read-replica-url: a replica that does not answer is reported on
// stderr and the records are read from the primary (the replica path
// itself is proven against a real standby in the root package's
// TestReadReplica* tests); a malformed URL is refused.
func TestConsumeReadReplicaFlag(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "topic", "create", "rr", "--partitions", "1")
	s.ok("a\nb\nc\n", "publish", "rr")
	out, errOut, code := s.run("", "consume", "rr", "--group", "g", "--read-replica-url",
		"postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "read replica 127.0.0.1:1 does not answer")
	require.Equal(t, 3, strings.Count(out, "\n"), out)
	_, errOut, code = s.run("", "consume", "rr", "--group", "g", "--read-replica-url", "postgres://%zz")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "invalid --read-replica-url")
}
