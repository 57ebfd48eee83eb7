package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgcluster"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// syncBuffer is a bytes.Buffer safe for a command writing while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) lines() int { return strings.Count(s.String(), "\n") }

// consume --follow and queue work --follow keep going when the database
// restarts under them: they say so on stderr, retry, and go on from the
// committed position (they used to exit with "cannot connect").
// The server is a throwaway cluster of the test's own, stopped and started
// again on the same port.
func TestFollowRidesThroughRestart(t *testing.T) {
	t.Parallel()
	_, err := pgcluster.FindBinaries()
	require.NoError(t, err, "PostgreSQL's server binaries are needed to restart a server")
	parent, err := os.MkdirTemp("", "pgmsg-cli-restart-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	require.NoError(t, os.Chmod(parent, 0o755)) // the server's user must enter it
	dir := filepath.Join(parent, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	server, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: dir})
	require.NoError(t, err)
	stopped := false
	defer func() {
		if !stopped {
			_ = server.Stop()
		}
	}()
	url, port := server.URL, server.Port

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	m, err := pgmsgmigrate.New(pool, nil)
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	client, err := pgmsg.NewClient(pool, nil)
	require.NoError(t, err)
	defer client.Close()
	_, err = client.CreateTopic(ctx, "events", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	produce := func(from, to int) {
		// Right after the restart the pool may hand out a dead connection:
		// retry what is retryable.
		for i := from; i < to; i++ {
			require.Eventually(t, func() bool {
				err := client.Publish(ctx, []*pgmsg.Record{{Topic: "events", Value: []byte(`{"n":` + string(rune('0'+i)) + `}`)}}, nil)
				require.True(t, err == nil || pgmsg.IsRetryable(err), "publish: %v", err)
				if err != nil {
					return false
				}
				_, err = client.Enqueue(ctx, "jobs", pgmsg.EnqueueParams{Payload: []byte("job")}, nil)
				require.True(t, err == nil || pgmsg.IsRetryable(err), "enqueue: %v", err)
				return err == nil
			}, time.Minute, 100*time.Millisecond)
		}
	}
	produce(0, 3)

	type command struct {
		stdout, stderr *syncBuffer
		done           chan error
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	start := func(args ...string) *command {
		cmd := &command{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1)}
		g := &globals{stdin: strings.NewReader(""), stdout: cmd.stdout, stderr: cmd.stderr}
		root := newRoot(g) // its flags set the globals
		root.SetArgs(append([]string{"--database-url", url, "--schema", pgmsg.SchemaDefault}, args...))
		root.SetOut(cmd.stdout)
		root.SetErr(cmd.stderr)
		go func() { cmd.done <- root.ExecuteContext(cctx) }()
		return cmd
	}
	consume := start("consume", "events", "--group", "tail", "--follow")
	work := start("queue", "work", "jobs", "--follow")
	// serve too: its pool reconnects and its maintenance loop goes on.
	serveOut := &syncBuffer{}
	sg := &globals{databaseURL: url, schema: pgmsg.SchemaDefault, stdin: strings.NewReader(""), stdout: serveOut,
		stderr: serveOut, output: "table"}
	addrc := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- sg.serve(cctx, serveOpts{listen: "127.0.0.1:0", maxConns: 4, insecureNoAuth: true, maintenance: true,
			ready: func(a string) { addrc <- a }})
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-served:
		t.Fatalf("serve: %v", err)
	}
	status := func(method, path, body string) int {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		defer res.Body.Close()
		_, _ = io.Copy(io.Discard, res.Body)
		return res.StatusCode
	}
	require.Equal(t, http.StatusOK, status("GET", "/readyz", ""))
	printed := func(c *command, n int) func() bool {
		return func() bool {
			select {
			case err := <-c.done:
				t.Fatalf("the command ended: %v; stderr: %s", err, c.stderr.String())
			default:
			}
			return c.stdout.lines() >= n
		}
	}
	require.Eventually(t, printed(consume, 3), time.Minute, 20*time.Millisecond)
	require.Eventually(t, printed(work, 3), time.Minute, 20*time.Millisecond)

	require.NoError(t, server.Stop())
	stopped = true
	// Long enough for both to meet the outage (work polls every second).
	time.Sleep(2 * time.Second)
	server, err = pgcluster.Start(ctx, pgcluster.Options{DataDir: dir, Port: port})
	require.NoError(t, err)
	stopped = false
	produce(3, 6)

	require.Eventually(t, func() bool { return status("GET", "/readyz", "") == http.StatusOK }, time.Minute, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		return status("POST", "/v1/pubsub/publish", `{"topic":"events","records":[{"value":{"n":6}}]}`) == http.StatusOK
	}, time.Minute, 50*time.Millisecond)
	require.Eventually(t, printed(consume, 7), time.Minute, 20*time.Millisecond)
	require.Eventually(t, printed(work, 6), time.Minute, 20*time.Millisecond)
	for _, c := range []*command{consume, work} {
		require.Contains(t, c.stderr.String(), "pgmsg: database unavailable")
		require.Contains(t, c.stderr.String(), "pgmsg: database available again after")
	}
	// Every record was printed (at least once: a commit lost in the
	// restart delivers its records again).
	for i := 0; i < 7; i++ {
		require.Contains(t, consume.stdout.String(), `"value":{"n":`+string(rune('0'+i))+`}`)
	}
	stop()
	select {
	case err := <-served:
		require.NoError(t, err, serveOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	http.DefaultClient.CloseIdleConnections()
	for _, c := range []*command{consume, work} {
		select {
		case err := <-c.done:
			require.NoError(t, err, c.stderr.String())
		case <-time.After(30 * time.Second):
			t.Fatal("the command did not stop on its context")
		}
	}
}
