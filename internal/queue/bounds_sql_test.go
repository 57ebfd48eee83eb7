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
		want    []float64
	}{
		{"priority check", `u\.pr NOT BETWEEN (-?\d+) AND (-?\d+)`, []float64{PriorityMin, PriorityMax}},
		{"priority message", `priority must be between (-?\d+) and (-?\d+)`, []float64{PriorityMin, PriorityMax}},
		{"kind check", `octet_length\(u\.kd\) > (\d+)`, []float64{KindMaxBytes}},
		{"kind message", `kind must be at most (\d+) bytes`, []float64{KindMaxBytes}},
		{"unique key check", `bool_or\(octet_length\(u\.k\) > (\d+)\)`, []float64{UniqueKeyMaxBytes}},
		{"sequence key check", `u\.k = '' OR octet_length\(u\.k\) > (\d+)`, []float64{SequenceKeyMaxBytes}},
		{"sequence key message", `sequence_key must be 1 to (\d+) bytes`, []float64{SequenceKeyMaxBytes}},
		{"limit key message", `limit_key must be 1 to (\d+) bytes`, []float64{LimitKeyMaxBytes}},
		{"limit key from a field", `limit key \(field %s\) must be at most (\d+) bytes`, []float64{LimitKeyMaxBytes}},
		{"key field message", `key_field must be 1 to (\d+) bytes`, []float64{KeyFieldMaxBytes}},
		{"unique key message", `unique_key must be at most (\d+) bytes`, []float64{UniqueKeyMaxBytes}},
		{"dependencies check", `jsonb_array_length\(u\.d\) > (\d+) LIMIT`, []float64{DependsOnMax}},
		{"dependencies message", `has more than (\d+) dependencies`, []float64{DependsOnMax}},
		{"job name check", `u\.nm = '' OR octet_length\(u\.nm\) > (\d+)`, []float64{JobNameMaxBytes}},
		{"job name message", `a job''s name must be 1 to (\d+) bytes`, []float64{JobNameMaxBytes}},
		{"tags check", `jsonb_array_length\(p_tags\) > (\d+)`, []float64{TagsMax}},
		{"tags message", `at most (\d+) tags per job`, []float64{TagsMax}},
		{"rate limit check", `q\.rate_limit > (\d+)`, []float64{RateLimitMax}},
		{"rate limit message", `rate_limit must be more than 0 and at most (\d+) jobs per second`, []float64{RateLimitMax}},
		{"tenant check", `p_tenant !~ '\^\[A-Za-z0-9\._:/=@\+-\]\{1,(\d+)\}\$'`, []float64{TenantMaxBytes}},
		{"tenant message", `a tenant is 1 to (\d+) of`, []float64{TenantMaxBytes}},
		{"tenant weight check", `p_weight < ([0-9.]+) OR p_weight > ([0-9.]+)`, []float64{TenantWeightMin, TenantWeightMax}},
		{"tenant weight message", `weight must be from ([0-9.]+) to ([0-9.]+)`, []float64{TenantWeightMin, TenantWeightMax}},
		{"log clip check", `octet_length\(s\) <= (\d+)`, []float64{LogBytesMax}},
		{"log clip loop", `WHILE octet_length\(s\) > (\d+) LOOP`, []float64{LogBytesMax}},
		{"log clip message", `log truncated at (\d+) bytes`, []float64{LogBytesMax}},
		{"step name check", `p_name !~ '\^\[A-Za-z0-9\._:/-\]\{1,(\d+)\}\$'`, []float64{StepNameMaxBytes}},
		{"step name message", `invalid step name %s: 1 to (\d+) of`, []float64{StepNameMaxBytes}},
		{"step output check", `octet_length\(p_output::text\) > (\d+)`, []float64{StepOutputMaxBytes}},
		{"step output message", `output of step %s is %s bytes as JSON, more than (\d+)`, []float64{StepOutputMaxBytes}},
		{"steps check", `LIMIT (\d+)\) x\) >= (\d+)`, []float64{StepsMax, StepsMax}},
		{"steps message", `has (\d+) steps already`, []float64{StepsMax}},
		{"job_claim default", `FUNCTION \{\{schema\}\}\.job_claim\(p_queue text, p_limit integer DEFAULT (\d+)`, []float64{ClaimMaxDefault}},
		{"archive_prune default", `FUNCTION \{\{schema\}\}\.archive_prune\([^)]*p_limit integer DEFAULT (\d+)\)`, []float64{PruneBatchDefault}},
		{"dead_prune default", `FUNCTION \{\{schema\}\}\.dead_prune\([^)]*p_limit integer DEFAULT (\d+)\)`, []float64{PruneBatchDefault}},
	}
	for _, c := range cases {
		ms := regexp.MustCompile(c.pattern).FindAllStringSubmatch(sql, -1)
		if len(ms) == 0 {
			t.Errorf("%s: queue.sql has no match of %q", c.what, c.pattern)
			continue
		}
		for _, m := range ms {
			for i, want := range c.want {
				got, err := strconv.ParseFloat(m[i+1], 64)
				if err != nil || got != want {
					t.Errorf("%s: queue.sql says %q, Go says %v (in %q)", c.what, m[i+1], want, m[0])
				}
			}
		}
	}
}
