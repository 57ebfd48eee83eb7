package kafkacompat

import (
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// kgoExclusionsPath lists the kgo tests of the kfake reference that are
// not required to pass against pgmsg, each with its reason.
const kgoExclusionsPath = "testdata/kgo_pgmsg_exclusions.txt"

// TestKgoSuitePgmsg runs franz-go's kgo integration tests against pgmsg's
// Kafka listener (in this process, over a schema of the test's own): every
// test and subtest that passes against kfake (testdata/kgo_kfake_pass.txt)
// must pass, except the exclusions (testdata/kgo_pgmsg_exclusions.txt,
// each with its reason). It takes minutes, so go test ./... skips it
// unless PGMSG_KGO_SUITE is pgmsg or all: make kafka-compat (run by make ci)
// runs it. PGMSG_KGO_RUN narrows it to a -test.run pattern.
func TestKgoSuitePgmsg(t *testing.T) {
	if s := os.Getenv("PGMSG_KGO_SUITE"); s != "pgmsg" && s != "all" {
		t.Skip("the kgo suite against pgmsg runs in make kafka-compat (PGMSG_KGO_SUITE=pgmsg)")
	}
	s := startPgmsgServer(t, kafkasrv.Config{}, envDuration(t, "PGMSG_KGO_TIMEOUT", kgoTimeoutDefault)+5*time.Minute)
	run := runKgoSuite(t, s.addr, os.Getenv("PGMSG_KGO_RUN"))
	t.Logf("kgo suite against pgmsg:\n%s", kgoSummary(run))
	ref := kgoSuiteList(t, kgoReferencePath)
	excl := kgoSuiteList(t, kgoExclusionsPath)
	for name, why := range excl {
		_, inRef := ref[name]
		require.True(t, inRef, "exclusion %s is not a test of the kfake reference", name)
		require.NotEmpty(t, strings.TrimLeft(why, ": "), "exclusion %s has no reason", name)
	}
	var failed, passedExcluded []string
	required := 0
	for name := range ref {
		if os.Getenv("PGMSG_KGO_RUN") != "" {
			if _, ran := run.Results[strings.SplitN(name, "/", 2)[0]]; !ran {
				continue
			}
		}
		if _, ok := excl[name]; ok || excluded(excl, name) {
			if run.Results[name] == kgoPass {
				passedExcluded = append(passedExcluded, name)
			}
			continue
		}
		required++
		if r := run.Results[name]; r != kgoPass {
			if r == "" {
				r = kgoNotRun
			}
			failed = append(failed, name+" ("+string(r)+")")
		}
	}
	sort.Strings(failed)
	sort.Strings(passedExcluded)
	t.Logf("%d required tests and subtests of the kfake reference, %d failed; excluded tests that pass anyway: %v",
		required, len(failed), passedExcluded)
	for _, name := range sortedKeys(run.Output) {
		t.Logf("output of %s (%s):\n%s", name, run.Results[name], tail(interesting(run.Output[name]), 80))
	}
	require.Empty(t, failed, "kgo tests that pass against kfake and failed against pgmsg")
}

// excluded reports whether an exclusion names a parent of the subtest name.
func excluded(excl map[string]string, name string) bool {
	for i := strings.LastIndexByte(name, '/'); i > 0; i = strings.LastIndexByte(name[:i], '/') {
		if _, ok := excl[name[:i]]; ok {
			return true
		}
	}
	return false
}

// interesting drops the lines of passing tests and of test starts from
// the suite's output.
func interesting(out string) string {
	var keep []string
	for _, line := range strings.Split(out, "\n") {
		l := strings.TrimSpace(line)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- PASS") {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
