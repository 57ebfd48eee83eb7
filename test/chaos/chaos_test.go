package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgautofailover"
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
	res := runChaosResult(t, Options{
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
		KindWorkers:   2,
		HTTPProducers: 1,
		HTTPConsumers: 1,
		Rate:          100,
		DiskFull:      wantDiskFull(t),
	})
	requireDiskFullBit(t, res)
}

// TestChaosDiskFull is the bounded disk-full run of the normal test
// command: the smoke load, only the disk-full kind, twice. The publishes
// and enqueues the full volume refused are retried and stored once it has
// room again; nothing acknowledged is lost, the groups and the workers
// drain, and at least one publish must have been refused with PM021.
func TestChaosDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped in -short mode")
	}
	requireServerBinaries(t)
	if !wantDiskFull(t) {
		t.Skip("chaos: the disk-full kind needs root (it mounts a tmpfs)")
	}
	res := runChaosResult(t, Options{
		Duration:       5 * time.Second,
		FaultsPerKind:  2,
		Faults:         []string{FaultDiskFull},
		FaultMin:       time.Second,
		FaultMax:       2 * time.Second,
		DiskFull:       true,
		Producers:      1,
		CopyProducers:  1,
		AsyncProducers: 1,
		Partitions:     2,
		Consumers:      2,
		TxConsumers:    1,
		Enqueuers:      1,
		Workers:        2,
		Rate:           100,
	})
	if s := res.Faults[FaultDiskFull]; s == nil || s.Injected < 2 {
		t.Errorf("the disk-full kind was injected fewer than 2 times")
	}
	requireDiskFullBit(t, res)
	require.Positive(t, res.Report.Published)
	require.Positive(t, res.Report.JobsCompleted)
}

// wantDiskFull reports whether a run can inject FaultDiskFull: it mounts
// a tmpfs, so only as root. With PGMSG_REQUIRE_DISKFULL=1 (.ci/run) a run
// that cannot fails; otherwise it goes on without the kind and says so.
func wantDiskFull(t *testing.T) bool {
	if os.Geteuid() != 0 {
		if os.Getenv("PGMSG_REQUIRE_DISKFULL") == "1" {
			t.Fatalf("PGMSG_REQUIRE_DISKFULL=1: the disk-full kind mounts a tmpfs and needs root")
		}
		t.Logf("chaos: not root: the run goes without the disk-full kind (it mounts a tmpfs)")
		return false
	}
	return true
}

// requireDiskFullBit fails the test when disk-full faults were injected
// but no publish was refused with PM021: the volume was not the one the
// publishes wrote to, and the kind proved nothing.
func requireDiskFullBit(t *testing.T, res *Result) {
	t.Helper()
	if s := res.Faults[FaultDiskFull]; s != nil && s.Injected > 0 && res.Report.DiskFullPub == 0 {
		t.Errorf("%d disk-full faults, but no publish was refused with PM021", s.Injected)
	}
}

// requireFailover skips the test when pg_auto_failover is not installed,
// and fails it instead when PGMSG_REQUIRE_FAILOVER=1 (CI).
func requireFailover(t *testing.T) {
	t.Helper()
	requireServerBinaries(t)
	if _, _, err := pgautofailover.Find(); err != nil {
		if os.Getenv("PGMSG_REQUIRE_FAILOVER") == "1" {
			t.Fatalf("PGMSG_REQUIRE_FAILOVER=1: %v", err)
		}
		t.Skipf("chaos: %v", err)
	}
}

// failoverOptions is the load of the failover runs: every kind of agent
// but the HTTP ones, and two maintenance agents, on a pg_auto_failover
// formation with synchronous replication.
func failoverOptions() Options {
	return Options{
		Failover:          true,
		FaultMin:          time.Second,
		FaultMax:          2 * time.Second,
		Producers:         1,
		CopyProducers:     1,
		AsyncProducers:    1,
		Partitions:        2,
		Consumers:         2,
		TxConsumers:       1,
		DLQConsumers:      1,
		Enqueuers:         1,
		Workers:           2,
		MaintenanceAgents: 2,
		Rate:              100,
		DrainTimeout:      2 * time.Minute,
	}
}

// TestChaosFailover is the bounded failover chaos run: one kill of the primary and one switchover while every agent
// runs, then the drain and the checker. Nothing acknowledged may be lost
// or stored twice, the offsets stay gapless, the groups and workers go on
// on the new primary, and a maintenance agent leads there after each.
//
// It runs when PGMSG_CHAOS_FAILOVER is set (`make -f chaos.mk
// chaos-smoke` sets it): on a loaded machine the monitor's health checks,
// tightened for the tests, fail over a healthy primary by themselves and
// a run can wait minutes for a settled formation, which the default test
// run cannot afford. `go test ./...` fails over a formation in
// TestFailoverSynchronous (client_test.go).
func TestChaosFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped in -short mode")
	}
	if os.Getenv("PGMSG_CHAOS_FAILOVER") == "" {
		t.Skip("set PGMSG_CHAOS_FAILOVER=1 (make -f chaos.mk chaos-smoke) to run the bounded failover chaos test")
	}
	requireFailover(t)
	o := failoverOptions()
	o.Duration, o.FaultsPerKind = time.Second, 1
	// A lighter load than the long run's: on a loaded 2-core machine the
	// monitor's and keepers' steps are what takes the time, and they wait
	// for the CPU like everything else.
	o.CopyProducers, o.DLQConsumers, o.Workers, o.Rate = 0, 0, 1, 50
	requireFailoverRun(t, runChaosResult(t, o), o)
}

// TestChaosFailoverLong is `make chaos-failover`: at least
// PGMSG_CHAOS_FAILOVER_FAULTS_PER_KIND of each failover kind (skipped
// when unset).
func TestChaosFailoverLong(t *testing.T) {
	n := envInt(t, "PGMSG_CHAOS_FAILOVER_FAULTS_PER_KIND", 0)
	if n == 0 {
		t.Skip("set PGMSG_CHAOS_FAILOVER_FAULTS_PER_KIND (e.g. 20) to run the long failover test")
	}
	requireFailover(t)
	o := failoverOptions()
	o.Duration, o.FaultsPerKind = time.Second, n
	o.Rate = envInt(t, "PGMSG_CHAOS_RATE", 200)
	o.Producers, o.Consumers, o.Workers = 2, 3, 3
	requireFailoverRun(t, runChaosResult(t, o), o)
}

func requireFailoverRun(t *testing.T, res *Result, o Options) {
	t.Helper()
	for _, k := range FailoverFaults {
		if s := res.Faults[k]; s == nil || s.Injected < o.FaultsPerKind {
			t.Errorf("fault %s injected fewer than %d times", k, o.FaultsPerKind)
		}
	}
	require.Positive(t, res.Report.Published)
	require.Positive(t, res.Report.JobsCompleted)
	require.Positive(t, res.Report.MaintRuns, "the maintenance leader never ran")
}

// TestChaosLong is `make chaos`: PGMSG_CHAOS_DURATION of faults (skipped
// when unset) against a heavier load; PGMSG_CHAOS_FAULTS (a comma list)
// injects only those kinds.
func TestChaosLong(t *testing.T) {
	d := envDuration(t, "PGMSG_CHAOS_DURATION", 0)
	if d == 0 {
		t.Skip("set PGMSG_CHAOS_DURATION (e.g. 5m) to run the long chaos test")
	}
	requireServerBinaries(t)
	var faults []string
	if v := os.Getenv("PGMSG_CHAOS_FAULTS"); v != "" {
		faults = strings.Split(v, ",")
	}
	res := runChaosResult(t, Options{
		Faults:         faults,
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
		KindWorkers:    2,
		HTTPProducers:  1,
		HTTPConsumers:  2,
		Rate:           envInt(t, "PGMSG_CHAOS_RATE", 300),
		SegmentRecords: 4096,
		DrainTimeout:   3 * time.Minute,
		PgBouncer:      wantPgBouncer(t),
		DiskFull:       wantDiskFull(t),
	})
	requireDiskFullBit(t, res)
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

// runChaosResult runs the harness, logs its result, fails the test on a
// violated invariant and returns the result.
func runChaosResult(t *testing.T, o Options) *Result {
	t.Helper()
	o.Logf = t.Logf
	o.Keep = os.Getenv("PGMSG_CHAOS_KEEP") != ""
	limit := o.Duration + 10*time.Minute
	if o.Failover {
		// Starting the formation takes up to three minutes here.
		limit += 5 * time.Minute
	}
	if o.FaultsPerKind > 0 {
		// Past Duration the run goes on until every kind reached
		// FaultsPerKind: allow for a slow machine.
		per := o.FaultMax + 5*time.Second
		kinds := len(AllFaults) + 2
		if o.Failover {
			per, kinds = o.FaultMax+failoverSettle, len(FailoverFaults)
		}
		limit += time.Duration(o.FaultsPerKind*kinds) * per
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
	if k := res.Report.Kinds; o.KindWorkers > 0 && (k.DepsChecked == 0 || k.SeqPairs == 0 || k.Limited == 0 || k.Starts == 0) {
		t.Errorf("the workflow, sequence and key-limit checks had nothing to check: %+v", k)
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
	if res.Skipped > 0 {
		fmt.Fprintf(&b, "%d failover faults skipped, not injected: the formation did not settle (primary and healthy synchronous standby for %s) within %s (rows *%s above)\n",
			res.Skipped, settleHold, failoverSettle, SkippedUnsettled)
	}
	b.WriteString(res.Report.Summary())
	return b.String()
}

// TestChaosKindsBacklog runs an enqueuer with a kinds backlog bound of 20
// and no kworker: once the kinds queue holds more than 20 waiting jobs
// it skips its kinds batches (and records so), while its plain enqueues
// go on; the backlog stays within the bound plus the batches of the
// second between two counts.
func TestChaosKindsBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped in -short mode")
	}
	requireServerBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const bound, rate, batch = 20, 40, 10
	h := &Harness{o: Options{KindsBacklog: bound, Rate: rate * 4, Logf: t.Logf}}
	h.o.defaults()
	var err error
	if h.dir, err = os.MkdirTemp("", "pgmsg-chaos-backlog-"); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(h.dir)
	if err := os.Chmod(h.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h.hist = filepath.Join(h.dir, "history")
	for _, d := range []string{h.hist, filepath.Join(h.dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer h.shutdown()
	if err := h.build(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.startServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.setup(ctx); err != nil {
		t.Fatal(err)
	}
	s := &slot{role: "enqueuer", args: []string{"-rate", strconv.Itoa(rate), "-batch", strconv.Itoa(batch),
		"-kinds", kindsQueue, "-kinds-backlog", strconv.Itoa(bound)}}
	h.slots = append(h.slots, s)
	h.start(s)
	// Until the enqueuer reports skipped batches.
	skipped := func() int {
		n := 0
		files, _ := filepath.Glob(filepath.Join(h.hist, "*.jsonl"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			for _, line := range strings.Split(string(b), "\n") {
				var ev Event
				if json.Unmarshal([]byte(line), &ev) == nil && ev.K == "kskip" {
					n += ev.N
				}
			}
		}
		return n
	}
	for skipped() < 3 {
		select {
		case <-ctx.Done():
			t.Fatalf("the enqueuer skipped no kinds batch above a backlog of %d", bound)
		case <-time.After(200 * time.Millisecond):
		}
	}
	h.stopAll(nil)
	var waiting, plain int
	if err := h.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE q.name = $1 AND j.state IN ('available', 'scheduled', 'retrying', 'pending')),
		count(*) FILTER (WHERE q.name = $2) FROM pgmsg.job j JOIN pgmsg.queue q USING (queue_id)`, kindsQueue, queueName).Scan(&waiting, &plain); err != nil {
		t.Fatal(err)
	}
	// Counted once a second: at most a second of batches (rate/batch
	// ticks of 11 jobs) past the bound, and the batch in flight.
	if limit := bound + (rate/batch+1)*11; waiting > limit {
		t.Fatalf("%d kinds jobs waiting, bound %d (at most %d with a second of batches)", waiting, bound, limit)
	}
	if plain == 0 {
		t.Fatal("no plain job enqueued")
	}
	t.Logf("%d kinds jobs waiting (bound %d), %d batches skipped, %d plain jobs", waiting, bound, skipped(), plain)
}
