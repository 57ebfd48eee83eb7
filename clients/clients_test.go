// Package clients_test runs the Python and Node clients' own test suites
// against the test server, and the interop tests between them and the Go
// client: Go publishes, Python then Node consume one group's records; Python
// and Node enqueue, a Go worker completes. Each suite gets a schema of its
// own, migrated by the Go migrator and dropped afterwards.
//
// A runtime that is missing (python3 with psycopg, node with the
// clients/node packages installed) skips its tests with a loud message,
// unless PGMSG_REQUIRE_CLIENTS is set: .ci/run sets it, after installing
// both, so that nothing is skipped in CI.
package clients_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// missing skips the test with a message nobody can overlook, or fails it
// when the clients are required (CI).
func missing(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("PGMSG_REQUIRE_CLIENTS") != "" {
		t.Fatalf("%s (PGMSG_REQUIRE_CLIENTS is set: .ci/run installs it)", what)
	}
	fmt.Fprintf(os.Stderr, "\n*** %s: SKIPPING %s (not tested; bash .ci/run installs what it needs) ***\n\n", what, t.Name())
	t.Skip(what)
}

// python returns the interpreter that has psycopg (Debian's python3-psycopg
// is for /usr/bin/python3; PGMSG_PYTHON overrides).
func python(t *testing.T) string {
	t.Helper()
	py := os.Getenv("PGMSG_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if out, err := exec.Command(py, "-c", "import psycopg").CombinedOutput(); err != nil {
		missing(t, fmt.Sprintf("%s cannot import psycopg (apt-get install python3-psycopg): %v %s", py, err, out))
	}
	return py
}

// nodeBuild compiles clients/node (tsc) once for the tests that need it,
// into a directory of the test run's own: nothing is written into the
// source tree, and runs in parallel do not share output.
type nodeBuild struct {
	once sync.Once
	dir  string // the compiled src/ and test/
	err  error
}

// node returns node and the directory of the compiled client and tests.
func (nb *nodeBuild) node(t *testing.T) (nodeBin, dir string) {
	t.Helper()
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node is not installed")
	}
	tsc := filepath.Join("node", "node_modules", ".bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		missing(t, "clients/node has no node_modules (run npm ci in clients/node)")
	}
	nb.once.Do(func() {
		out, err := exec.Command(tsc, "-p", "node", "--outDir", nb.dir).CombinedOutput()
		if err != nil {
			nb.err = fmt.Errorf("tsc -p clients/node: %v\n%s", err, out)
		}
	})
	require.NoError(t, nb.err)
	return nodeBin, nb.dir
}

// nodeEnv lets the compiled code, outside clients/node, find its packages.
func nodeEnv(t *testing.T) string {
	t.Helper()
	modules, err := filepath.Abs(filepath.Join("node", "node_modules"))
	require.NoError(t, err)
	return "NODE_PATH=" + modules
}

// run runs a client subprocess in dir with the test database in its
// environment, and returns its standard output; a failure shows both.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "%s %s\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), stdout.String(), stderr.String())
	t.Logf("%s %s:\n%s", name, strings.Join(args, " "), stderr.String())
	return stdout.String()
}

// start starts a client subprocess as run does; the function it returns
// waits for it (at most two minutes from its start: a consumer that no
// notification wakes is killed then, and the test fails with its output).
func start(t *testing.T, dir string, env []string, name string, args ...string) (wait func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	return func() string {
		t.Helper()
		err := cmd.Wait()
		cancel()
		require.NoError(t, err, "%s %s\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), stdout.String(), stderr.String())
		return stdout.String()
	}
}

func testEnv(b *pgtest.Bundle) []string {
	return []string{"PGMSG_TEST_DATABASE_URL=" + b.URL, "PGMSG_TEST_SCHEMA=" + b.Schema, "PYTHONDONTWRITEBYTECODE=1"}
}

// TestClients runs the clients' suites and the interop tests, in parallel,
// sharing one compilation of the Node client (removed when all are done).
func TestClients(t *testing.T) {
	nb := &nodeBuild{dir: t.TempDir()}
	t.Run("PythonSuite", func(t *testing.T) { t.Parallel(); testPythonSuite(t) })
	t.Run("NodeSuite", func(t *testing.T) { t.Parallel(); testNodeSuite(t, nb) })
	t.Run("InteropGoPublishesPythonThenNodeConsume", func(t *testing.T) {
		t.Parallel()
		testInteropGoPublishesPythonThenNodeConsume(t, nb)
	})
	t.Run("InteropGoPublishWakesPythonAndNode", func(t *testing.T) {
		t.Parallel()
		testInteropGoPublishWakesPythonAndNode(t, nb)
	})
	t.Run("InteropPythonAndNodeEnqueueGoWorks", func(t *testing.T) {
		t.Parallel()
		testInteropPythonAndNodeEnqueueGoWorks(t, nb)
	})
}

// testPythonSuite runs clients/python's unittest suites (sync and asyncio).
func testPythonSuite(t *testing.T) {
	py := python(t)
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 2})
	run(t, "python", testEnv(b), py, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
}

// testNodeSuite runs clients/node's node:test suite on the compiled output.
func testNodeSuite(t *testing.T, nb *nodeBuild) {
	nodeBin, dir := nb.node(t)
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: 2})
	files, err := filepath.Glob(filepath.Join(dir, "test", "*.test.js"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "tsc wrote no tests")
	run(t, "node", append(testEnv(b), nodeEnv(t)), nodeBin, append([]string{"--test"}, files...)...)
}

// interop is what an interop test needs: the Python interpreter, the
// compiled Node client, a schema of its own and a Go client on it (closed
// when the test ends).
func interop(t *testing.T, nb *nodeBuild) (py, nodeBin, dir string, b *pgtest.Bundle, client *pgmsg.Client) {
	t.Helper()
	py = python(t)
	nodeBin, dir = nb.node(t)
	b = pgtest.Schema(t, nil)
	client, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return py, nodeBin, dir, b, client
}

// consumed is a record as the client scripts print it.
type consumed struct {
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       string            `json:"key"`
	Value     string            `json:"value"`
	Headers   map[string][]byte `json:"headers"`
}

func parseLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var res []T
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var v T
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v), "line %q", sc.Text())
		res = append(res, v)
	}
	return res
}

// Go publishes keyed records with headers on three partitions; Python
// consumes the group "shared" until it has read at least 12 records,
// committing claim by claim; Node then consumes the rest as the same
// group. Between them they read every record exactly once, each
// partition in offset order (Python's part first), with the keys, values
// and headers Go published.
func testInteropGoPublishesPythonThenNodeConsume(t *testing.T, nb *nodeBuild) {
	py, nodeBin, dir, b, client := interop(t, nb)
	ctx := context.Background()
	_, err := client.CreateTopic(ctx, "interop", pgmsg.TopicConfig{Partitions: 3})
	require.NoError(t, err)
	const n = 30
	var recs []*pgmsg.Record
	for i := range n {
		recs = append(recs, &pgmsg.Record{Topic: "interop", Key: []byte(fmt.Sprintf("k%d", i%5)),
			Value: []byte(fmt.Sprintf("v%d", i)), Headers: map[string][]byte{"i": {byte(i), 0xff}}})
	}
	require.NoError(t, client.Publish(ctx, recs, nil))

	env := append(testEnv(b), nodeEnv(t))
	fromPy := parseLines[consumed](t, run(t, "python", env, py, "-m", "tests.interop", "consume", b.URL, b.Schema, "interop", "shared", "12"))
	require.GreaterOrEqual(t, len(fromPy), 12)
	require.Less(t, len(fromPy), n, "Python stops after 12 records, a claim of at most 4 later")
	fromNode := parseLines[consumed](t, run(t, "node", env, nodeBin, filepath.Join(dir, "test", "interop.js"), "consume", b.URL, b.Schema, "interop", "shared", fmt.Sprint(n-len(fromPy))))
	require.NotEmpty(t, fromNode)

	want := map[int32][]consumed{}
	for _, r := range recs {
		want[r.Partition] = append(want[r.Partition], consumed{Partition: r.Partition, Offset: r.Offset,
			Key: string(r.Key), Value: string(r.Value), Headers: r.Headers})
	}
	got := map[int32][]consumed{}
	for _, c := range append(fromPy, fromNode...) {
		got[c.Partition] = append(got[c.Partition], c)
	}
	require.Equal(t, want, got, "every record once, per partition in offset order, Python's then Node's")
	parts, err := client.ListGroups(ctx, "interop", "shared")
	require.NoError(t, err)
	require.Len(t, parts, 3)
	for _, p := range parts {
		require.Zero(t, p.Lag, "the commits of both clients moved the cursor of partition %d to the end", p.Partition)
	}
}

// The Go client's publisher notifies "topic#partition" after its commit;
// the Python and Node consumers wait for their topic's name. A consumer of
// each, LISTENing and polling once an hour, is woken by one Go publish to
// partition 1 and reads it.
func testInteropGoPublishWakesPythonAndNode(t *testing.T, nb *nodeBuild) {
	py, nodeBin, dir, b, client := interop(t, nb)
	ctx := context.Background()
	_, err := client.CreateTopic(ctx, "wake", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)

	env := append(testEnv(b), nodeEnv(t))
	tag := func(name string) string {
		return fmt.Sprintf("%s%sapplication_name=%s", b.URL, map[bool]string{true: "&", false: "?"}[strings.Contains(b.URL, "?")], name)
	}
	pyApp, nodeApp := "wake_py_"+b.Schema, "wake_node_"+b.Schema
	pyOut := start(t, "python", env, py, "-m", "tests.interop", "wait", tag(pyApp), b.Schema, "wake", "py", "1")
	nodeOut := start(t, "node", env, nodeBin, filepath.Join(dir, "test", "interop.js"), "wait", tag(nodeApp), b.Schema, "wake", "node", "1")
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = ANY($1) AND query LIKE 'LISTEN %' AND state = 'idle'`,
			[]string{pyApp, nodeApp}).Scan(&n))
		return n == 2
	}, 2*time.Minute, 20*time.Millisecond, "both consumers listen")

	require.NoError(t, client.Publish(ctx, []*pgmsg.Record{{Topic: "wake", Partition: 1, Value: []byte("woken")}},
		&pgmsg.PublishOpts{ManualPartition: true}))
	type value struct {
		Value string `json:"value"`
	}
	want := []value{{"woken"}}
	require.Equal(t, want, parseLines[value](t, pyOut()), "Python woke on the Go publish's notification")
	require.Equal(t, want, parseLines[value](t, nodeOut()), "Node woke on the Go publish's notification")
}

// Python and Node enqueue jobs through the SQL API; a Go worker completes
// every one of them with the payload they enqueued.
func testInteropPythonAndNodeEnqueueGoWorks(t *testing.T, nb *nodeBuild) {
	py, nodeBin, dir, b, client := interop(t, nb)
	ctx := context.Background()

	type enqueued struct {
		ID int64 `json:"id"`
	}
	env := append(testEnv(b), nodeEnv(t))
	ids := parseLines[enqueued](t, run(t, "python", env, py, "-m", "tests.interop", "enqueue", b.URL, b.Schema, "interop", "5"))
	ids = append(ids, parseLines[enqueued](t, run(t, "node", env, nodeBin, filepath.Join(dir, "test", "interop.js"), "enqueue", b.URL, b.Schema, "interop", "5"))...)
	require.Len(t, ids, 10)

	var mu sync.Mutex
	handled := map[int64]string{}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := client.Work(wctx, "interop", func(ctx context.Context, job *pgmsg.Job) error {
		mu.Lock()
		defer mu.Unlock()
		handled[job.ID] = job.Kind + " " + string(job.Payload)
		if len(handled) == len(ids) {
			cancel()
		}
		return job.SetResult(map[string]string{"by": "go"})
	}, 4)
	require.ErrorIs(t, err, context.Canceled)
	for i, e := range ids {
		kind := "py"
		if i >= 5 {
			kind = "node"
		}
		require.Equal(t, fmt.Sprintf(`%s {"n": %d}`, kind, i%5), handled[e.ID])
		job, err := client.GetJob(ctx, e.ID)
		require.NoError(t, err)
		require.Equal(t, pgmsg.JobStateCompleted, job.State, "job %d", e.ID)
		require.JSONEq(t, `{"by":"go"}`, string(job.Result))
	}
}
