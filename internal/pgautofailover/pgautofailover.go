// Package pgautofailover runs a throwaway high-availability PostgreSQL
// for failover tests: a pg_auto_failover monitor and two nodes (a primary
// and a streaming standby), all local, started with Debian's pg_autoctl
// as the unprivileged user internal/pgcluster runs servers as. The
// monitor's health checks are tightened so that a failover takes seconds,
// not the defaults' half a minute.
package pgautofailover

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/pgcluster"
	"github.com/pgmsg/pgmsg/internal/procfs"
)

// ErrNoBinaries is returned when pg_autoctl or the PostgreSQL server
// binaries are missing.
var ErrNoBinaries = errors.New("pgautofailover: pg_autoctl (Debian: postgresql-15-auto-failover, pg-auto-failover-cli) or the PostgreSQL binaries not found")

// Options describe a formation.
type Options struct {
	// Dir holds the formation's data; it is created (and chowned to the
	// server's user) if missing.
	Dir string
	// BasePort: the monitor listens on BasePort, the nodes on BasePort+1
	// and BasePort+2. 0 (the default): three free ports, so that
	// formations of tests and harnesses running at once never collide.
	BasePort int
	// Async makes the standby leave the replication quorum: the primary
	// acknowledges commits without waiting for it (synchronous_standby_names
	// empty). Otherwise commits wait for the standby (pg_auto_failover's
	// default, synchronous_commit on with 'ANY 1 (...)').
	Async bool
	// Patient loosens the monitor's health checks for long runs on a
	// loaded machine: a check times out after 5 s (1 s otherwise) and a
	// node that stopped reporting counts as unhealthy after 12 s (3 s).
	// With the tight values a 2-core host at load 40 fails a healthy
	// primary over by itself; a node that is really gone refuses the
	// check's connection at once, so a kill still fails over in seconds.
	Patient bool
	// Log receives the harness's progress lines (nil: none).
	Log func(format string, args ...any)
}

// Node is one PostgreSQL node of the formation.
type Node struct {
	Name string
	Port int
	Dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Formation is a running monitor and its two nodes.
type Formation struct {
	opts    Options
	env     []string
	cred    *syscall.Credential
	autoctl string
	monitor *Node
	Nodes   []*Node
}

// Find returns pg_autoctl's path and the PostgreSQL binaries' directory.
func Find() (autoctl, bin string, err error) {
	bin, err = pgcluster.FindBinaries()
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrNoBinaries, err)
	}
	for _, p := range []string{filepath.Join(bin, "pg_autoctl"), "/usr/bin/pg_autoctl"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, bin, nil
		}
	}
	if p, err := exec.LookPath("pg_autoctl"); err == nil {
		return p, bin, nil
	}
	return "", "", ErrNoBinaries
}

// Start starts the monitor and both nodes and returns once the first node
// is primary and the second its secondary. Stop ends them.
func Start(ctx context.Context, opts Options) (f *Formation, err error) {
	autoctl, bin, err := Find()
	if err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	cred, uid, gid, err := pgcluster.Credential()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(opts.Dir, uid, gid); err != nil {
			return nil, err
		}
	}
	f = &Formation{opts: opts, cred: cred, autoctl: autoctl,
		env: append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "HOME="+opts.Dir,
			"XDG_CONFIG_HOME="+filepath.Join(opts.Dir, "config"), "XDG_DATA_HOME="+filepath.Join(opts.Dir, "data"),
			"XDG_RUNTIME_DIR="+filepath.Join(opts.Dir, "run"), "PG_CONFIG="+filepath.Join(bin, "pg_config"))}
	// On failure, stop what was started: f itself, since the failing
	// return sets the named result to nil.
	started := f
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	ports := []int{opts.BasePort, opts.BasePort + 1, opts.BasePort + 2}
	if opts.BasePort == 0 {
		if ports, err = freePorts(3); err != nil {
			return nil, err
		}
	}
	f.monitor = &Node{Name: "monitor", Port: ports[0], Dir: filepath.Join(opts.Dir, "monitor")}
	if err := f.start(f.monitor, "create", "monitor", "--pgdata", f.monitor.Dir, "--pgport", strconv.Itoa(f.monitor.Port),
		"--auth", "trust", "--no-ssl", "--hostname", "127.0.0.1", "--run"); err != nil {
		return nil, err
	}
	if err := f.waitSQL(ctx, f.monitor.Port, "pg_auto_failover", "SELECT pg_catalog.count(*) FROM pgautofailover.formation"); err != nil {
		return nil, fmt.Errorf("pgautofailover: monitor: %w", err)
	}
	// Seconds, not the defaults' half a minute: a health check every
	// second, a node unhealthy after 3 s (Patient: 12 s), a primary that
	// does not report counted as demoted after 5 s.
	checkTimeout, unhealthy, retries := 1000, 3000, 1
	if opts.Patient {
		checkTimeout, unhealthy, retries = 5000, 12000, 2
	}
	for _, s := range []string{
		"ALTER SYSTEM SET pgautofailover.health_check_period = 1000",
		fmt.Sprintf("ALTER SYSTEM SET pgautofailover.health_check_timeout = %d", checkTimeout),
		fmt.Sprintf("ALTER SYSTEM SET pgautofailover.health_check_max_retries = %d", retries),
		"ALTER SYSTEM SET pgautofailover.health_check_retry_delay = 500",
		fmt.Sprintf("ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = %d", unhealthy),
		"ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 5000",
		"SELECT pg_catalog.pg_reload_conf()",
	} {
		if err := f.exec(ctx, f.monitor.Port, "pg_auto_failover", s); err != nil {
			return nil, err
		}
	}
	monitorURI := fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.monitor.Port)
	for i, name := range []string{"a", "b"} {
		n := &Node{Name: name, Port: ports[1+i], Dir: filepath.Join(opts.Dir, name)}
		args := []string{"create", "postgres", "--pgdata", n.Dir, "--pgport", strconv.Itoa(n.Port), "--monitor", monitorURI,
			"--auth", "trust", "--no-ssl", "--hostname", "127.0.0.1", "--name", name, "--run"}
		if i == 1 && opts.Async {
			args = append(args, "--replication-quorum", "false")
		}
		if err := f.start(n, args...); err != nil {
			return nil, err
		}
		f.Nodes = append(f.Nodes, n)
		want := map[string]string{"a": "single"}
		if i == 1 {
			want = map[string]string{"a": "primary", "b": "secondary"}
		}
		if err := f.WaitStates(ctx, want); err != nil {
			return nil, err
		}
	}
	opts.Log("pgautofailover: monitor on %d, primary a on %d, standby b on %d (async %v)",
		f.monitor.Port, f.Nodes[0].Port, f.Nodes[1].Port, opts.Async)
	return f, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// The listeners stay open until all are chosen, so the same port is not
// returned twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// start runs pg_autoctl args in the background for n (its log is
// appended to, so that a restarted node's earlier lines stay).
func (f *Formation) start(n *Node, args ...string) error {
	logf, err := os.OpenFile(filepath.Join(f.opts.Dir, n.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(f.autoctl, args...)
	cmd.Dir = f.opts.Dir
	cmd.Env = f.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(n.done)
	}()
	return nil
}

// connect opens a connection to db on port.
func connect(ctx context.Context, port int, db string) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return pgx.Connect(cctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", port, db))
}

// exec runs sql on db on port.
func (f *Formation) exec(ctx context.Context, port int, db, sql string) error {
	c, err := connect(ctx, port, db)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, sql)
	return err
}

// waitSQL waits until sql runs on db on port.
func (f *Formation) waitSQL(ctx context.Context, port int, db, sql string) error {
	for {
		err := f.exec(ctx, port, db, sql)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// States returns each node's reported state, as the monitor knows it.
func (f *Formation) States(ctx context.Context) (map[string]string, error) {
	c, err := connect(ctx, f.monitor.Port, "pg_auto_failover")
	if err != nil {
		return nil, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	rows, err := c.Query(ctx, "SELECT nodename, reportedstate::text || '/' || goalstate::text FROM pgautofailover.node")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for rows.Next() {
		var name, st string
		if err := rows.Scan(&name, &st); err != nil {
			return nil, err
		}
		out[name] = st
	}
	return out, rows.Err()
}

// WaitStates waits until each named node has reported and been assigned
// the state want gives it (pg_auto_failover's states: single, primary,
// secondary, wait_primary ...).
func (f *Formation) WaitStates(ctx context.Context, want map[string]string) error {
	var last map[string]string
	for {
		st, err := f.States(ctx)
		if err == nil {
			ok := true
			for name, w := range want {
				if st[name] != w+"/"+w {
					ok = false
				}
			}
			if ok {
				return nil
			}
			last = st
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgautofailover: waiting for states %v: %w (last: %v)", want, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// URL is the multi-host URL of database db on both nodes that connects to
// whichever accepts writes.
func (f *Formation) URL(db string) string {
	var hosts []string
	for _, n := range f.Nodes {
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", n.Port))
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		strings.Join(hosts, ","), db)
}

// Kill ends n at once (SIGKILL), as a machine that fails: its
// pg_autoctl processes, its postmaster and the postmaster's children.
// Backends exit by themselves when their postmaster dies, but the
// monitor's health-check worker does not (nor, holding its pipe, the
// logger): left alone they outlived every test's formation.
func (f *Formation) Kill(n *Node) {
	killPostmaster(n.Dir)
	if n.cmd != nil && n.cmd.Process != nil {
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.done
	}
	killPostmaster(n.Dir)
}

// killPostmaster kills the postmaster of dir, if one runs, and every
// process it had started. A postmaster.pid left by a killed server may
// name a process that reused its PID: only a postgres process is killed.
func killPostmaster(dir string) {
	pid := postmasterPID(dir)
	if pid <= 0 {
		return
	}
	if procfs.Comm(pid) != "postgres" {
		return
	}
	kids := procfs.Children(pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
}

// Restart starts the pg_autoctl keeper of n again after Kill (a machine
// that comes back): it starts PostgreSQL and asks the monitor which role
// to take; a former primary is told to rejoin as the standby of the new
// one (with pg_rewind when its history diverged).
func (f *Formation) Restart(n *Node) error {
	return f.start(n, "run", "--pgdata", n.Dir)
}

// Primary returns the node the monitor has assigned, and which reported,
// the state primary or wait_primary (the writable one), or nil.
func (f *Formation) Primary(ctx context.Context) (*Node, error) {
	st, err := f.States(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range f.Nodes {
		if s := st[n.Name]; s == "primary/primary" || s == "wait_primary/wait_primary" {
			return n, nil
		}
	}
	return nil, fmt.Errorf("pgautofailover: no primary (states %v)", st)
}

// Other returns the node of the formation that is not n.
func (f *Formation) Other(n *Node) *Node {
	if f.Nodes[0] == n {
		return f.Nodes[1]
	}
	return f.Nodes[0]
}

// Switchover asks the monitor for a clean switchover (pg_autoctl perform
// switchover): the primary is told to stop (draining) and the standby to
// promote, and the old primary follows the new one as its standby. It
// returns when pg_autoctl does (it waits for the new states, up to five
// minutes: on a loaded machine the old primary's rewind alone can take
// more than the one minute it was given before); the caller waits for the
// states it expects.
//
// pg_auto_failover 2.0's monitor does not wait for the old primary to
// report that it stopped before it promotes the standby (prepare_promotion
// goes on to stop_replication as soon as the standby reports it), and it
// makes the standby writable once primary_demote_timeout (5 s here) has
// passed, whether the old primary stopped or not: the two servers can
// both be up for a moment (docs/reliability.md, "What a failover does").
func (f *Formation) Switchover(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, f.autoctl, "perform", "switchover", "--pgdata", f.monitor.Dir, "--wait", "300")
	cmd.Dir = f.opts.Dir
	cmd.Env = f.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgautofailover: perform switchover: %w\n%s", err, out)
	}
	return nil
}

// CutReplication makes the standby n stop receiving WAL (its
// primary_conninfo names a port nobody listens on), as a network
// partition between the nodes would: under asynchronous replication the
// primary goes on acknowledging commits the standby does not have.
func (f *Formation) CutReplication(ctx context.Context, n *Node) error {
	for _, s := range []string{
		"ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1 connect_timeout=1'",
		"SELECT pg_catalog.pg_reload_conf()",
	} {
		if err := f.exec(ctx, n.Port, "postgres", s); err != nil {
			return err
		}
	}
	// The WAL receiver restarts with the new setting.
	return f.waitSQL(ctx, n.Port, "postgres",
		"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_catalog.pg_stat_wal_receiver) THEN RAISE EXCEPTION 'still receiving'; END IF; END $$")
}

// Events returns the monitor's event log (pgautofailover.event): when
// each node was assigned and reported which state, and why, one line
// each, oldest first.
func (f *Formation) Events(ctx context.Context) ([]string, error) {
	c, err := connect(ctx, f.monitor.Port, "pg_auto_failover")
	if err != nil {
		return nil, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	rows, err := c.Query(ctx, `SELECT pg_catalog.to_char(eventtime AT TIME ZONE 'UTC', 'HH24:MI:SS.MS') || ' ' || nodename || ' '
		|| reportedstate::text || '/' || goalstate::text || ' lsn ' || reportedlsn::text || ': ' || coalesce(description, '')
		FROM pgautofailover.event ORDER BY eventid`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ServerLog returns the lines of n's PostgreSQL log (its log directory)
// that contain any of words.
func (f *Formation) ServerLog(n *Node, words ...string) []string {
	files, _ := filepath.Glob(filepath.Join(n.Dir, "log", "*.log"))
	var out []string
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, w := range words {
				if strings.Contains(line, w) {
					out = append(out, line)
					break
				}
			}
		}
	}
	return out
}

// postmasterPID is the PID in dir's postmaster.pid, or 0.
func postmasterPID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// Halt kills every process of the formation and leaves its directory.
func (f *Formation) Halt() {
	for _, n := range append([]*Node{f.monitor}, f.Nodes...) {
		if n != nil {
			f.Kill(n)
		}
	}
}

// Stop kills every process of the formation and removes its directory
// (kept when PGMSG_FAILOVER_KEEP_DIR=1, for its logs).
func (f *Formation) Stop() {
	f.Halt()
	if os.Getenv("PGMSG_FAILOVER_KEEP_DIR") == "1" {
		f.opts.Log("pgautofailover: kept %s", f.opts.Dir)
		return
	}
	_ = os.RemoveAll(f.opts.Dir)
}
