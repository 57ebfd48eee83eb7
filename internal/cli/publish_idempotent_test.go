package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// pgmsg publish --producer-id: resuming at the last batch stores it once;
// starting over from the beginning is refused and writes nothing.
func TestPublishIdempotentCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	s.ok("", "topic", "create", "imports", "--partitions", "1")
	type out struct {
		Published     int `json:"published"`
		AlreadyStored int `json:"already_stored"`
	}
	run := func(input string, args ...string) out {
		var o out
		args = append([]string{"publish", "imports", "--producer-id", "import-1", "--batch", "2", "-o", "json"}, args...)
		require.NoError(t, json.Unmarshal([]byte(s.ok(input, args...)), &o))
		return o
	}
	require.Equal(t, out{Published: 4}, run("a\nb\nc\nd\n"))
	// As if the batch c, d had failed: resumed from it (line 3, sequence
	// 2), it is stored once and the rest is published.
	require.Equal(t, out{Published: 5, AlreadyStored: 2}, run("c\nd\ne\nf\ng\n", "--sequence", "2"))
	// From the start again: refused, nothing written.
	s.fail("a\nb\n", "publish", "imports", "--producer-id", "import-1", "--batch", "2")
	var desc struct {
		PartitionInfo []struct {
			NextOffset int64 `json:"next_offset"`
		} `json:"partition_info"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "topic", "describe", "imports", "-o", "json")), &desc))
	var n int64
	for _, p := range desc.PartitionInfo {
		n += p.NextOffset
	}
	require.Equal(t, int64(7), n, "a to g, once each")
	s.fail("x\n", "publish", "imports", "--sequence", "3")
	s.fail("x\n", "publish", "imports", "--producer-id", "import-1", "--sequence", "0")
}
