package chaos

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pgmsg/pgmsg/internal/pgcluster"
)

func requireServerBinaries(t *testing.T) {
	t.Helper()
	if _, err := pgcluster.FindBinaries(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chaos: CI must have PostgreSQL's server binaries (.ci/run installs them): %v", err)
		}
		t.Skipf("chaos: %v", err)
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// TestChaosSmoke is the bounded chaos run of the normal test command: about
// a minute of faults of every kind against a small load, then the drain
// and the invariant check. PGMSG_CHAOS_SMOKE_DURATION changes its length.
func TestChaosSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped in -short mode")
	}
	requireServerBinaries(t)
	runChaos(t, Options{
		Duration:       envDuration(t, "PGMSG_CHAOS_SMOKE_DURATION", 45*time.Second),
		FaultMin:       1500 * time.Millisecond,
		FaultMax:       3 * time.Second,
		XminHold:       15 * time.Second,
		Producers:      1,
		CopyProducers:  1,
		AsyncProducers: 1,
		// Two partitions for the two consumer agents: each member then
		// owns one, whose claims (of g-run and g-run2, in one process)
		// are direct and go out gathered.
		Partitions:    2,
		Consumers:     2,
		TxConsumers:   1,
		DLQConsumers:  2,
		Enqueuers:     1,
		Workers:       2,
		HTTPProducers: 1,
		HTTPConsumers: 1,
		Rate:          100,
	})
}

// TestChaosLong is `make chaos`: PGMSG_CHAOS_DURATION of faults (skipped
// when unset) against a heavier load.
func TestChaosLong(t *testing.T) {
	d := envDuration(t, "PGMSG_CHAOS_DURATION", 0)
	if d == 0 {
		t.Skip("set PGMSG_CHAOS_DURATION (e.g. 5m) to run the long chaos test")
	}
	requireServerBinaries(t)
	runChaos(t, Options{
		Duration:       d,
		FaultsPerKind:  envInt(t, "PGMSG_CHAOS_FAULTS_PER_KIND", 0),
		FaultMin:       envDuration(t, "PGMSG_CHAOS_FAULT_MIN", 2*time.Second),
		FaultMax:       envDuration(t, "PGMSG_CHAOS_FAULT_MAX", 5*time.Second),
		XminHold:       20 * time.Second,
		Producers:      2,
		CopyProducers:  1,
		AsyncProducers: 1,
		Consumers:      3,
		TxConsumers:    2,
		DLQConsumers:   2,
		Enqueuers:      envInt(t, "PGMSG_CHAOS_ENQUEUERS", 1),
		Workers:        3,
		HTTPProducers:  1,
		HTTPConsumers:  2,
		Rate:           envInt(t, "PGMSG_CHAOS_RATE", 300),
		SegmentRecords: 4096,
		DrainTimeout:   3 * time.Minute,
		PgBouncer:      wantPgBouncer(t),
	})
}

// wantPgBouncer reports whether the long run puts PgBouncer in front of
// PostgreSQL (and injects FaultPgBouncerKill): when pgbouncer is
// installed; without it the run fails if PGMSG_REQUIRE_PGBOUNCER=1, and
// goes on without it otherwise.
func wantPgBouncer(t *testing.T) bool {
	if _, err := FindPgBouncer(); err != nil {
		if os.Getenv("PGMSG_REQUIRE_PGBOUNCER") == "1" {
			t.Fatalf("PGMSG_REQUIRE_PGBOUNCER=1: %v", err)
		}
		t.Logf("chaos: %v: the run goes without PgBouncer", err)
		return false
	}
	return true
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func runChaos(t *testing.T, o Options) { runChaosResult(t, o) }

// runChaosResult runs the harness, logs its result, fails the test on a
// violated invariant and returns the result.
func runChaosResult(t *testing.T, o Options) *Result {
	t.Helper()
	o.Logf = t.Logf
	o.Keep = os.Getenv("PGMSG_CHAOS_KEEP") != ""
	limit := o.Duration + 10*time.Minute
	if o.FaultsPerKind > 0 {
		// Past Duration the run goes on until every kind reached
		// FaultsPerKind: allow for a slow machine.
		limit += time.Duration(o.FaultsPerKind*(len(AllFaults)+2)) * (o.FaultMax + 5*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("chaos harness: %v", err)
	}
	summary := FormatResult(res)
	t.Log("\n" + summary)
	if path := os.Getenv("PGMSG_CHAOS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(summary), 0o644); err != nil {
			t.Errorf("write report: %v", err)
		}
	}
	if o.DLQConsumers > 0 && res.Report.DeadLettered == 0 {
		t.Errorf("the dead-letter group set no poison record aside: the check of MaxDeliveries proved nothing")
	}
	if !res.Report.OK() {
		t.Errorf("invariants violated (work directory %s):\n%s", res.Dir, strings.Join(res.Report.Violations, "\n"))
	}
	for _, u := range res.Unplanned {
		t.Errorf("unplanned: %s", u)
	}
	return res
}

// FormatResult renders a run as text: the fault table, then the checker's
// summary.
func FormatResult(res *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run took %s; pgmsg serve restarted %d times after exiting on its own (database down at start)\n",
		res.Elapsed.Round(time.Second), res.ServeRestarts)
	fmt.Fprintf(&b, "%-22s %8s %14s %14s %16s\n", "fault", "injected", "recovery p50", "recovery max", "failed pubs (stored)")
	kinds := make([]string, 0, len(res.Faults))
	total := 0
	for k, s := range res.Faults {
		kinds = append(kinds, k)
		total += s.Injected
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		s := res.Faults[k]
		fmt.Fprintf(&b, "%-22s %8d %14s %14s %10d (%d)\n", k, s.Injected, s.RecoveryMedian.Round(time.Millisecond),
			s.RecoveryMax.Round(time.Millisecond), s.InFlightFailed, s.InFlightStored)
	}
	fmt.Fprintf(&b, "%-22s %8d\n", "total", total)
	b.WriteString(res.Report.Summary())
	return b.String()
}
