package pgmsg_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// startPgBouncer runs a real PgBouncer in transaction pooling mode in front
// of the test server and returns its URL. Without the binary the test is
// skipped, except in CI (CI=true), whose .ci/run installs it.
func startPgBouncer(t *testing.T, serverURL string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr == nil {
			bin = "/usr/sbin/pgbouncer"
		} else if os.Getenv("CI") != "" {
			t.Fatal("pgbouncer is not installed but CI=true: .ci/run must install it (apt-get install pgbouncer)")
		} else {
			t.Skip("pgbouncer not installed (apt-get install pgbouncer); CI runs this test")
		}
	}
	u, err := url.Parse(serverURL)
	require.NoError(t, err)
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	bport := l.Addr().(*net.TCPAddr).Port
	l.Close()

	// Not t.TempDir: its parent is private to root, and pgbouncer runs as postgres.
	dir, err := os.MkdirTemp("", "pgmsg-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s/users.txt
pool_mode = transaction
max_client_conn = 200
default_pool_size = 10
ignore_startup_parameters = extra_float_digits,search_path
logfile = %s/pgbouncer.log
`, host, port, bport, dir, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.txt"), []byte(`"postgres" ""`+"\n"), 0o644))
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	if os.Geteuid() == 0 { // pgbouncer refuses to run as root
		pu, err := user.Lookup("postgres")
		require.NoError(t, err)
		uid, _ := strconv.Atoi(pu.Uid)
		gid, _ := strconv.Atoi(pu.Gid)
		require.NoError(t, os.Chown(dir, uid, gid))
		for _, f := range []string{"pgbouncer.ini", "users.txt"} {
			require.NoError(t, os.Chown(filepath.Join(dir, f), uid, gid))
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	out, err := os.Create(filepath.Join(dir, "stdout.log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_, _ = cmd.Process.Wait()
		out.Close()
	})
	bu := *u
	bu.Host = fmt.Sprintf("127.0.0.1:%d", bport)
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := pgx.Connect(context.Background(), bu.String())
		if err == nil {
			conn.Close(context.Background())
			return bu.String()
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer did not start: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The core log scenarios through PgBouncer in transaction pooling mode:
// no session state, no named prepared statements (cache_describe mode), no LISTEN
// (consumers poll).
func TestThroughPgBouncer(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	bouncer := startPgBouncer(t, tb.URL)
	cfg, err := pgxpool.ParseConfig(bouncer)
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(tb.ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	client, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: tb.Schema, DisableNotify: true, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	defer client.Close()
	ctx := tb.ctx

	_, err = client.CreateTopic(ctx, "bounced", pgmsg.TopicConfig{Partitions: 4})
	require.NoError(t, err)
	producer, err := client.NewProducer(nil)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				require.NoError(t, producer.ProduceSync(ctx, &pgmsg.Record{Topic: "bounced", Key: []byte(fmt.Sprint(w, i)), Value: []byte("v")}))
			}
		}()
	}
	wg.Wait()
	require.NoError(t, producer.Close(ctx))

	// Transactional outbox through the bouncer.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, client.PublishTx(ctx, tx, []*pgmsg.Record{{Topic: "bounced", Value: []byte("outbox")}}, nil))
	require.NoError(t, tx.Commit(ctx))

	// Two group members (membership heartbeats are plain transactions).
	var mu sync.Mutex
	seen := 0
	cctx, stop := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	for m := 0; m < 2; m++ {
		c, err := client.NewConsumer("bounced", "g", &pgmsg.ConsumerOpts{MemberID: fmt.Sprint("m", m),
			HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second})
		require.NoError(t, err)
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			defer c.Close()
			_ = c.Run(cctx, func(_ context.Context, cl *pgmsg.Claim) error {
				mu.Lock()
				seen += len(cl.Records)
				mu.Unlock()
				return nil
			})
		}()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen >= 401
	}, 30*time.Second, 20*time.Millisecond)
	stop()
	cwg.Wait()
	lags, err := client.ListGroups(ctx, "bounced", "g")
	require.NoError(t, err)
	for _, l := range lags {
		require.Zero(t, l.Lag)
	}
	// Maintenance tasks (not the leader election, which needs a session
	// advisory lock and therefore a direct connection) work too.
	_, err = client.MaintainOnce(ctx, nil)
	require.NoError(t, err)
}
