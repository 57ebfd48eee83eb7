package bench

import (
	"context"
	"runtime"

	"github.com/jackc/pgx/v5"
)

// ServerInfo describes the machine and the server settings a run used, so
// that every figure carries them.
type ServerInfo struct {
	Version  string            `json:"version"`
	Settings map[string]string `json:"settings"`
	CPUs     int               `json:"client_cpus"`
	Go       string            `json:"go"`
}

// infoSettings are the server settings that move the figures.
var infoSettings = []string{
	"shared_buffers", "max_wal_size", "synchronous_commit", "fsync", "wal_compression",
	"checkpoint_timeout", "max_connections", "commit_delay", "wal_buffers",
}

// Describe reads the server version and settings.
func Describe(ctx context.Context, url string) (*ServerInfo, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	info := &ServerInfo{Settings: map[string]string{}, CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&info.Version); err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY($1)`, infoSettings)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		info.Settings[k] = v
	}
	return info, rows.Err()
}

// Checkpoint flushes the previous run's dirty pages so that it does not
// slow the next one down (best effort: it needs a privileged role).
func Checkpoint(ctx context.Context, url string) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "CHECKPOINT")
}
