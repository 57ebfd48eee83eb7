package kafkacompat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// requireKafkaClientsEnv makes a missing client a failure instead of a
// skip; .ci/run sets it after installing the clients.
const requireKafkaClientsEnv = "PGMSG_REQUIRE_KAFKA_CLIENTS"

// needTool returns the path of an external client, or skips the test
// when it is missing (fails under PGMSG_REQUIRE_KAFKA_CLIENTS=1).
func needTool(t *testing.T, name string, check ...string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil && len(check) > 0 {
		err = exec.Command(path, check...).Run()
	}
	if err != nil {
		msg := name + " is missing (" + err.Error() + "); .ci/run installs it: see its Kafka clients section"
		if os.Getenv(requireKafkaClientsEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// python3 returns Debian's python3 when it imports module (the Debian
// packages install there, not into a pyenv or venv on PATH).
func python3(t *testing.T, module string) string {
	t.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	return needTool(t, py, "-c", "import "+module)
}

// runTool runs a client to its end, feeding it stdin, within timeout; it
// fails the test with the client's stderr when the client fails.
func runTool(t *testing.T, timeout time.Duration, stdin string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	require.NoError(t, err, "%s %s\nstderr:\n%s\nstdout:\n%s", name, strings.Join(args, " "), tail(stderr.String(), 60), tail(stdout.String(), 30))
	return stdout.String()
}

// jsonLines decodes one JSON value of type T per non-empty line of out.
func jsonLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var vs []T
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || !strings.HasPrefix(line, "{") {
			continue
		}
		var v T
		require.NoError(t, json.Unmarshal([]byte(line), &v), "line %q", line)
		vs = append(vs, v)
	}
	require.NoError(t, sc.Err())
	return vs
}
