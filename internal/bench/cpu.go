package bench

import (
	"context"
	"errors"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/procfs"
)

// cpuSample is the CPU time (user and system, seconds) spent so far by
// this process and by each PostgreSQL process serving the bench's
// database, for the CPU per record of a measured window.
type cpuSample struct {
	self float64
	pg   map[int]float64 // by pid; nil when not readable
}

// selfCPUSeconds is this process's CPU time: the driver's client code,
// and for ImplKafka with an in-process listener the listener as well as
// the franz-go clients.
func selfCPUSeconds() (float64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime), true
}

// pgCPU reads the CPU time of the server's backends of this database and
// its background processes (checkpointer, WAL writer, autovacuum ...),
// from /proc: only when the server runs on this machine and /proc is
// readable (root, or the server's own user), as for the throwaway
// PostgreSQL bench starts. On a shared server the background processes'
// time includes other databases' work.
func pgCPU(ctx context.Context, conn *pgx.Conn) map[int]float64 {
	if conn == nil {
		return nil
	}
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND (datname = current_database() OR datname IS NULL)`)
	if err != nil {
		return nil
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil
	}
	out := make(map[int]float64, len(pids))
	for _, pid := range pids {
		if s, _, err := cpuSeconds(int(pid), false); err == nil {
			out[int(pid)] = s
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func takeCPUSample(ctx context.Context, conn *pgx.Conn) cpuSample {
	s, _ := selfCPUSeconds()
	return cpuSample{self: s, pg: pgCPU(ctx, conn)}
}

// pgDelta is the PostgreSQL CPU time between two samples: each process
// alive at the end, less what it had spent at the start (a backend that
// started during the window counts whole; one that ended is lost).
func pgDelta(a, b cpuSample) (float64, bool) {
	if a.pg == nil || b.pg == nil {
		return 0, false
	}
	var d float64
	for pid, s := range b.pg {
		d += s - a.pg[pid]
	}
	return d, true
}

// cpuSeconds reads utime+stime (+ waited-for children's when children) of
// a process (all its threads) from /proc/PID/stat, in seconds (USER_HZ is
// 100 on Linux), and its parent's pid. The command name (field 2) is in
// parentheses and may hold spaces.
func cpuSeconds(pid int, children bool) (float64, int, error) {
	f, err := procfs.Stat(pid) // f[0] is state: field 3
	if err != nil {
		return 0, 0, err
	}
	if len(f) < 15 {
		return 0, 0, errors.New("bad stat")
	}
	ppid, _ := strconv.Atoi(f[1])
	var t float64
	last := 12 // utime (14), stime (15)
	if children {
		last = 14 // cutime (16), cstime (17)
	}
	for k := 11; k <= last; k++ {
		v, _ := strconv.ParseFloat(f[k], 64)
		t += v
	}
	return t / 100, ppid, nil
}

// serverCPU is the CPU seconds of a whole PostgreSQL server: the
// postmaster's own and its exited children's, plus its live children's
// (`pgmsg bench scale`, whose estate is the server's only work). pgCPU is
// the pubsub runs' narrower measure: this database's backends and the
// background processes, alive at both ends of the window.
type serverCPU struct{ postmaster int }

// findServerCPU finds the postmaster of pool's server when it runs on
// this machine (postmaster 0 when not).
func findServerCPU(ctx context.Context, pool *pgxpool.Pool) serverCPU {
	var pg serverCPU
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err == nil {
		if _, ppid, err := cpuSeconds(backend, false); err == nil {
			if procfs.Comm(ppid) == "postgres" {
				pg.postmaster = ppid
			}
		}
	}
	return pg
}

func (p serverCPU) read() float64 {
	if p.postmaster == 0 {
		return -1
	}
	total, _, err := cpuSeconds(p.postmaster, true)
	if err != nil {
		return -1
	}
	for _, pid := range procfs.Children(p.postmaster) {
		if t, _, err := cpuSeconds(pid, false); err == nil {
			total += t
		}
	}
	return total
}

// selfCPUOrNA is selfCPUSeconds, or -1 when it cannot be read.
func selfCPUOrNA() float64 {
	t, ok := selfCPUSeconds()
	if !ok {
		return -1
	}
	return t
}
