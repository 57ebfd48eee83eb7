package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// ratioKeys are the figures compared between pgmsg and each baseline:
// ratio = pgmsg / baseline (above 1 is better for rates, below 1 for
// latencies).
var ratioKeys = []string{"writes_per_sec", "reads_per_sec", "jobs_per_sec", "publish_p50_ms", "publish_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
	"process_cpu_per_record_us", "pg_cpu_per_record_us", "process_cpu_per_job_us", "pg_cpu_per_job_us"}

// Summarize builds the JSON summary from runs[i], the rounds of the i-th
// implementation: the first implementation's figures at the top level, the
// machine and server, and each further implementation under "baseline"
// with the ratios under "vs_<impl>". With several rounds each figure is
// the median of the rounds, the ratios are the medians of the per-round
// ratios, and "rounds" keeps every run.
func Summarize(info *ServerInfo, runs [][]any) map[string]any {
	maps := make([]map[string]any, len(runs))
	all := make([][]map[string]any, len(runs))
	for i, rs := range runs {
		for _, r := range rs {
			var m map[string]any
			b, _ := json.Marshal(r)
			_ = json.Unmarshal(b, &m)
			all[i] = append(all[i], m)
		}
		maps[i] = medianOf(all[i])
	}
	out := map[string]any{}
	if len(maps) == 0 {
		return out
	}
	for k, v := range maps[0] {
		out[k] = v
	}
	out["server"] = info
	if len(all[0]) > 1 {
		out["rounds"] = all
	}
	if len(maps) > 1 {
		out["baseline"] = maps[1:]
		for i, b := range maps[1:] {
			vs := map[string]float64{}
			for _, k := range ratioKeys {
				var rs []float64
				for r := range all[0] {
					a, ok1 := all[0][r][k].(float64)
					c, ok2 := all[i+1][r][k].(float64)
					if ok1 && ok2 && c != 0 {
						rs = append(rs, a/c)
					}
				}
				if len(rs) > 0 {
					vs[k] = round(median(rs), 2)
				}
			}
			out[fmt.Sprintf("vs_%v", b["impl"])] = vs
		}
	}
	return out
}

// medianOf returns the first map with every number replaced by its median
// over all maps.
func medianOf(ms []map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range ms[0] {
		if _, ok := v.(float64); !ok {
			out[k] = v
			continue
		}
		var xs []float64
		for _, m := range ms {
			if x, ok := m[k].(float64); ok {
				xs = append(xs, x)
			}
		}
		out[k] = round(median(xs), 2)
	}
	return out
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// PrintSummary writes the summary as a table: one column per
// implementation, then the ratios.
func PrintSummary(w io.Writer, s map[string]any) {
	cols := []map[string]any{s}
	if bs, ok := s["baseline"].([]map[string]any); ok {
		cols = append(cols, bs...)
	}
	keys := []string{"writes_per_sec", "reads_per_sec", "jobs_per_sec", "publish_p50_ms", "publish_p99_ms",
		"e2e_p50_ms", "e2e_p99_ms", "process_cpu_per_record_us", "pg_cpu_per_record_us", "listener_cpu_per_record_us", "settle_s", "final_lag", "writes", "reads", "replica_records", "primary_records", "gathered_claims", "cached_records", "jobs_done", "process_cpu_per_job_us", "pg_cpu_per_job_us", "errors", "duration_s"}
	fmt.Fprintf(w, "%-16s", "")
	for _, c := range cols {
		fmt.Fprintf(w, "%14v", c["impl"])
	}
	fmt.Fprintln(w)
	for _, k := range keys {
		if _, ok := s[k]; !ok {
			continue
		}
		fmt.Fprintf(w, "%-16s", k)
		for _, c := range cols {
			fmt.Fprintf(w, "%14v", fmtNum(c[k]))
		}
		fmt.Fprintln(w)
	}
	var vs []string
	for k := range s {
		if strings.HasPrefix(k, "vs_") {
			vs = append(vs, k)
		}
	}
	sort.Strings(vs)
	for _, k := range vs {
		m := s[k].(map[string]float64)
		var parts []string
		for _, rk := range ratioKeys {
			if v, ok := m[rk]; ok {
				parts = append(parts, fmt.Sprintf("%s %.2fx", rk, v))
			}
		}
		// The ratios are of the measured implementation (the first column).
		fmt.Fprintf(w, "%v %s: %s\n", cols[0]["impl"], strings.ReplaceAll(k, "_", " "), strings.Join(parts, ", "))
	}
	for _, c := range cols {
		if e, ok := c["checked"]; ok && e != "" {
			fmt.Fprintf(w, "%v: checked: %v\n", c["impl"], e)
		}
		if e, ok := c["first_error"]; ok && e != "" {
			fmt.Fprintf(w, "%v: first error: %v\n", c["impl"], e)
		}
	}
}

func fmtNum(v any) string {
	switch x := v.(type) {
	case float64:
		if x == float64(int64(x)) {
			return fmt.Sprintf("%d", int64(x))
		}
		return fmt.Sprintf("%.2f", x)
	case nil:
		return "-"
	}
	return fmt.Sprint(v)
}

// Check fails when a run of the summary had errors or measured no
// throughput: what a smoke run must catch.
func Check(s map[string]any) error {
	cols := []map[string]any{s}
	if bs, ok := s["baseline"].([]map[string]any); ok {
		cols = append(cols, bs...)
	}
	for _, c := range cols {
		if n, _ := c["errors"].(float64); n > 0 {
			return fmt.Errorf("bench: %v had %v errors, the first: %v", c["impl"], n, c["first_error"])
		}
		done := 0.0
		for _, k := range []string{"writes_per_sec", "reads_per_sec", "jobs_per_sec"} {
			v, _ := c[k].(float64)
			done += v
		}
		if done == 0 {
			return fmt.Errorf("bench: %v measured no throughput", c["impl"])
		}
	}
	return nil
}
