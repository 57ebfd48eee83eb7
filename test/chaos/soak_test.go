package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSoak is `make soak` (PGMSG_SOAK_DURATION=10m) and `make soak-smoke`
// (1m): it measures the producers' maximum publish rate, runs at 70% of it
// with consumers, an enqueuer and workers, samples throughput, lag, agent
// RSS, server connections and table sizes, and fails on drift. Skipped
// unless PGMSG_SOAK_DURATION is set.
func TestSoak(t *testing.T) {
	d := envDuration(t, "PGMSG_SOAK_DURATION", 0)
	if d == 0 {
		t.Skip("set PGMSG_SOAK_DURATION (e.g. 1m or 10m) to run the soak test")
	}
	requireServerBinaries(t)
	sample := 10 * time.Second
	if d < 3*time.Minute {
		sample = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Minute)
	defer cancel()
	res, err := Soak(ctx, SoakOptions{
		Calibrate: envDuration(t, "PGMSG_SOAK_CALIBRATE", 20*time.Second),
		Duration:  d, Sample: sample, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	summary, problems := SoakSummary(res)
	t.Log("\n" + summary)
	if path := os.Getenv("PGMSG_SOAK_REPORT"); path != "" {
		_ = os.WriteFile(path, []byte(summary), 0o644)
	}
	if !res.Report.OK() {
		t.Errorf("invariants violated:\n%s", strings.Join(res.Report.Violations, "\n"))
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// rateCheckMin is the shortest soak whose publish rates are checked.
const rateCheckMin = 5 * time.Minute

// SoakSummary renders a soak run and lists its drift problems: throughput
// below target or falling, lag, memory, connections or hot-table sizes
// growing between the first and the last third of the run.
func SoakSummary(res *SoakResult) (string, []string) {
	var b strings.Builder
	var problems []string
	s := res.Samples
	fmt.Fprintf(&b, "calibrated max %.0f records/s end to end (published and consumed), %.0f jobs/s; targets (70%%) %.0f records/s, %.0f jobs/s\n",
		res.MaxRate, res.MaxJobRate, res.TargetRate, res.TargetJobRate)
	fmt.Fprintf(&b, "%6s %9s %8s %7s %8s %7s %9s %9s %6s %8s %8s %9s %9s\n", "t", "published", "rec/s", "lag", "jobs", "jobs/s",
		"rss KiB", "max KiB", "conns", "job KiB", "cur KiB", "arch KiB", "log KiB")
	for _, x := range s {
		fmt.Fprintf(&b, "%6s %9d %8.0f %7d %8d %7.0f %9d %9d %6d %8d %8d %9d %9d\n", x.At, x.Published, x.PubRate, x.Lag, x.JobsDone,
			x.JobRate, x.RSSKiB, x.MaxRSSKiB, x.Conns, x.JobBytes>>10, x.CursorBytes>>10, x.ArchBytes>>10, x.LogBytes>>10)
	}
	if len(s) < 4 {
		return b.String(), []string{"soak: fewer than 4 samples"}
	}
	third := max(len(s)/3, 1)
	first, last := s[1:1+third], s[len(s)-third:]
	mean := func(xs []SoakSample, f func(SoakSample) float64) float64 {
		t := 0.0
		for _, x := range xs {
			t += f(x)
		}
		return t / float64(len(xs))
	}
	peak := func(xs []SoakSample, f func(SoakSample) float64) float64 {
		m := 0.0
		for _, x := range xs {
			m = max(m, f(x))
		}
		return m
	}
	rate := func(x SoakSample) float64 { return x.PubRate }
	all := mean(s[1:], rate)
	fmt.Fprintf(&b, "publish rate: mean %.0f/s = %.0f%% of the target %.0f (first third %.0f, last third %.0f)\n",
		all, 100*all/res.TargetRate, res.TargetRate, mean(first, rate), mean(last, rate))
	// The machine is shared: the target comes from a 20s calibration and
	// other work may take the CPU afterwards, so only a gross miss fails;
	// drift (first third against last third) is the real check. Both are
	// rates, which the machine's other work moves: in a run shorter than
	// rateCheckMin (the 1-minute smoke, whose thirds are 20 s) a busy
	// neighbour for 20 s looks like drift (CI saw 5600/s fall to 4335/s
	// with every invariant holding), so the smoke reports the rates and
	// checks what does not depend on the machine's speed: the invariants,
	// memory, connections and table sizes.
	switch {
	case s[len(s)-1].At < rateCheckMin:
		fmt.Fprintf(&b, "publish rate not checked: a run shorter than %s measures the machine's neighbours, not drift\n", rateCheckMin)
	case all < 0.6*res.TargetRate:
		problems = append(problems, fmt.Sprintf("mean publish rate %.0f/s below 60%% of the target %.0f/s", all, res.TargetRate))
	case mean(last, rate) < 0.85*mean(first, rate):
		problems = append(problems, fmt.Sprintf("publish rate fell from %.0f/s to %.0f/s", mean(first, rate), mean(last, rate)))
	}
	type bound struct {
		name  string
		f     func(SoakSample) float64
		slack float64
	}
	for _, bd := range []bound{
		{"g-run lag (records)", func(x SoakSample) float64 { return float64(x.Lag) }, res.TargetRate * 5},
		{"agents' RSS (KiB)", func(x SoakSample) float64 { return float64(x.RSSKiB) }, 20 << 10},
		{"server connections", func(x SoakSample) float64 { return float64(x.Conns) }, 4},
		{"job table + indexes (bytes)", func(x SoakSample) float64 { return float64(x.JobBytes) }, 2 << 20},
		{"cursor + counter tables (bytes)", func(x SoakSample) float64 { return float64(x.CursorBytes) }, 1 << 20},
	} {
		p1, p3 := peak(first, bd.f), peak(last, bd.f)
		fmt.Fprintf(&b, "%-32s first third peak %.0f, last third peak %.0f\n", bd.name+":", p1, p3)
		if p3 > 1.5*p1+bd.slack {
			problems = append(problems, fmt.Sprintf("%s grew from %.0f to %.0f", bd.name, p1, p3))
		}
	}
	fmt.Fprintf(&b, "log and archive grow with the data (no retention configured): log %d KiB, archive %d KiB at the end\n",
		s[len(s)-1].LogBytes>>10, s[len(s)-1].ArchBytes>>10)
	b.WriteString(res.Report.Summary())
	return b.String(), problems
}
