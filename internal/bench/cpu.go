package bench

import (
	"context"
	"syscall"

	"github.com/jackc/pgx/v5"
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
		if s, err := procCPUSeconds(int(pid)); err == nil {
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
