// Package chaos is pgmsg's fault-injection harness. It starts its own
// PostgreSQL (internal/pgcluster), puts a TCP proxy in front of it, runs
// producers, group consumers, an enqueuer and queue workers as separate OS
// processes (test/chaos/cmd/chaosagent), and while they run it injects
// faults at random times: kill -9 of agents, SIGSTOP past the lease then
// SIGCONT, PostgreSQL crashes (SIGKILL of the whole server, immediate
// shutdown) and fast restarts, connections cut or stalled by the proxy, row
// locks held past the agents' lock and statement timeouts, a transaction
// pinning the xmin horizon, and a full volume under the tables that
// receive publishes and enqueues (Options.DiskFull). With
// Options.Failover the database is a pg_auto_failover formation instead,
// and the faults are primary kills and switchovers (failover.go). Then it
// lets the consumers and
// workers drain, stops everything and checks the invariants (checker.go)
// over the agents' histories and the final database state.
//
// TestChaosSmoke runs a bounded version in the normal test command;
// PGMSG_CHAOS_DURATION=5m go test -run TestChaosLong ./test/chaos (make
// chaos) runs the long one.
package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgautofailover"
	"github.com/pgmsg/pgmsg/internal/pgcluster"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// Fault kinds.
const (
	FaultKillProducer = "kill9_producer"
	FaultKillConsumer = "kill9_consumer"
	FaultKillWorker   = "kill9_worker"
	FaultPauseMember  = "sigstop_consumer"
	FaultPauseWorker  = "sigstop_worker"
	FaultPGKill       = "pg_crash_sigkill"
	FaultPGImmediate  = "pg_restart_immediate"
	FaultPGFast       = "pg_restart_fast"
	FaultProxyCut     = "net_cut"
	FaultProxyStall   = "net_stall"
	FaultLockHold     = "lock_hold_timeouts"
	FaultXminHold     = "xmin_horizon_hold"
	FaultKillServe    = "kill9_pgmsg_serve"
	// The slow and broken network (the proxy): a latency of up to 200 ms
	// each way for twice the lease, a few connections that swallow every
	// byte (a link that drops every packet), and connections cut right
	// after the server answered a COMMIT, or any statement, before the
	// client got the answer.
	FaultNetLatency   = "net_latency"
	FaultNetBlackhole = "net_blackhole"
	FaultNetCutCommit = "net_cut_commit"
	FaultNetCutReply  = "net_cut_reply"
	// FaultPGTerminate terminates every agent's backend
	// (pg_terminate_backend), PgBouncer's server connections included.
	FaultPGTerminate = "pg_terminate_backends"
	// FaultPgBouncerKill kills PgBouncer (SIGKILL) and starts it again
	// (Options.PgBouncer).
	FaultPgBouncerKill = "pgbouncer_kill_restart"
	// FaultDiskFull fills the volume that holds the tables receiving
	// publishes and enqueues for a few seconds, then frees it
	// (Options.DiskFull).
	FaultDiskFull = "disk_full"
	// The failover kinds (Options.Failover): the primary of a
	// pg_auto_failover formation killed (SIGKILL of its keeper and its
	// postmaster, as if the machine died), the standby promoted, and the
	// old primary started again to rejoin as the standby; and a clean
	// switchover (pg_autoctl perform switchover).
	FaultFailoverKill = "failover_kill_primary"
	FaultSwitchover   = "failover_switchover"
)

// FailoverFaults are the kinds injected by default in a failover run.
// The kinds that need the single server (its restarts), the proxy in
// front of it (the network kinds), PgBouncer or the tablespace volume do
// not apply there.
var FailoverFaults = []string{FaultFailoverKill, FaultSwitchover}

// singleServerFaults are the kinds a failover run cannot inject.
var singleServerFaults = map[string]bool{
	FaultPGKill: true, FaultPGImmediate: true, FaultPGFast: true, FaultProxyCut: true, FaultProxyStall: true,
	FaultNetLatency: true, FaultNetBlackhole: true, FaultNetCutCommit: true, FaultNetCutReply: true,
	FaultPgBouncerKill: true, FaultDiskFull: true, FaultKillServe: true,
}

// NetworkFaults are the kinds the proxy injects.
var NetworkFaults = []string{FaultProxyCut, FaultProxyStall, FaultNetLatency, FaultNetBlackhole, FaultNetCutCommit, FaultNetCutReply}

// AllFaults are the kinds injected by default, in rotation.
var AllFaults = []string{
	FaultKillProducer, FaultKillConsumer, FaultKillWorker, FaultPauseMember, FaultPauseWorker,
	FaultPGKill, FaultPGImmediate, FaultPGFast, FaultProxyCut, FaultProxyStall, FaultLockHold, FaultKillServe,
	FaultNetLatency, FaultNetBlackhole, FaultNetCutCommit, FaultNetCutReply, FaultPGTerminate,
}

// Options size a run.
type Options struct {
	Duration time.Duration // faults are injected for this long
	FaultMin time.Duration // pause between faults, drawn from [FaultMin, FaultMax]
	FaultMax time.Duration
	Faults   []string // default AllFaults
	// FaultsPerKind, when set, keeps injecting past Duration until every
	// kind (and the xmin hold, when on) was injected at least this often.
	FaultsPerKind int
	// XminHold is the length of one xmin-horizon hold. Holds run
	// concurrently with the other faults, one after another with a short
	// gap, for as long as faults are injected (0: none).
	XminHold time.Duration
	// DrainTimeout is how long the drain may go without progress (no
	// record read, no job finished) before it gives up: a loaded machine
	// drains slower, and a drain that still moves is not a lost record.
	// The drain stops anyway after 10 of these.
	DrainTimeout time.Duration
	Producers    int // sync Publish producers
	// CopyProducers publish batches of 20 records with Client.Publish,
	// not idempotently, one attempt each, at a quarter of Rate: the COPY
	// path.
	CopyProducers  int
	AsyncProducers int // Producer (batching) producers
	Consumers      int // Claim/Commit members of groups g-run and g-run2 (both in each process)
	TxConsumers    int // ProcessTx members of group g-tx
	// DLQConsumers run Consumer.Run with MaxDeliveries in group g-dlq,
	// failing on every poison record (PoisonRecord).
	DLQConsumers int
	Enqueuers    int
	Workers      int
	// KindWorkers work the kinds queue (chaos-kinds); when set, every
	// enqueuer also enqueues a workflow, sequence jobs and per-key limit
	// jobs there each tick, and the checker checks their invariants
	// (checkKinds).
	KindWorkers int
	// KindsBacklog bounds the kinds queue's waiting jobs: above it the
	// enqueuers skip their kinds batches (default kindsBacklog).
	KindsBacklog int
	// HTTPProducers and HTTPConsumers (group g-http) go through one
	// `pgmsg serve` process, started when either is non-zero.
	HTTPProducers  int
	HTTPConsumers  int
	Rate           int // records (and jobs) per second per producer / enqueuer
	Partitions     int
	SegmentRecords int64
	Lease          time.Duration // claim and job lease
	// PgBouncer puts a PgBouncer (transaction pooling) in front of
	// PostgreSQL and runs an idempotent producer, a consumer (groups g-run
	// and g-run2) and a worker through it, besides the others; the
	// default faults then include FaultPgBouncerKill.
	PgBouncer bool
	// DiskFull puts the topic's segments (and the segments made later) and
	// the queue's job and job_payload tables in a tablespace on a tmpfs
	// the harness mounts (needs root); the default faults then include
	// FaultDiskFull.
	DiskFull bool
	// Failover runs the database as a pg_auto_failover formation (a
	// monitor, a primary and a synchronous standby) instead of one server:
	// the agents connect with its multi-host URL
	// (target_session_attrs=read-write), without the proxy, and the default
	// faults are FailoverFaults. HTTP agents, PgBouncer and DiskFull are
	// not available then.
	Failover bool
	// MaintenanceAgents run RunMaintenance (one of them leads); after
	// each failover kind the harness requires a leader on the new
	// primary.
	MaintenanceAgents int
	Keep              bool // keep the work directory even on success
	Logf              func(format string, args ...any)
}

func (o *Options) defaults() {
	if o.Duration == 0 {
		o.Duration = 40 * time.Second
	}
	if o.FaultMin == 0 {
		o.FaultMin = 2 * time.Second
	}
	if o.FaultMax == 0 {
		o.FaultMax = 4 * time.Second
	}
	if len(o.Faults) == 0 {
		o.Faults = append([]string(nil), AllFaults...)
		if o.PgBouncer {
			o.Faults = append(o.Faults, FaultPgBouncerKill)
		}
		if o.DiskFull {
			o.Faults = append(o.Faults, FaultDiskFull)
		}
		if o.Failover {
			o.Faults = FailoverFaults
		}
	}
	if o.KindsBacklog == 0 {
		o.KindsBacklog = kindsBacklog
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 90 * time.Second
	}
	if o.Rate == 0 {
		o.Rate = 200
	}
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	if o.SegmentRecords == 0 {
		o.SegmentRecords = 256
	}
	if o.Lease == 0 {
		o.Lease = 2 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

const (
	topicName = "chaos"
	queueName = "chaos"
	groupRun  = "g-run"
	// groupRun2 is read by the same agents as g-run, in the same
	// processes: their claims of a partition go out gathered
	// (pgmsg.Config.ClaimGatherWait).
	groupRun2 = "g-run2"
	groupTx   = "g-tx"
	groupDLQ  = "g-dlq"
	groupHTTP = "g-http"
	// sessionTimeout of the consumers' group membership (the agents' default).
	sessionTimeout = 3 * time.Second
)

// Result is a run's outcome.
type Result struct {
	Dir       string
	Report    *Report
	Faults    map[string]*FaultStats
	Unplanned []string // agents that exited without being killed
	// ServeRestarts counts `pgmsg serve` exits the harness did not cause
	// (it refuses to start while PostgreSQL is down); each was restarted.
	ServeRestarts int
	// Skipped counts the failover faults not injected because the
	// formation did not settle within failoverSettle (each also in
	// Faults as kind+SkippedUnsettled).
	Skipped int
	Elapsed time.Duration
}

// FaultStats are the figures of one fault kind.
type FaultStats struct {
	Injected int
	// Recovery: from the end of the fault (server accepting again, process
	// restarted, SIGCONT, traffic flowing) until every path made progress
	// again: an acknowledged publish, a job completion, and an accepted
	// commit on every partition of every group (so a partition stuck behind
	// a dead member until its session expires counts). Median and max over
	// the faults of this kind.
	RecoveryMedian time.Duration
	RecoveryMax    time.Duration
	// InFlightFailed counts publishes whose call failed or whose outcome was
	// unknown while the fault lasted (up to its recovery), and
	// InFlightStored how many of those records were nevertheless committed.
	InFlightFailed int
	InFlightStored int
	recoveries     []time.Duration
}

type slot struct {
	role string
	idx  int
	inc  int
	args []string
	url  string // default Harness.url
	cmd  *exec.Cmd
	done chan struct{}
	// killed is set when the harness killed or stopped it on purpose.
	killed bool
}

// Harness owns the server, the proxy and the agents of one run.
type Harness struct {
	o        Options
	dir      string
	bin      string
	pgmsgBin string
	httpAddr string
	stopping bool
	// serveExits counts `pgmsg serve` exits the harness did not cause
	// (it refuses to start while PostgreSQL is down); it is restarted.
	serveExits int
	// skipped counts the failover faults skipped (formation unsettled).
	skipped   int
	hist      string
	cluster   *pgcluster.Cluster
	formation *pgautofailover.Formation
	// fullVol is the tmpfs of the DiskFull tablespace (mounted while set).
	fullVol string
	// leaderStuck: failovers after which no maintenance leader came up on
	// the new primary (violations).
	leaderStuck []string
	pgMu        sync.Mutex
	proxy       *Proxy
	bouncer     *Bouncer
	admin       *pgxpool.Pool
	url         string

	mu        sync.Mutex
	slots     []*slot
	unplanned []string
	faultLog  *os.File
	xminHolds atomic.Int64
}

// Run performs one complete chaos run and returns its result. err is about
// the harness itself; invariant violations are in Result.Report.
func Run(ctx context.Context, o Options) (res *Result, err error) {
	o.defaults()
	if err := o.check(); err != nil {
		return nil, err
	}
	start := time.Now()
	h := &Harness{o: o}
	if h.dir, err = os.MkdirTemp("", "pgmsg-chaos-"); err != nil {
		return nil, err
	}
	// The server runs as user postgres when we are root: let it in.
	if err := os.Chmod(h.dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		h.shutdown()
		if err == nil && res != nil && res.Report.OK() && len(res.Unplanned) == 0 && !o.Keep {
			os.RemoveAll(h.dir)
		} else {
			o.Logf("chaos: work directory kept: %s", h.dir)
		}
	}()
	h.hist = filepath.Join(h.dir, "history")
	for _, d := range []string{h.hist, filepath.Join(h.dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := h.build(ctx); err != nil {
		return nil, err
	}
	if err := h.startServer(ctx); err != nil {
		return nil, err
	}
	if err := h.setup(ctx); err != nil {
		return nil, err
	}
	if o.DiskFull {
		if err := h.setupDiskFull(ctx); err != nil {
			return nil, err
		}
	}
	if h.faultLog, err = os.Create(filepath.Join(h.hist, "faults.jsonl")); err != nil {
		return nil, err
	}
	h.startAgents()
	if h.formation != nil {
		o.Logf("chaos: agents running against the formation (%s); injecting faults for %s", h.url, o.Duration)
	} else {
		o.Logf("chaos: agents running against %s (proxy %s); injecting faults for %s", h.cluster.Describe(), h.proxy.Addr(), o.Duration)
	}

	h.waitLoad(ctx)
	var bg sync.WaitGroup
	faultsDone := make(chan struct{})
	if o.XminHold > 0 {
		bg.Add(1)
		go func() { defer bg.Done(); h.holdXminRepeatedly(ctx, faultsDone) }()
	}
	h.injectFaults(ctx)
	close(faultsDone)
	bg.Wait()

	o.Logf("chaos: faults done; draining")
	if err := h.drain(ctx); err != nil {
		o.Logf("chaos: drain: %v", err)
	}
	h.stopAll(nil)

	db, err := h.readState(ctx)
	if err != nil {
		return nil, err
	}
	co := CheckOptions{TxGroups: []string{groupTx}, Work: filepath.Join(h.dir, "check")}
	if h.o.DLQConsumers > 0 {
		co.DLQGroup = groupDLQ
	}
	rep, faults, err := CheckHistory(h.hist, db, co)
	if err != nil {
		return nil, err
	}
	for _, v := range h.leaderStuck {
		rep.violate("maintenance-leader-stuck", "%s", v)
	}
	if h.o.CopyProducers > 0 && db.CopyPartitions == 0 {
		rep.violate("copy-unused", "CopyProducers ran, but no partition published with COPY")
	}
	res = &Result{Dir: h.dir, Report: rep, Faults: faults, Elapsed: time.Since(start)}
	h.mu.Lock()
	res.Unplanned = append(res.Unplanned, h.unplanned...)
	res.ServeRestarts = h.serveExits
	res.Skipped = h.skipped
	h.mu.Unlock()
	b, _ := json.MarshalIndent(res, "", "  ")
	_ = os.WriteFile(filepath.Join(h.dir, "result.json"), b, 0o644)
	return res, nil
}

func (h *Harness) build(ctx context.Context) error {
	h.bin = filepath.Join(h.dir, "chaosagent")
	_, self, _, _ := runtime.Caller(0)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", h.bin, "./cmd/chaosagent")
	cmd.Dir = filepath.Dir(self)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: build agent: %w\n%s", err, out)
	}
	if h.o.HTTPProducers+h.o.HTTPConsumers == 0 {
		return nil
	}
	h.pgmsgBin = filepath.Join(h.dir, "pgmsg")
	cmd = exec.CommandContext(ctx, "go", "build", "-o", h.pgmsgBin, "../../cmd/pgmsg")
	cmd.Dir = filepath.Dir(self)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: build pgmsg: %w\n%s", err, out)
	}
	return nil
}

var serverSettings = map[string]string{
	// The faults crash processes, not the machine: the OS keeps every
	// write(2) across a PostgreSQL crash, so fsync can be off. Commits stay
	// synchronous (synchronous_commit on), or an acknowledged commit could
	// be lost by a server crash and the checker would rightly complain.
	"fsync": "off", "full_page_writes": "off",
	"log_min_messages": "warning", "log_checkpoints": "off",
}

// check rejects combinations a run cannot make.
func (o *Options) check() error {
	if !o.Failover {
		for _, k := range o.Faults {
			if k == FaultFailoverKill || k == FaultSwitchover {
				return fmt.Errorf("chaos: fault %s needs Options.Failover", k)
			}
		}
		return nil
	}
	if o.PgBouncer || o.DiskFull || o.HTTPProducers+o.HTTPConsumers > 0 || o.XminHold > 0 {
		return fmt.Errorf("chaos: a failover run has no PgBouncer, DiskFull, HTTP agents or xmin holds")
	}
	for _, k := range o.Faults {
		if singleServerFaults[k] {
			return fmt.Errorf("chaos: fault %s does not apply to a failover run", k)
		}
	}
	return nil
}

func (h *Harness) startServer(ctx context.Context) error {
	if h.o.Failover {
		return h.startFormation(ctx)
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: filepath.Join(h.dir, "pgdata"), Settings: serverSettings})
	if err != nil {
		return err
	}
	h.cluster = c
	if h.proxy, err = NewProxy(fmt.Sprintf("127.0.0.1:%d", c.Port)); err != nil {
		return err
	}
	h.url = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", h.proxy.Addr())
	if h.o.PgBouncer {
		if h.bouncer, err = StartBouncer(filepath.Join(h.dir, "pgbouncer"), "127.0.0.1", c.Port); err != nil {
			return err
		}
	}
	return h.connectAdmin(ctx, c.URL)
}

// connectAdmin opens the harness's own pool.
func (h *Harness) connectAdmin(ctx context.Context, url string) error {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	// FaultPGTerminate spares the harness's own sessions.
	cfg.ConnConfig.RuntimeParams["application_name"] = harnessApp
	h.admin, err = pgxpool.NewWithConfig(ctx, cfg)
	return err
}

func (h *Harness) setup(ctx context.Context) error {
	m, err := pgmsgmigrate.New(h.admin, nil)
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	client, err := pgmsg.NewClient(h.admin, nil)
	if err != nil {
		return err
	}
	if h.formation != nil {
		// What docs/operations.md recommends beside pg_auto_failover: a
		// primary without a synchronous standby (wait_primary, as after
		// a kill until the old primary is back, or the old primary of
		// a switchover that the monitor put there) refuses writes with
		// PM124 instead of acknowledging what a promotion can lose.
		if err := client.SetMinInsyncReplicas(ctx, 2); err != nil {
			return err
		}
	}
	if _, err := client.CreateTopic(ctx, topicName, pgmsg.TopicConfig{Partitions: h.o.Partitions, SegmentRecords: h.o.SegmentRecords}); err != nil {
		return err
	}
	groups := []string{groupRun, groupRun2, groupTx}
	if h.o.HTTPConsumers > 0 {
		groups = append(groups, groupHTTP)
	}
	if h.o.DLQConsumers > 0 {
		groups = append(groups, groupDLQ)
	}
	for _, g := range groups {
		if _, err := client.CreateGroup(ctx, topicName, g, pgmsg.PositionEarliest); err != nil {
			return err
		}
	}
	if _, err := client.CreateQueue(ctx, queueName, pgmsg.QueueConfig{
		MaxAttempts: 3, Lease: h.o.Lease, RetryBackoff: 50 * time.Millisecond, RetryBackoffMax: time.Second,
	}); err != nil {
		return err
	}
	if _, err := client.CreateQueue(ctx, kindsQueue, pgmsg.QueueConfig{
		MaxAttempts: 3, Lease: h.o.Lease, RetryBackoff: 50 * time.Millisecond, RetryBackoffMax: time.Second, KeyLimit: kindsKeyLimit,
	}); err != nil {
		return err
	}
	_, err = h.admin.Exec(ctx, `CREATE TABLE public.chaos_effect (grp text NOT NULL, partition int NOT NULL, "offset" bigint NOT NULL, id text NOT NULL)`)
	return err
}

func (h *Harness) startAgents() {
	lease := h.o.Lease.String()
	rate := strconv.Itoa(h.o.Rate)
	add := func(role string, n int, args ...string) {
		for i := range n {
			s := &slot{role: role, idx: i, args: args}
			h.slots = append(h.slots, s)
			h.start(s)
		}
	}
	if h.bouncer != nil {
		// Through PgBouncer in transaction mode: no LISTEN (they poll),
		// no named prepared statements (the URL's exec mode).
		bouncerURL := h.bouncer.URL("postgres")
		addVia := func(role string, args ...string) {
			s := &slot{role: role, idx: 0, args: append([]string{"-no-notify", "-poll", "100ms"}, args...), url: bouncerURL}
			h.slots = append(h.slots, s)
			h.start(s)
		}
		addVia("bproducer", "-rate", rate)
		addVia("bconsumer", "-group", groupRun, "-group2", groupRun2, "-lease", lease, "-work", "150ms")
		addVia("bworker", "-lease", lease, "-work", "100ms")
	}
	// Producers and workers give up on a lock after 500ms (lock_timeout);
	// consumers have no lock_timeout but a 1.5s statement_timeout, so a held
	// lock shows both kinds of timeout.
	add("producer", h.o.Producers, "-rate", rate, "-lock-timeout", "500ms")
	// At a quarter of the rate: at the full rate (a quarter more load in
	// all) the HTTP group, which reads slowest, was still 16k records
	// behind at the end of a chaos-goal run's 3-minute drain.
	add("cproducer", h.o.CopyProducers, "-rate", strconv.Itoa(max(h.o.Rate/4, 1)), "-batch", "20", "-lock-timeout", "500ms")
	add("aproducer", h.o.AsyncProducers, "-rate", rate, "-lock-timeout", "500ms")
	add("consumer", h.o.Consumers, "-group", groupRun, "-group2", groupRun2, "-lease", lease, "-work", "150ms", "-lock-timeout", "0", "-statement-timeout", "1500ms")
	add("txconsumer", h.o.TxConsumers, "-group", groupTx, "-work", "50ms", "-lock-timeout", "0", "-statement-timeout", "1500ms")
	// A failed claim is retried record by record: keep the work per
	// handler call short, or a poison record costs a claim's worth of it.
	add("dlqconsumer", h.o.DLQConsumers, "-group", groupDLQ, "-lease", lease, "-work", "2ms", "-lock-timeout", "0", "-statement-timeout", "1500ms")
	enqArgs := []string{"-rate", strconv.Itoa(max(h.o.Rate/4, 1)), "-lock-timeout", "500ms"}
	if h.o.KindWorkers > 0 {
		enqArgs = append(enqArgs, "-kinds", kindsQueue, "-kinds-backlog", strconv.Itoa(h.o.KindsBacklog))
	}
	add("enqueuer", h.o.Enqueuers, enqArgs...)
	add("worker", h.o.Workers, "-lease", lease, "-work", "100ms", "-lock-timeout", "500ms")
	add("kworker", h.o.KindWorkers, "-queue", kindsQueue, "-lease", lease, "-work", "100ms", "-lock-timeout", "500ms")
	add("maint", h.o.MaintenanceAgents)
	if h.o.HTTPProducers+h.o.HTTPConsumers > 0 {
		port, _ := freePort()
		h.httpAddr = fmt.Sprintf("127.0.0.1:%d", port)
		add("serve", 1)
		base := "http://" + h.httpAddr
		add("hproducer", h.o.HTTPProducers, "-rate", rate, "-http", base)
		add("hconsumer", h.o.HTTPConsumers, "-group", groupHTTP, "-lease", lease, "-work", "150ms", "-http", base)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *slot) name() string { return fmt.Sprintf("%s%d.%d", s.role, s.idx, s.inc) }

// start launches the slot's next incarnation.
func (h *Harness) start(s *slot) { h.startIf(s, nil) }

// startIf launches the slot's next incarnation unless expect is set and
// the slot was restarted since (its done channel is no longer expect).
func (h *Harness) startIf(s *slot, expect chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if expect != nil && (s.done != expect || h.stopping) {
		return
	}
	s.inc++
	name := s.name()
	u := h.url
	if s.url != "" {
		u = s.url
	}
	args := append([]string{"-url", u, "-role", agentRole(s), "-name", name,
		"-out", filepath.Join(h.hist, name+".jsonl")}, s.args...)
	cmd := exec.Command(h.bin, args...)
	if s.role == "serve" {
		// Statement and lock timeouts as the agents have them, through the proxy.
		cmd = exec.Command(h.pgmsgBin, "serve", "--database-url", h.url+"&statement_timeout=5000&lock_timeout=500",
			"--listen", h.httpAddr, "--insecure-no-auth", "--max-wait", "2s", "--shutdown-timeout", "3s")
	}
	logf, _ := os.Create(filepath.Join(h.dir, "logs", name+".log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		h.unplanned = append(h.unplanned, fmt.Sprintf("%s: start: %v", name, err))
		return
	}
	s.cmd, s.done, s.killed = cmd, make(chan struct{}), false
	done := s.done
	go func() {
		err := cmd.Wait()
		logf.Close()
		h.mu.Lock()
		planned := s.killed
		restart := !planned && s.role == "serve" && !h.stopping
		if restart {
			h.serveExits++
		}
		h.mu.Unlock()
		if restart {
			// pgmsg serve exits when PostgreSQL is down at start: a
			// supervisor would restart it, and so do we.
			close(done)
			time.Sleep(500 * time.Millisecond)
			h.startIf(s, done)
			return
		}
		if !planned {
			h.mu.Lock()
			h.unplanned = append(h.unplanned, fmt.Sprintf("%s exited on its own: %v (log %s)", name, err, logf.Name()))
			h.mu.Unlock()
		}
		close(done)
	}()
}

func (h *Harness) pick(roles ...string) *slot {
	var c []*slot
	for _, s := range h.slots {
		for _, r := range roles {
			if s.role == r {
				c = append(c, s)
			}
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[rand.IntN(len(c))]
}

func (h *Harness) signal(s *slot, sig syscall.Signal, planned bool) {
	h.mu.Lock()
	if planned {
		s.killed = true
	}
	p := s.cmd.Process
	h.mu.Unlock()
	_ = p.Signal(sig)
}

func (h *Harness) recordFault(kind string, start, end time.Time, detail string) {
	b, _ := json.Marshal(Event{K: "fault", T: start.UnixNano(), Kind: kind, Start: start.UnixNano(), End: end.UnixNano(), Detail: detail})
	_, _ = h.faultLog.Write(append(b, '\n'))
	h.o.Logf("chaos: %-22s %6.2fs  %s", kind, end.Sub(start).Seconds(), detail)
}

// enough reports whether FaultsPerKind is met (always, when unset).
func (h *Harness) enough(counts map[string]int) bool {
	n := h.o.FaultsPerKind
	for _, k := range h.o.Faults {
		if counts[k] < n {
			return false
		}
	}
	return h.o.XminHold <= 0 || int(h.xminHolds.Load()) >= n
}

func (h *Harness) injectFaults(ctx context.Context) {
	deadline := time.Now().Add(h.o.Duration)
	order := []string{}
	counts := map[string]int{}
	for (time.Now().Before(deadline) || !h.enough(counts)) && ctx.Err() == nil {
		gap := h.o.FaultMin + time.Duration(rand.Int64N(int64(h.o.FaultMax-h.o.FaultMin)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		if len(order) == 0 {
			order = append(order, h.o.Faults...)
			rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		kind := order[0]
		order = order[1:]
		if h.inject(ctx, kind) {
			counts[kind]++
		}
	}
}

// SkippedUnsettled suffixes the kind of a failover fault that was not
// injected because the formation did not settle in time (settled).
const SkippedUnsettled = "_skipped_unsettled"

// inject injects one fault of kind and reports whether it took effect. One
// that did not (no process to pick, the lock holder lost a deadlock, the
// server could not be stopped) is recorded as kind+"_failed" and does not
// count towards FaultsPerKind.
func (h *Harness) inject(ctx context.Context, kind string) bool {
	start := time.Now()
	detail := ""
	ok := true
	kill := func(roles ...string) {
		s := h.pick(roles...)
		if s == nil {
			ok = false
			return
		}
		h.mu.Lock()
		detail = s.name() // s.inc changes under h.mu (startIf)
		done := s.done
		h.mu.Unlock()
		h.signal(s, syscall.SIGKILL, true)
		<-done
		time.Sleep(time.Duration(rand.Int64N(int64(500 * time.Millisecond))))
		h.startIf(s, done)
	}
	pause := func(roles ...string) {
		s := h.pick(roles...)
		if s == nil {
			ok = false
			return
		}
		d := max(h.o.Lease, sessionTimeout) + time.Second + time.Duration(rand.Int64N(int64(time.Second)))
		h.mu.Lock()
		name := s.name()
		h.mu.Unlock()
		detail = fmt.Sprintf("%s stopped %s (lease %s, session %s)", name, d.Round(time.Millisecond), h.o.Lease, sessionTimeout)
		h.signal(s, syscall.SIGSTOP, false)
		time.Sleep(d)
		h.signal(s, syscall.SIGCONT, false)
	}
	switch kind {
	case FaultKillProducer:
		kill("producer", "cproducer", "aproducer", "enqueuer", "bproducer")
	case FaultKillConsumer:
		kill("consumer", "txconsumer", "dlqconsumer", "bconsumer")
	case FaultKillWorker:
		kill("worker", "bworker", "kworker")
	case FaultKillServe:
		kill("serve")
	case FaultPauseMember:
		pause("consumer", "txconsumer", "dlqconsumer", "bconsumer")
	case FaultPauseWorker:
		pause("worker", "bworker", "kworker")
	case FaultPGKill:
		detail, ok = h.restartServer(ctx, syscall.SIGKILL)
	case FaultPGImmediate:
		detail, ok = h.restartServer(ctx, syscall.SIGQUIT)
	case FaultPGFast:
		detail, ok = h.restartServer(ctx, syscall.SIGINT)
	case FaultProxyCut:
		detail = fmt.Sprintf("%d connections cut", h.proxy.Cut())
	case FaultProxyStall:
		d := h.o.Lease + time.Second
		detail = fmt.Sprintf("%d connections stalled %s", h.proxy.Conns(), d)
		h.proxy.Stall(d)
	case FaultLockHold:
		detail, ok = h.holdLocks(ctx, h.o.Lease+time.Second)
	case FaultPGTerminate:
		detail, ok = h.terminateBackends(ctx)
	case FaultPgBouncerKill:
		if h.bouncer == nil {
			detail, ok = "no PgBouncer", false
			break
		}
		h.bouncer.Kill()
		time.Sleep(time.Duration(rand.Int64N(int64(time.Second))))
		if err := h.bouncer.Start(); err != nil {
			h.mu.Lock()
			h.unplanned = append(h.unplanned, "pgbouncer restart failed: "+err.Error())
			h.mu.Unlock()
			detail, ok = "restart failed: "+err.Error(), false
			break
		}
		detail = "PgBouncer SIGKILL, restarted"
	case FaultDiskFull:
		detail, ok = h.fillDisk(ctx)
	case FaultFailoverKill, FaultSwitchover:
		var skipped bool
		detail, ok, skipped = h.failover(ctx, kind == FaultSwitchover)
		if skipped {
			// Not injected: the formation never settled. Recorded
			// apart (the fault table and Result.Skipped), not as a
			// failed fault, and not counted towards FaultsPerKind.
			h.recordFault(kind+SkippedUnsettled, start, time.Now(), detail)
			h.mu.Lock()
			h.skipped++
			h.mu.Unlock()
			return false
		}
	case FaultNetLatency:
		detail = h.slowLink()
	case FaultNetBlackhole:
		detail, ok = h.blackhole()
	case FaultNetCutCommit, FaultNetCutReply:
		detail, ok = h.cutAt(ctx, kind == FaultNetCutCommit)
	}
	if !ok {
		kind += "_failed"
	}
	h.recordFault(kind, start, time.Now(), detail)
	return ok
}

// waitLoad waits up to two minutes until the agents have published 100
// records (on a loaded machine they take a while to start): a fault that
// hits before any load proves nothing.
func (h *Harness) waitLoad(ctx context.Context) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var n int64
		err := h.admin.QueryRow(ctx, `SELECT coalesce(sum(tp.next_offset - tp.start_offset), 0)::bigint
			FROM pgmsg.topic_partition tp JOIN pgmsg.topic t USING (topic_id) WHERE t.name = $1`, topicName).Scan(&n)
		if err == nil && n >= 100 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	h.o.Logf("chaos: fewer than 100 records published after 2 minutes; injecting faults anyway")
}

// harnessApp is the application_name of the harness's own sessions.
const harnessApp = "chaos-harness"

// terminateBackends terminates every client backend but the harness's:
// the agents' sessions, through the proxy or PgBouncer, and PgBouncer's
// server connections.
func (h *Harness) terminateBackends(ctx context.Context) (string, bool) {
	var n int
	err := h.admin.QueryRow(ctx, `SELECT count(pg_catalog.pg_terminate_backend(pid)) FROM pg_catalog.pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_catalog.pg_backend_pid() AND application_name <> $1`, harnessApp).Scan(&n)
	if err != nil {
		return "terminate: " + err.Error(), false
	}
	return fmt.Sprintf("%d backends terminated", n), n > 0
}

// slowLink delays all traffic by [lo, hi] each way, hi up to 200 ms, for
// twice the lease: leases and sessions must be extended over the slow link.
func (h *Harness) slowLink() string {
	lo := time.Duration(1+rand.IntN(20)) * time.Millisecond
	hi := lo + time.Duration(rand.IntN(int(200*time.Millisecond-lo)+1))
	d := 2 * h.o.Lease
	h.proxy.SetLatency(lo, hi)
	time.Sleep(d)
	h.proxy.SetLatency(0, 0)
	return fmt.Sprintf("latency %s-%s each way for %s (%d connections)", lo, hi.Round(time.Millisecond), d, h.proxy.Conns())
}

// blackhole makes a third of the connections (at least one) swallow
// every byte for twice the lease, then closes those their clients have
// not given up on (as a TCP retransmission timeout would, much later).
func (h *Harness) blackhole() (string, bool) {
	b := h.proxy.Blackhole(max(h.proxy.Conns()/3, 1))
	if b.Len() == 0 {
		return "no connection open", false
	}
	d := 2 * h.o.Lease
	time.Sleep(d)
	open := b.Open()
	b.Close()
	return fmt.Sprintf("%d connections blackholed for %s; %d given up by their clients, %d still open then, closed by the proxy",
		b.Len(), d, b.Len()-open, open), true
}

// cutAt arms three cuts at the server's answer to a COMMIT (atCommit) or
// to any statement, and waits up to 5 s for them; ok when one happened.
func (h *Harness) cutAt(ctx context.Context, atCommit bool) (string, bool) {
	if atCommit {
		h.proxy.CutAtCommit(3)
	} else {
		h.proxy.CutAtReply(3)
	}
	var c, r int
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		if (atCommit && h.proxy.cutCommit.Load() == 0) || (!atCommit && h.proxy.cutReply.Load() == 0) ||
			time.Now().After(deadline) || ctx.Err() != nil {
			c, r = h.proxy.Disarm()
			break
		}
	}
	if atCommit {
		return fmt.Sprintf("%d connections cut between a COMMIT's answer and the client", c), c > 0
	}
	return fmt.Sprintf("%d connections cut between a statement's answer and the client", r), r > 0
}

// restartServer stops PostgreSQL with sig and starts it again on the same
// data directory and port. SIGKILL goes to the server's whole process group
// (postmaster and every backend die at once: a crash); SIGQUIT to the
// postmaster is what `pg_ctl stop -m immediate` sends (no checkpoint,
// crash recovery on start); SIGINT is a fast shutdown.
func (h *Harness) restartServer(ctx context.Context, sig syscall.Signal) (string, bool) {
	h.pgMu.Lock()
	defer h.pgMu.Unlock()
	pid := postmasterPID(h.cluster.DataDir)
	switch {
	case pid <= 0:
		return "postmaster.pid unreadable", false
	case sig == syscall.SIGKILL:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	default:
		_ = syscall.Kill(pid, sig)
	}
	select {
	case <-h.cluster.Exited():
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-h.cluster.Exited()
	}
	down := time.Now()
	for i := 0; ; i++ {
		c, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: h.cluster.DataDir, Port: h.cluster.Port, Settings: serverSettings})
		if err == nil {
			h.cluster = c
			break
		}
		if i == 20 || ctx.Err() != nil {
			h.mu.Lock()
			h.unplanned = append(h.unplanned, "postgres restart failed: "+err.Error())
			h.mu.Unlock()
			return "restart failed", false
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Sprintf("postmaster %d %s; back up after %s", pid, sig, time.Since(down).Round(time.Millisecond)), true
}

func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// holdLocks locks every partition counter, every group cursor and a batch
// of waiting jobs for d: publishers, commits and job updates wait and run
// into their lock_timeout or statement_timeout.
func (h *Harness) holdLocks(ctx context.Context, d time.Duration) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, d+10*time.Second)
	defer cancel()
	tx, err := h.admin.Begin(ctx)
	if err != nil {
		return "begin: " + err.Error(), false
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var parts, cursors, jobs int
	err = tx.QueryRow(ctx, `
		WITH a AS (SELECT 1 FROM pgmsg.topic_partition FOR UPDATE),
		     b AS (SELECT 1 FROM pgmsg.group_cursor FOR UPDATE),
		     c AS (SELECT 1 FROM pgmsg.job WHERE state <> 'dead' ORDER BY id LIMIT 200 FOR UPDATE SKIP LOCKED)
		SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM b), (SELECT count(*) FROM c)`).Scan(&parts, &cursors, &jobs)
	if err != nil {
		// Typically a deadlock with a publisher or a commit that PostgreSQL
		// resolved by aborting the holder.
		return "lock: " + err.Error(), false
	}
	time.Sleep(d)
	return fmt.Sprintf("held %d partition counters, %d cursors, %d jobs for %s", parts, cursors, jobs, d), true
}

// holdXminRepeatedly holds the xmin horizon for XminHold at a time, with a
// gap of 0.5-1.5 s between holds, until done is closed; a hold that is
// still running then is ended and counted.
func (h *Harness) holdXminRepeatedly(ctx context.Context, done <-chan struct{}) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		if h.holdXmin(ctx, h.o.XminHold) {
			h.xminHolds.Add(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500*time.Millisecond + time.Duration(rand.Int64N(int64(time.Second)))):
		}
	}
}

// holdXmin keeps a REPEATABLE READ transaction (a snapshot that pins the
// xmin horizon, so vacuum can remove nothing newer) open for d, or until
// ctx ends. It reports whether the snapshot was taken; a server restart
// meanwhile ends the hold early (the detail says how long it lasted).
func (h *Harness) holdXmin(ctx context.Context, d time.Duration) bool {
	start := time.Now()
	tx, err := h.admin.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return false
	}
	var n int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pgmsg.topic_partition`).Scan(&n); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return false
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	// A snapshot whose backend died with a server restart was held only
	// until then; a query on it tells.
	alive := tx.QueryRow(context.WithoutCancel(ctx), `SELECT 1`).Scan(&n) == nil
	_ = tx.Rollback(context.WithoutCancel(ctx))
	end := time.Now()
	detail := fmt.Sprintf("snapshot held %s", end.Sub(start).Round(time.Millisecond))
	if !alive {
		detail = fmt.Sprintf("snapshot taken; a server restart during the %s hold ended it early", end.Sub(start).Round(time.Millisecond))
	}
	h.recordFault(FaultXminHold, start, end, detail)
	return true
}

// drain stops the producers and enqueuers, resumes anything paused, and
// waits until every group reached the end of every partition and no job is
// waiting or running.
func (h *Harness) drain(ctx context.Context) error {
	h.stopAll(map[string]bool{"producer": true, "cproducer": true, "aproducer": true, "enqueuer": true, "hproducer": true, "bproducer": true})
	for _, s := range h.slots {
		h.signal(s, syscall.SIGCONT, false)
	}
	start := time.Now()
	lastMove := start
	bestLag, bestLive := int64(-1), int64(-1)
	for {
		var lag, live int64
		err := h.admin.QueryRow(ctx, `
			SELECT (SELECT coalesce(sum(tp.next_offset - c.next_offset), 0)::bigint
			          FROM pgmsg.group_cursor c JOIN pgmsg.topic_partition tp USING (topic_id, partition)
			         WHERE c.next_offset < tp.next_offset),
			       (SELECT count(*) FROM pgmsg.job WHERE state <> 'dead')`).Scan(&lag, &live)
		if err == nil && lag == 0 && live == 0 {
			h.o.Logf("chaos: drained in %s", time.Since(start).Round(time.Second))
			return nil
		}
		if err == nil && (bestLag < 0 || lag < bestLag || live < bestLive) {
			bestLag, bestLive = min64(bestLag, lag), min64(bestLive, live)
			lastMove = time.Now()
		}
		if time.Since(lastMove) > h.o.DrainTimeout || time.Since(start) > 10*h.o.DrainTimeout {
			return fmt.Errorf("not drained after %s (%s without progress): %d records behind, %d live jobs (err %v)",
				time.Since(start).Round(time.Second), time.Since(lastMove).Round(time.Second), lag, live, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// min64 is the smaller of a and b, where a negative a is none yet.
func min64(a, b int64) int64 {
	if a < 0 || b < a {
		return b
	}
	return a
}

// stopAll sends SIGTERM to the agents of the given roles (all when nil)
// and waits for them, killing those that take more than 15s.
func (h *Harness) stopAll(roles map[string]bool) {
	if roles == nil {
		h.mu.Lock()
		h.stopping = true
		h.mu.Unlock()
	}
	var wait []*slot
	for _, s := range h.slots {
		if s.cmd == nil || (roles != nil && !roles[s.role]) {
			continue
		}
		h.signal(s, syscall.SIGCONT, false)
		h.signal(s, syscall.SIGTERM, true)
		wait = append(wait, s)
	}
	for _, s := range wait {
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			h.signal(s, syscall.SIGKILL, true)
			<-s.done
		}
	}
}

func (h *Harness) shutdown() {
	if h.slots != nil {
		h.stopAll(nil)
	}
	if h.admin != nil {
		h.admin.Close()
	}
	if h.proxy != nil {
		h.proxy.Close()
	}
	if h.bouncer != nil {
		h.bouncer.Kill()
	}
	if h.cluster != nil {
		_ = h.cluster.Stop()
	}
	if h.formation != nil {
		h.formation.Halt()
	}
	if h.fullVol != "" {
		_ = syscall.Unmount(h.fullVol, 0)
	}
	if h.faultLog != nil {
		h.faultLog.Close()
	}
}

func (h *Harness) readState(ctx context.Context) (*DBState, error) {
	db := &DBState{
		Partitions: map[int32][2]int64{}, Log: map[int32]map[int64]string{},
		Cursors: map[string]map[int32]int64{}, Effects: map[string]map[int32]map[int64][]string{},
		Jobs: map[int64]JobRow{}, Archive: map[int64]string{},
	}
	rows, err := h.admin.Query(ctx, `SELECT partition, start_offset, next_offset, offset_seq IS NOT NULL FROM pgmsg.topic_partition tp
		JOIN pgmsg.topic t USING (topic_id) WHERE t.name = $1`, topicName)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var p int32
		var s, n int64
		var copied bool
		if err := rows.Scan(&p, &s, &n, &copied); err != nil {
			return nil, err
		}
		db.Partitions[p] = [2]int64{s, n}
		db.Log[p] = map[int64]string{}
		if copied {
			db.CopyPartitions++
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = h.admin.Query(ctx, `SELECT r.partition, r."offset", convert_from(r.value, 'UTF8')::jsonb->>'id'
		FROM pgmsg.record r JOIN pgmsg.topic t USING (topic_id) WHERE t.name = $1`, topicName)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var p int32
		var o int64
		var id string
		if err := rows.Scan(&p, &o, &id); err != nil {
			return nil, err
		}
		if db.Log[p] == nil {
			db.Log[p] = map[int64]string{}
		}
		if prev, dup := db.Log[p][o]; dup {
			return nil, fmt.Errorf("partition %d offset %d stored twice (%s, %s)", p, o, prev, id)
		}
		db.Log[p][o] = id
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// The dead letters of the group g-dlq (its agents' Consumer.Run): by
	// source partition and offset, the ids the dead-letter records hold.
	db.DeadLetters = map[int32]map[int64][]string{}
	rows, err = h.admin.Query(ctx, `SELECT convert_from(decode(r.headers->>'pgmsg.dlq.partition', 'base64'), 'UTF8')::int,
		convert_from(decode(r.headers->>'pgmsg.dlq.offset', 'base64'), 'UTF8')::bigint,
		convert_from(r.value, 'UTF8')::jsonb->>'id'
		FROM pgmsg.record r JOIN pgmsg.topic t USING (topic_id) WHERE t.name = $1`, topicName+pgmsg.DeadLetterSuffix)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var p int32
		var o int64
		var id string
		if err := rows.Scan(&p, &o, &id); err != nil {
			return nil, err
		}
		if db.DeadLetters[p] == nil {
			db.DeadLetters[p] = map[int64][]string{}
		}
		db.DeadLetters[p][o] = append(db.DeadLetters[p][o], id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = h.admin.Query(ctx, `SELECT group_name, partition, next_offset FROM pgmsg.group_cursor`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var g string
		var p int32
		var n int64
		if err := rows.Scan(&g, &p, &n); err != nil {
			return nil, err
		}
		if db.Cursors[g] == nil {
			db.Cursors[g] = map[int32]int64{}
		}
		db.Cursors[g][p] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = h.admin.Query(ctx, `SELECT grp, partition, "offset", id FROM public.chaos_effect ORDER BY grp, partition, "offset"`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var g, id string
		var p int32
		var o int64
		if err := rows.Scan(&g, &p, &o, &id); err != nil {
			return nil, err
		}
		if db.Effects[g] == nil {
			db.Effects[g] = map[int32]map[int64][]string{}
		}
		if db.Effects[g][p] == nil {
			db.Effects[g][p] = map[int64][]string{}
		}
		db.Effects[g][p][o] = append(db.Effects[g][p][o], id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = h.admin.Query(ctx, `SELECT id, state, attempt, coalesce(jsonb_array_length(errors), 0) FROM pgmsg.job
		WHERE queue_id = (SELECT queue_id FROM pgmsg.queue WHERE name = $1)`, queueName)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id int64
		var j JobRow
		if err := rows.Scan(&id, &j.State, &j.Attempt, &j.Errors); err != nil {
			return nil, err
		}
		db.Jobs[id] = j
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = h.admin.Query(ctx, `SELECT id, status FROM pgmsg.job_archive
		WHERE queue_id = (SELECT queue_id FROM pgmsg.queue WHERE name = $1)`, queueName)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id int64
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		if _, dup := db.Archive[id]; dup {
			return nil, fmt.Errorf("job %d archived twice", id)
		}
		db.Archive[id] = st
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return db, h.readKinds(ctx, db)
}

// readKinds reads the kinds queue's jobs, live and archived, with their
// keys, dependencies and times (the database's clock), and its key limit.
func (h *Harness) readKinds(ctx context.Context, db *DBState) error {
	db.KindJobs = map[int64]KindJob{}
	if err := h.admin.QueryRow(ctx, `SELECT coalesce(key_limit, 0) FROM pgmsg.queue WHERE name = $1`, kindsQueue).Scan(&db.KindsKeyLimit); err != nil {
		return err
	}
	rows, err := h.admin.Query(ctx, `
		SELECT j.id, j.state, coalesce(j.sequence_key, ''), coalesce(j.limit_key, ''), coalesce(j.depends_on, '{}'),
		       j.attempted_at, j.finalized_at
		  FROM pgmsg.job j JOIN pgmsg.queue q USING (queue_id) WHERE q.name = $1
		UNION ALL
		SELECT a.id, a.status, coalesce(a.sequence_key, ''),
		       coalesce(convert_from((SELECT p.payload FROM pgmsg.job_payload p WHERE p.id = a.id), 'UTF8')::jsonb->>'lk', ''),
		       coalesce(a.depends_on, '{}'), a.attempted_at, a.finished_at
		  FROM pgmsg.job_archive a JOIN pgmsg.queue q USING (queue_id) WHERE q.name = $1`, kindsQueue)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var j KindJob
		var attempted, finished *time.Time
		if err := rows.Scan(&id, &j.State, &j.SequenceKey, &j.LimitKey, &j.DependsOn, &attempted, &finished); err != nil {
			return err
		}
		if attempted != nil {
			j.AttemptedAt = attempted.UnixNano()
		}
		if finished != nil {
			j.FinishedAt = finished.UnixNano()
		}
		if _, dup := db.KindJobs[id]; dup {
			return fmt.Errorf("kinds job %d both live and archived", id)
		}
		db.KindJobs[id] = j
	}
	return rows.Err()
}

// agentRole is the chaosagent -role of s: the roles through PgBouncer
// (bproducer ...) are the plain ones on another URL.
func agentRole(s *slot) string {
	if s.url != "" {
		return strings.TrimPrefix(s.role, "b")
	}
	return s.role
}
