package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/pgautofailover"
)

// failoverSettle bounds one failover fault: the promotion, the old
// primary's return as the standby (pg_rewind included) and the
// maintenance leader's move, on a loaded machine.
const failoverSettle = 6 * time.Minute

// startFormation starts a pg_auto_failover monitor, a primary and its
// synchronous standby (pg_auto_failover's default: synchronous_commit on,
// synchronous_standby_names 'ANY 1 (...)'), on free ports, and opens the
// harness's pool on the formation's multi-host URL.
func (h *Harness) startFormation(ctx context.Context) error {
	f, err := pgautofailover.Start(ctx, pgautofailover.Options{Dir: filepath.Join(h.dir, "formation"), Patient: true, Log: h.o.Logf})
	if err != nil {
		return err
	}
	h.formation = f
	h.url = f.URL("postgres")
	return h.connectAdmin(ctx, h.url)
}

// failover makes the standby the primary: by killing the primary
// (SIGKILL of its pg_autoctl keeper and postmaster) and, once the standby
// is writable, starting the old primary again, or by a clean switchover.
// It returns once the old primary is the new one's synchronous standby
// again and a maintenance agent leads on the new primary, so that the
// next fault starts from a formation that loses nothing.
//
// It injects nothing unless the formation is settled (settled): skipped
// then, reported by the caller as such, not as a failed fault.
func (h *Harness) failover(ctx context.Context, switchover bool) (detail string, ok, skipped bool) {
	detail, ok = h.failoverSettled(ctx, switchover, &skipped)
	return detail, ok, skipped
}

func (h *Harness) failoverSettled(ctx context.Context, switchover bool, skipped *bool) (string, bool) {
	f := h.formation
	// Only from a settled formation: one node primary, the other its
	// synchronous standby, healthy, for settleHold. A fault that ended
	// without (a step took longer than failoverSettle), or the monitor's
	// own failover of a primary it counted unhealthy on a loaded machine,
	// may have left it otherwise.
	waited := time.Now()
	old, err := h.settled(ctx)
	if err != nil {
		*skipped = true
		return fmt.Sprintf("formation not settled within %s: %v", since(waited), err), false
	}
	nw := f.Other(old)
	ctx, cancel := context.WithTimeout(ctx, failoverSettle)
	defer cancel()
	start := time.Now()
	var detail string
	if switchover {
		if err := f.Switchover(ctx); err != nil {
			return err.Error(), false
		}
		detail = fmt.Sprintf("switchover %s -> %s returned after %s", old.Name, nw.Name, since(start))
	} else {
		f.Kill(old)
		// The killed node comes back whatever happens next: a formation
		// left with one node would lose everything at the next kill.
		err := f.WaitStates(ctx, map[string]string{nw.Name: "wait_primary"})
		detail = fmt.Sprintf("%s killed; %s promoted and writable after %s", old.Name, nw.Name, since(start))
		if err != nil {
			detail = fmt.Sprintf("%s killed; %v", old.Name, err)
		} else {
			time.Sleep(time.Duration(rand.Int64N(int64(time.Second))))
		}
		if rerr := f.Restart(old); rerr != nil {
			h.addUnplanned("failover: restart " + old.Name + ": " + rerr.Error())
			return detail + "; restart: " + rerr.Error(), false
		}
		if err != nil {
			return detail, false
		}
	}
	if err := f.WaitStates(ctx, map[string]string{nw.Name: "primary", old.Name: "secondary"}); err != nil {
		h.addUnplanned("failover: " + err.Error())
		return detail + "; " + err.Error(), false
	}
	detail += fmt.Sprintf("; %s its synchronous standby after %s", old.Name, since(start))
	if h.o.MaintenanceAgents > 0 {
		if d, ok := h.waitLeader(ctx, nw); ok {
			detail += fmt.Sprintf("; maintenance leader on %s after %s", nw.Name, d)
		} else {
			h.mu.Lock()
			h.leaderStuck = append(h.leaderStuck, fmt.Sprintf("no maintenance leader on %s %s after the failover at %s",
				nw.Name, failoverSettle, start.Format("15:04:05")))
			h.mu.Unlock()
		}
	}
	return detail, true
}

// settleHold is how long the formation must have been settled (settle)
// before a failover fault is injected. A switchover 9 s after the
// formation formed, under load 40-52, met the monitor's health check of
// a standby it had not yet counted healthy: the old primary went to
// wait_primary, dropped synchronous replication, and a split brain
// followed.
const settleHold = 5 * time.Second

// settled waits up to failoverSettle until the formation has been
// settled for settleHold without a break, and returns the primary.
// Settled: one node primary and the other secondary (reported and
// assigned), the monitor counts the secondary healthy, and the primary
// replicates to it synchronously (pg_stat_replication: streaming,
// sync_state sync or quorum).
func (h *Harness) settled(ctx context.Context) (*pgautofailover.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, failoverSettle)
	defer cancel()
	var from time.Time // since when the formation has been settled, without a break
	for {
		primary, err := h.settledNow(ctx)
		switch {
		case err != nil:
			from = time.Time{}
		case from.IsZero():
			from = time.Now()
		case time.Since(from) >= settleHold:
			return primary, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("settled only since %s", from.Format("15:04:05.000"))
			}
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// settledNow returns the primary if the formation is settled now (see
// settled), or why not.
func (h *Harness) settledNow(ctx context.Context) (*pgautofailover.Node, error) {
	f := h.formation
	st, err := f.States(ctx)
	if err != nil {
		return nil, err
	}
	var primary *pgautofailover.Node
	for _, n := range f.Nodes {
		if st[n.Name] == "primary/primary" && st[f.Other(n).Name] == "secondary/secondary" {
			primary = n
		}
	}
	if primary == nil {
		return nil, fmt.Errorf("states %v", st)
	}
	standby := f.Other(primary)
	port := postmasterPort(filepath.Join(h.dir, "formation", "monitor"))
	if port == 0 {
		return nil, fmt.Errorf("the monitor's port: postmaster.pid unreadable")
	}
	var health int
	var repState string
	if err := queryOne(ctx, port, "pg_auto_failover",
		`SELECT health, reportedrepstate::text FROM pgautofailover.node WHERE nodename = $1`, []any{standby.Name}, &health, &repState); err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	if health != 1 {
		return nil, fmt.Errorf("the monitor counts %s's health %d (1: healthy), replication state %s", standby.Name, health, repState)
	}
	var syncStandbys int
	if err := queryOne(ctx, primary.Port, "postgres", `SELECT count(*) FROM pg_catalog.pg_stat_replication
		WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')`, nil, &syncStandbys); err != nil {
		return nil, fmt.Errorf("primary %s: %w", primary.Name, err)
	}
	if syncStandbys == 0 {
		return nil, fmt.Errorf("primary %s has no synchronous standby streaming (monitor: %s)", primary.Name, repState)
	}
	return primary, nil
}

// queryOne runs one single-row query on db on port, on a connection of its
// own (the harness's pool follows the writable node, not a given one).
func queryOne(ctx context.Context, port int, db, sql string, args []any, dest ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2&application_name=%s", port, db, harnessApp))
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	return c.QueryRow(ctx, sql, args...).Scan(dest...)
}

// postmasterPort is the port in the postmaster.pid of dataDir (its
// fourth line), 0 when unreadable.
func postmasterPort(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0
	}
	port, _ := strconv.Atoi(strings.TrimSpace(lines[3]))
	return port
}

// waitLeader waits until a maintenance agent holds its leader lock (a
// session advisory lock) on n, and returns how long since the call.
func (h *Harness) waitLeader(ctx context.Context, n *pgautofailover.Node) (time.Duration, bool) {
	start := time.Now()
	for {
		var leaders int
		err := h.admin.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a USING (pid)
			WHERE l.locktype = 'advisory' AND l.granted AND a.application_name LIKE 'chaosagent maint%'
			  AND pg_catalog.inet_server_port() = $1`, n.Port).Scan(&leaders)
		if err == nil && leaders > 0 {
			return since(start), true
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (h *Harness) addUnplanned(s string) {
	h.mu.Lock()
	h.unplanned = append(h.unplanned, s)
	h.mu.Unlock()
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
