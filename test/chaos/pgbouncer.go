package chaos

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/pgmsg/pgmsg/internal/pgcluster"
)

// ErrNoPgBouncer is returned by StartBouncer when pgbouncer is not
// installed.
var ErrNoPgBouncer = errors.New("pgbouncer not installed (Debian: apt-get install pgbouncer)")

// FindPgBouncer returns pgbouncer's path.
func FindPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNoPgBouncer
}

// Bouncer is a PgBouncer in transaction pooling mode in front of a
// PostgreSQL server, which the harness kills and starts again on the same
// port. It runs as the server's user (pgbouncer refuses root).
type Bouncer struct {
	Port int
	bin  string
	dir  string
	cred *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartBouncer writes a configuration in dir (created) for a PgBouncer
// in front of host:port and starts it. The clients' statement_timeout
// and lock_timeout, which transaction pooling cannot take as startup
// parameters, are ignored; every server connection sets
// statement_timeout (5 s) and lock_timeout (1 s) itself.
func StartBouncer(dir, host string, port int) (*Bouncer, error) {
	bin, err := FindPgBouncer()
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Bouncer{Port: l.Addr().(*net.TCPAddr).Port, bin: bin, dir: dir}
	l.Close()
	cred, uid, gid, err := pgcluster.Credential()
	if err != nil {
		return nil, err
	}
	b.cred = cred
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d connect_query='SET statement_timeout = 5000; SET lock_timeout = 1000'
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s/users.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,search_path,statement_timeout,lock_timeout
server_login_retry = 1
logfile = %s/pgbouncer.log
`, host, port, b.Port, dir, dir)
	files := map[string]string{"pgbouncer.ini": ini, "users.txt": `"postgres" ""` + "\n"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	if cred != nil {
		for _, f := range []string{"", "pgbouncer.ini", "users.txt"} {
			if err := os.Chown(filepath.Join(dir, f), uid, gid); err != nil {
				return nil, err
			}
		}
	}
	return b, b.Start()
}

// Start runs pgbouncer and waits until it accepts connections.
func (b *Bouncer) Start() error {
	cmd := exec.Command(b.bin, filepath.Join(b.dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.mu.Lock()
	b.cmd, b.done = cmd, done
	b.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", b.Port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
			return fmt.Errorf("pgbouncer exited at start: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer did not start: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill ends pgbouncer at once (SIGKILL): every client connection breaks,
// whatever was in flight.
func (b *Bouncer) Kill() {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.cmd = nil
	b.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
}

// URL is the URL of database db through the bouncer, for clients in
// transaction mode: no named prepared statements kept across
// transactions (PgBouncer before 1.21 does not track them).
func (b *Bouncer) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&default_query_exec_mode=cache_describe", b.Port, db)
}
