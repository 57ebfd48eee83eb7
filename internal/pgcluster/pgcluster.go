// Package pgcluster runs a private PostgreSQL server from the machine's
// binaries: initdb into a data directory, then postgres on a free loopback
// port. The test harness uses a throwaway one; `pgmsg dev` keeps one in a
// data directory. PostgreSQL refuses to run as root, so as root the server
// runs as the unprivileged "postgres" user.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries is returned when no PostgreSQL server binaries are found.
var ErrNoBinaries = errors.New("pgcluster: PostgreSQL server binaries (initdb, postgres) not found: " +
	"install them (Debian/Ubuntu: apt-get install -y postgresql; macOS: brew install postgresql), " +
	"put their directory on PATH or in PGMSG_PG_BIN, or set DATABASE_URL to use an existing server")

// FindBinaries returns a directory holding initdb and postgres: $PGMSG_PG_BIN,
// else the newest /usr/lib/postgresql/*/bin, else PATH.
func FindBinaries() (string, error) {
	ok := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv("PGMSG_PG_BIN"); dir != "" {
		if ok(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("%w (PGMSG_PG_BIN=%s lacks them)", ErrNoBinaries, dir)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if ok(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil && ok(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", ErrNoBinaries
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Options configure Start.
type Options struct {
	// DataDir to use; created and initialised when empty or missing.
	// Default: a temporary directory removed by Stop.
	DataDir string
	// Port to listen on (127.0.0.1). Default: a free port.
	Port int
	// Settings are extra server settings (-c name=value).
	Settings map[string]string
	// PasswordAuth makes TCP connections authenticate with a password
	// (scram-sha-256) instead of trust: a random one is generated on first
	// start, kept in DataDir/pgmsg-password (mode 0600, readable only by
	// the server's user and root) and set on every start, and URL carries
	// it. The Unix socket, in the private data directory, stays trusted.
	// Default false: trust, for throwaway test clusters.
	PasswordAuth bool
}

// URL is the URL of a cluster on port, as superuser "postgres" to
// database "postgres", with password unless "" (trust).
func URL(port int, password string) string {
	if password == "" {
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	}
	// The password is hex: nothing to escape, in the URL or in SQL.
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", password, port)
}

// PasswordFile is the file in the data directory that holds the password
// of a cluster started with PasswordAuth.
const PasswordFile = "pgmsg-password"

// Cluster is a running server.
type Cluster struct {
	// URL connects as superuser "postgres" to database "postgres".
	URL     string
	DataDir string
	Port    int
	cmd     *exec.Cmd
	temp    bool
	exited  chan struct{}
	logFile string
}

// Start initialises (if needed) and starts a server, waiting until it
// accepts connections.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, cred, uid, gid, err := binariesAndCredential()
	if err != nil {
		return nil, err
	}
	c := &Cluster{DataDir: opts.DataDir, Port: opts.Port, exited: make(chan struct{})}
	if c.DataDir == "" {
		dir, err := os.MkdirTemp("", "pgmsg-pg-")
		if err != nil {
			return nil, err
		}
		c.DataDir, c.temp = dir, true
	}
	if c.DataDir, err = filepath.Abs(c.DataDir); err != nil {
		return nil, err
	}
	if err := prepareDataDir(c.DataDir, uid, gid); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(filepath.Join(c.DataDir, "PG_VERSION")); err != nil {
		auth := []string{"--auth=trust"}
		if opts.PasswordAuth {
			auth = []string{"--auth-local=trust", "--auth-host=scram-sha-256"}
		}
		initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), append([]string{"-D", c.DataDir, "-U", "postgres",
			"--encoding=UTF8", "--locale=C", "--no-sync"}, auth...)...)
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		initdb.Dir = c.DataDir
		if out, err := initdb.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("pgcluster: initdb %s: %w\n%s", c.DataDir, err, out)
		}
	}
	password := ""
	if opts.PasswordAuth {
		if password, err = ensurePassword(c.DataDir, uid, gid); err != nil {
			return nil, err
		}
		// A data directory made before PasswordAuth (or by hand) may trust
		// TCP connections: its pg_hba.conf is rewritten on every start.
		if err := writePrivateFile(c.DataDir, "pg_hba.conf", []byte(passwordHBA), uid, gid); err != nil {
			return nil, err
		}
	}
	if c.Port == 0 {
		if c.Port, err = freePort(); err != nil {
			return nil, err
		}
	}
	args := []string{"-D", c.DataDir, "-p", strconv.Itoa(c.Port), "-k", c.DataDir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"}
	for k, v := range opts.Settings {
		args = append(args, "-c", k+"="+v)
	}
	c.logFile = filepath.Join(c.DataDir, "server.log")
	logf, err := openLog(c.logFile, uid, gid)
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command(filepath.Join(bin, "postgres"), args...)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	c.cmd.Dir = c.DataDir
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	go func() {
		_ = c.cmd.Wait()
		logf.Close()
		close(c.exited)
	}()
	c.URL = URL(c.Port, "")
	if password != "" {
		c.URL = URL(c.Port, password)
		err = c.setPassword(ctx, password)
	} else {
		err = c.waitReady(ctx, c.URL)
	}
	if err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// passwordHBA is the pg_hba.conf of a PasswordAuth cluster: the Unix
// socket lives in the 0700 data directory, so only the server's user (and
// root) can reach it; TCP needs the password.
const passwordHBA = `# Written by pgmsg (pgcluster) on every start.
local all all trust
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
`

// setPassword waits for the server on its Unix socket, sets the password
// of "postgres", and checks that the URL (TCP, with the password) works.
func (c *Cluster) setPassword(ctx context.Context, password string) error {
	quote := func(s string) string {
		return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
	}
	sock := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", quote(c.DataDir), c.Port)
	if err := c.waitReady(ctx, sock); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, sock)
	if err != nil {
		return fmt.Errorf("pgcluster: connect on the Unix socket: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET password_encryption = 'scram-sha-256'"); err != nil {
		return fmt.Errorf("pgcluster: set the password: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER ROLE postgres PASSWORD '"+password+"'"); err != nil {
		return fmt.Errorf("pgcluster: set the password: %w", err)
	}
	tcp, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		return fmt.Errorf("pgcluster: connect with the password: %w", err)
	}
	return tcp.Close(ctx)
}

func (c *Cluster) waitReady(ctx context.Context, connString string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, connString)
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("pgcluster: postgres exited during start-up:\n%s", c.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgcluster: postgres not ready after 60s: %w\n%s", err, c.logTail())
		}
	}
}

func (c *Cluster) logTail() string {
	b, _ := os.ReadFile(c.logFile)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Stop shuts the server down (fast shutdown) and removes a temporary data
// directory.
func (c *Cluster) Stop() error {
	if c.cmd != nil && c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	if c.temp {
		return os.RemoveAll(c.DataDir)
	}
	return nil
}

// Exited is closed when the server process ends.
func (c *Cluster) Exited() <-chan struct{} { return c.exited }

// binariesAndCredential returns the server binaries' directory and who
// runs them (credential).
func binariesAndCredential() (string, *syscall.Credential, int, int, error) {
	bin, err := FindBinaries()
	if err != nil {
		return "", nil, 0, 0, err
	}
	cred, uid, gid, err := credential()
	return bin, cred, uid, gid, err
}

// credential returns who runs the server: nil (the current user) unless we
// are root, then the "postgres" user (or $PGMSG_PG_USER).
func credential() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, -1, -1, nil
	}
	name := os.Getenv("PGMSG_PG_USER")
	if name == "" {
		name = "postgres"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("pgcluster: running as root, PostgreSQL must run as an unprivileged user, "+
			"but user %q does not exist (create it, e.g. `useradd --system postgres`, or set PGMSG_PG_USER): %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Describe is a one-line description for logs.
func (c *Cluster) Describe() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "PostgreSQL on 127.0.0.1:%d, data in %s", c.Port, c.DataDir)
	return strings.TrimSpace(b.String())
}

// StartStandby starts a streaming replica of primary: a base backup of it
// (pg_basebackup -R, which writes the standby's connection settings) in a
// temporary data directory that Stop removes, then a hot standby on a free
// port. Settings apply to the standby. The primary must allow replication
// connections, as an initdb default does.
func StartStandby(ctx context.Context, primary *Cluster, opts Options) (*Cluster, error) {
	bin, cred, uid, gid, err := binariesAndCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgmsg-standby-")
	if err != nil {
		return nil, err
	}
	if err := prepareDataDir(dir, uid, gid); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	backup := exec.CommandContext(ctx, filepath.Join(bin, "pg_basebackup"), "-D", dir, "-R", "-X", "stream", "--no-sync",
		"-d", fmt.Sprintf("host=127.0.0.1 port=%d user=postgres", primary.Port))
	backup.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	backup.Dir = dir
	if out, err := backup.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: pg_basebackup of %s: %w\n%s", primary.Describe(), err, out)
	}
	c, err := Start(ctx, Options{DataDir: dir, Settings: opts.Settings})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c.temp = true
	return c, nil
}

// Kill ends the server and every backend at once (SIGKILL to its process
// group), as a crash would; Stop then only removes a temporary data
// directory.
func (c *Cluster) Kill() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	<-c.exited
}

// Credential returns who runs servers (nil: the current user; as root the
// "postgres" user or $PGMSG_PG_USER) with its uid and gid, for harnesses
// that start other server tools as that user (internal/pgautofailover).
func Credential() (*syscall.Credential, int, int, error) { return credential() }
