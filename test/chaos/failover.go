package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"time"

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
func (h *Harness) failover(ctx context.Context, switchover bool) (string, bool) {
	f := h.formation
	// Only from a settled formation: one node primary, the other its
	// synchronous standby. A fault that ended without (a step took longer
	// than failoverSettle), or the monitor's own failover of a primary it
	// counted unhealthy on a loaded machine, may have left it otherwise.
	old, err := h.settled(ctx)
	if err != nil {
		return "not settled: " + err.Error(), false
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

// settled waits up to failoverSettle until one node of the formation is
// primary and the other secondary (reported and assigned), and returns
// the primary.
func (h *Harness) settled(ctx context.Context) (*pgautofailover.Node, error) {
	f := h.formation
	ctx, cancel := context.WithTimeout(ctx, failoverSettle)
	defer cancel()
	for {
		st, err := f.States(ctx)
		if err == nil {
			for _, n := range f.Nodes {
				if st[n.Name] == "primary/primary" && st[f.Other(n).Name] == "secondary/secondary" {
					return n, nil
				}
			}
			err = fmt.Errorf("states %v", st)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
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
