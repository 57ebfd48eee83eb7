package kafkacompat

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// franz-go's own integration tests (the kgo package's tests) are run
// against a cluster as a subprocess: the kgo test binary is built once with
// `go test -c` from the module graph of this repository (so the franz-go
// version is go.mod's), then run with KGO_SEEDS pointing at the cluster.
// The environment variables the suite honours are in its helpers_test.go:
// KGO_SEEDS, KGO_TEST_RF (replication factor of the topics it creates),
// KGO_TEST_RECORDS (records of the ETL tests, default 500,000),
// KGO_LOG_LEVEL, KGO_TEST_TLS, KGO_TEST_SCRAM(_SEEDS), KGO_TEST_OAUTH_SEEDS,
// KGO_TEST_MAX_TOPIC_PARTS, KGO_TEST_UNSAFE.

// kgoRecordsDefault is KGO_TEST_RECORDS of the runs in go test ./...:
// enough for the ETL tests to produce, consume and rebalance over several
// batches per partition, small enough for CI (PGMSG_KGO_RECORDS overrides).
const kgoRecordsDefault = 20000

// kgoTimeoutDefault bounds one run of the suite (PGMSG_KGO_TIMEOUT
// overrides): tests not started by then are reported NOT RUN.
const kgoTimeoutDefault = 12 * time.Minute

// kgoTestTimeoutDefault bounds one test of the suite, its process's
// -test.timeout (PGMSG_KGO_TEST_TIMEOUT overrides): a test that hangs is
// a failure of its own and does not take the others with it.
const kgoTestTimeoutDefault = 3 * time.Minute

// kgoParallelDefault is how many of the suite's tests run at once, each
// in a process of its own (PGMSG_KGO_PARALLEL overrides).
const kgoParallelDefault = 3

var (
	kgoBinOnce sync.Once
	kgoBin     string
	kgoBinErr  error
)

// kgoTestBinary builds franz-go's kgo test binary, once per process.
func kgoTestBinary(t *testing.T) string {
	t.Helper()
	kgoBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pgmsg-kgo-suite-")
		if err != nil {
			kgoBinErr = err
			return
		}
		kgoBin = filepath.Join(dir, "kgo.test")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", kgoBin, "github.com/twmb/franz-go/pkg/kgo")
		out, err := cmd.CombinedOutput()
		if err != nil {
			kgoBinErr = fmt.Errorf("go test -c github.com/twmb/franz-go/pkg/kgo: %w\n%s", err, out)
		}
	})
	require.NoError(t, kgoBinErr)
	return kgoBin
}

// kgoResult is the outcome of one test of the suite: a top-level test or
// a subtest (TestGroupETL/range ...).
type kgoResult string

const (
	kgoPass   kgoResult = "PASS"
	kgoFail   kgoResult = "FAIL"
	kgoSkip   kgoResult = "SKIP"
	kgoNotRun kgoResult = "NOT RUN" // its process ended (panic, timeout) before it reported, or the suite's time ran out
)

// kgoRun is one run of the suite.
type kgoRun struct {
	Results map[string]kgoResult
	Elapsed map[string]time.Duration
	// Output holds the output of each top-level test that did not pass.
	Output map[string]string
}

var kgoResultLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, name)
		return d
	}
	return def
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, name)
		return n
	}
	return def
}

// runKgoSuite runs the tests of franz-go's kgo package matching run (a
// -test.run pattern; "" for all) against seeds, each top-level test in a
// process of its own, a few at a time, with env added to the suite's
// environment.
func runKgoSuite(t *testing.T, seeds, run string, env ...string) kgoRun {
	t.Helper()
	bin := kgoTestBinary(t)
	total := envDuration(t, "PGMSG_KGO_TIMEOUT", kgoTimeoutDefault)
	perTest := envDuration(t, "PGMSG_KGO_TEST_TIMEOUT", kgoTestTimeoutDefault)
	parallel := envInt(t, "PGMSG_KGO_PARALLEL", kgoParallelDefault)
	records := envInt(t, "PGMSG_KGO_RECORDS", kgoRecordsDefault)
	if run == "" {
		run = "."
	}
	list, err := exec.Command(bin, "-test.list", run).Output()
	require.NoError(t, err, "%s -test.list", bin)
	var names []string
	for _, n := range strings.Fields(string(list)) {
		if strings.HasPrefix(n, "Test") || strings.HasPrefix(n, "Fuzz") || strings.HasPrefix(n, "Example") {
			names = append(names, n)
		}
	}
	require.NotEmpty(t, names, "no kgo test matches %q", run)
	environ := append(os.Environ(),
		"KGO_SEEDS="+seeds,
		"KGO_TEST_RF=1",
		"KGO_TEST_RECORDS="+strconv.Itoa(records),
		"KGO_LOG_LEVEL=none",
	)
	environ = append(environ, env...)
	deadline := time.Now().Add(total)
	res := kgoRun{Results: map[string]kgoResult{}, Elapsed: map[string]time.Duration{}, Output: map[string]string{}}
	var mu sync.Mutex
	work := make(chan string)
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				results, elapsed, out := runKgoTest(bin, name, perTest, deadline, environ)
				mu.Lock()
				for n, r := range results {
					res.Results[n] = r
					res.Elapsed[n] = elapsed[n]
				}
				if results[name] == "" {
					res.Results[name] = kgoNotRun
				}
				if res.Results[name] != kgoPass {
					res.Output[name] = out
				}
				mu.Unlock()
			}
		}()
	}
	for _, n := range names {
		work <- n
	}
	close(work)
	wg.Wait()
	return res
}

// runKgoTest runs one top-level test (and its subtests) in a process of
// its own, bounded by timeout and the suite's deadline.
func runKgoTest(bin, name string, timeout time.Duration, deadline time.Time, environ []string) (map[string]kgoResult, map[string]time.Duration, string) {
	results, elapsed := map[string]kgoResult{}, map[string]time.Duration{}
	if left := time.Until(deadline); left < timeout {
		if left < 10*time.Second {
			return results, elapsed, "not started: the suite's time (PGMSG_KGO_TIMEOUT) ran out"
		}
		timeout = left
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.v", "-test.count=1", "-test.timeout", timeout.String(),
		"-test.run", "^"+regexp.QuoteMeta(name)+"$")
	cmd.Env = environ
	cmd.Dir = os.TempDir()
	cmd.WaitDelay = 10 * time.Second
	out, _ := cmd.CombinedOutput()
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := kgoResultLine.FindStringSubmatch(sc.Text()); m != nil {
			results[m[2]] = kgoResult(m[1])
			secs, _ := strconv.ParseFloat(m[3], 64)
			elapsed[m[2]] = time.Duration(secs * float64(time.Second))
		}
	}
	return results, elapsed, string(out)
}

// kgoSuiteList reads a list of test names, one a line; a line starting
// with '#' is a comment, and text after " #" is one (the reason of an
// exclusion). Test names hold no white space (go test replaces it), but
// may hold '#' (Fuzz seeds: FuzzX/seed#0).
func kgoSuiteList(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		name, why, _ := strings.Cut(line, " #")
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		out[name] = strings.TrimSpace(why)
	}
	return out
}

// kgoSummary is a run's results, one a line, sorted by name.
func kgoSummary(r kgoRun) string {
	names := make([]string, 0, len(r.Results))
	for n := range r.Results {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s %s %s\n", r.Results[n], n, r.Elapsed[n].Round(10*time.Millisecond))
	}
	return b.String()
}
