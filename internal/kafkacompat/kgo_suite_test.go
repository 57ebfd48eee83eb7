package kafkacompat

import (
	"bufio"
	"context"
	"fmt"
	"io"
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
// overrides): the kgo test binary's -test.timeout; the subprocess is
// killed a minute after it.
const kgoTimeoutDefault = 8 * time.Minute

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
	kgoNotRun kgoResult = "NOT RUN" // the binary ended (panic, timeout) before it reported
)

// kgoRun is one run of the suite.
type kgoRun struct {
	Results map[string]kgoResult
	Elapsed map[string]time.Duration
	Output  string // the binary's stdout and stderr, for the failure message
}

var kgoResultLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)

// runKgoSuite runs the tests of franz-go's kgo package matching run (a
// -test.run pattern) against seeds, with env added to the suite's
// environment.
func runKgoSuite(t *testing.T, seeds, run string, env ...string) kgoRun {
	t.Helper()
	bin := kgoTestBinary(t)
	timeout := kgoTimeoutDefault
	if v := os.Getenv("PGMSG_KGO_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "PGMSG_KGO_TIMEOUT")
		timeout = d
	}
	records := kgoRecordsDefault
	if v := os.Getenv("PGMSG_KGO_RECORDS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "PGMSG_KGO_RECORDS")
		records = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	args := []string{"-test.v", "-test.count=1", "-test.timeout", timeout.String()}
	if run != "" {
		args = append(args, "-test.run", run)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(),
		"KGO_SEEDS="+seeds,
		"KGO_TEST_RF=1",
		"KGO_TEST_RECORDS="+strconv.Itoa(records),
		"KGO_LOG_LEVEL=none",
	)
	cmd.Env = append(cmd.Env, env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	require.NoError(t, cmd.Start())
	res := kgoRun{Results: map[string]kgoResult{}, Elapsed: map[string]time.Duration{}}
	var out strings.Builder
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			out.WriteString(line)
			out.WriteByte('\n')
			if m := kgoResultLine.FindStringSubmatch(line); m != nil {
				res.Results[m[2]] = kgoResult(m[1])
				secs, _ := strconv.ParseFloat(m[3], 64)
				res.Elapsed[m[2]] = time.Duration(secs * float64(time.Second))
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	_ = pw.Close()
	<-scanned
	res.Output = out.String()
	if err != nil {
		t.Logf("kgo test binary: %v (a failing test makes it exit 1)", err)
	}
	return res
}

// kgoSuiteList reads a list of test names, one a line; text after '#' is a
// comment (the reason of an exclusion).
func kgoSuiteList(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		name, why, _ := strings.Cut(line, "#")
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
