package kafkacompat

import (
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

// kgoReferencePath lists the kgo tests that pass against kfake, the
// reference cluster: TestKgoSuiteKfake writes it (PGMSG_KGO_SUITE=kfake
// PGMSG_KGO_WRITE_REFERENCE=1) and TestKgoSuitePgmsg requires each of them
// to pass against pgmsg, except those in kgoExclusionsPath.
const kgoReferencePath = "testdata/kgo_kfake_pass.txt"

// TestKgoSuiteKfake runs franz-go's kgo integration tests against an
// in-process kfake cluster (three brokers, as franz-go's own run_tests.sh
// starts it), the reference that the run against pgmsg is held to. It is
// opt-in (PGMSG_KGO_SUITE=kfake or all), as it adds minutes; with
// PGMSG_KGO_WRITE_REFERENCE=1 it rewrites the reference list, otherwise it
// checks that every test of the list still passes against kfake (after a
// franz-go upgrade, rewrite it and read the diff).
func TestKgoSuiteKfake(t *testing.T) {
	if s := os.Getenv("PGMSG_KGO_SUITE"); s != "kfake" && s != "all" {
		t.Skip("the reference run against kfake is opt-in: PGMSG_KGO_SUITE=kfake (make kafka-compat-reference)")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(-1, "foo"))
	require.NoError(t, err)
	defer c.Close()
	run := runKgoSuite(t, strings.Join(c.ListenAddrs(), ","), os.Getenv("PGMSG_KGO_RUN"))
	t.Logf("kgo suite against kfake:\n%s", kgoSummary(run))
	var pass []string
	for n, r := range run.Results {
		if r == kgoPass {
			pass = append(pass, n)
		}
	}
	sort.Strings(pass)
	if os.Getenv("PGMSG_KGO_WRITE_REFERENCE") == "1" {
		require.NotEmpty(t, pass, "no kgo test passed against kfake:\n%s", run.Output)
		body := "# kgo tests (franz-go's pkg/kgo, the version of go.mod) that pass against kfake,\n" +
			"# written by make kafka-compat-reference; TestKgoSuitePgmsg holds pgmsg to them.\n" +
			strings.Join(pass, "\n") + "\n"
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(kgoReferencePath, []byte(body), 0o644))
		return
	}
	for name := range kgoSuiteList(t, kgoReferencePath) {
		require.Equal(t, kgoPass, run.Results[name], "reference test %s against kfake", name)
	}
}
