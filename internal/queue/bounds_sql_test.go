package queue

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestBoundsMatchSQL checks that the SQL API (internal/migration/functions/queue.sql)
// spells every bound and default it shares with this package's constants
// with the same value: the Go checks run before the round trip, the SQL
// ones for every other client, and the two must refuse the same jobs.
func TestBoundsMatchSQL(t *testing.T) {
	src, err := os.ReadFile("../migration/functions/queue.sql")
	if err != nil {
		t.Fatal(err)
	}
	sql := string(src)
	cases := []struct {
		what    string
		pattern string // each submatch must equal want, in order
		want    []int64
	}{
		{"priority check", `u\.pr NOT BETWEEN (-?\d+) AND (-?\d+)`, []int64{PriorityMin, PriorityMax}},
		{"priority message", `priority must be between (-?\d+) and (-?\d+)`, []int64{PriorityMin, PriorityMax}},
		{"kind check", `octet_length\(u\.kd\) > (\d+)`, []int64{KindMaxBytes}},
		{"kind message", `kind must be at most (\d+) bytes`, []int64{KindMaxBytes}},
		{"unique key check", `bool_or\(octet_length\(u\.k\) > (\d+)\)`, []int64{UniqueKeyMaxBytes}},
		{"sequence key check", `u\.k = '' OR octet_length\(u\.k\) > (\d+)`, []int64{SequenceKeyMaxBytes}},
		{"sequence key message", `sequence_key must be 1 to (\d+) bytes`, []int64{SequenceKeyMaxBytes}},
		{"limit key message", `limit_key must be 1 to (\d+) bytes`, []int64{LimitKeyMaxBytes}},
		{"limit key from a field", `limit key \(field %s\) must be at most (\d+) bytes`, []int64{LimitKeyMaxBytes}},
		{"key field message", `key_field must be 1 to (\d+) bytes`, []int64{KeyFieldMaxBytes}},
		{"unique key message", `unique_key must be at most (\d+) bytes`, []int64{UniqueKeyMaxBytes}},
		{"dependencies check", `jsonb_array_length\(u\.d\) > (\d+) LIMIT`, []int64{DependsOnMax}},
		{"dependencies message", `has more than (\d+) dependencies`, []int64{DependsOnMax}},
		{"job name check", `u\.nm = '' OR octet_length\(u\.nm\) > (\d+)`, []int64{JobNameMaxBytes}},
		{"job name message", `a job''s name must be 1 to (\d+) bytes`, []int64{JobNameMaxBytes}},
		{"tags check", `jsonb_array_length\(p_tags\) > (\d+)`, []int64{TagsMax}},
		{"tags message", `at most (\d+) tags per job`, []int64{TagsMax}},
		{"rate limit check", `q\.rate_limit > (\d+)`, []int64{RateLimitMax}},
		{"rate limit message", `rate_limit must be more than 0 and at most (\d+) jobs per second`, []int64{RateLimitMax}},
		{"job_claim default", `FUNCTION \{\{schema\}\}\.job_claim\(p_queue text, p_limit integer DEFAULT (\d+)`, []int64{ClaimMaxDefault}},
		{"archive_prune default", `FUNCTION \{\{schema\}\}\.archive_prune\([^)]*p_limit integer DEFAULT (\d+)\)`, []int64{PruneBatchDefault}},
		{"dead_prune default", `FUNCTION \{\{schema\}\}\.dead_prune\([^)]*p_limit integer DEFAULT (\d+)\)`, []int64{PruneBatchDefault}},
	}
	for _, c := range cases {
		ms := regexp.MustCompile(c.pattern).FindAllStringSubmatch(sql, -1)
		if len(ms) == 0 {
			t.Errorf("%s: queue.sql has no match of %q", c.what, c.pattern)
			continue
		}
		for _, m := range ms {
			for i, want := range c.want {
				got, err := strconv.ParseInt(m[i+1], 10, 64)
				if err != nil || got != want {
					t.Errorf("%s: queue.sql says %q, Go says %d (in %q)", c.what, m[i+1], want, m[0])
				}
			}
		}
	}
}
