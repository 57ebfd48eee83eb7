package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// newBouncer starts a Bouncer in front of host:port for the test; without
// pgbouncer the test is skipped, or fails when PGMSG_REQUIRE_PGBOUNCER=1
// (CI, whose .ci/run installs it).
func newBouncer(t *testing.T, host, port string) *Bouncer {
	t.Helper()
	if _, err := FindPgBouncer(); err != nil {
		if os.Getenv("PGMSG_REQUIRE_PGBOUNCER") == "1" {
			t.Fatalf("PGMSG_REQUIRE_PGBOUNCER=1: %v", err)
		}
		t.Skipf("%v; CI sets PGMSG_REQUIRE_PGBOUNCER=1", err)
	}
	// Not t.TempDir: its parent is private to root, and pgbouncer runs as postgres.
	dir, err := os.MkdirTemp("", "pgmsg-chaos-pgbouncer-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	b, err := StartBouncer(filepath.Join(dir, "b"), host, p)
	require.NoError(t, err)
	t.Cleanup(b.Kill)
	return b
}

const bouncedApp = "pgmsg-chaos-pgbouncer"

// PgBouncer in transaction pooling mode between pgmsg and PostgreSQL,
// while PgBouncer is killed and restarted and while PostgreSQL's backends
// (PgBouncer's server connections) are terminated: publishers (idempotent,
// retried until acknowledged, and plain), a consumer group and a worker,
// all through PgBouncer, lose nothing acknowledged: every acknowledged
// record is in the log at the offset it was given, the log has no gap, the
// group reaches the end with every offset handled, and every acknowledged
// job is completed.
func TestPgBouncerFaults(t *testing.T) {
	b := newChaosEnv(t)
	ctx := b.Ctx
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	bn := newBouncer(t, u.Hostname(), port)
	bu := *u
	bu.Host = fmt.Sprintf("127.0.0.1:%d", bn.Port)
	cfg, err := pgxpool.ParseConfig(bu.String())
	require.NoError(t, err)
	// Transaction mode: no named prepared statements across transactions
	// (PgBouncer before 1.21), no session state, no LISTEN.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	cfg.MaxConns = 12
	// PgBouncer passes application_name on to its server connections:
	// the faults below find them by it.
	cfg.ConnConfig.RuntimeParams["application_name"] = bouncedApp
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	// The clients' warnings while PgBouncer is down (one a call) would
	// drown the test's log.
	c, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: b.Schema, DisableNotify: true,
		PollInterval: 20 * time.Millisecond, ClaimLease: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer c.Close()
	_, err = b.Client.CreateTopic(ctx, "bounced", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	_, err = b.Client.CreateQueue(ctx, "bounced", pgmsg.QueueConfig{Lease: 2 * time.Second, MaxAttempts: 100,
		RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond})
	require.NoError(t, err)

	type pos struct {
		p int32
		o int64
	}
	var mu sync.Mutex
	acked := map[string]pos{}
	jobs := map[int64]bool{}
	handled := map[pos]string{}
	done := map[int64]bool{}
	var failedCalls atomic.Int64

	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	pubCtx, stopPub := context.WithCancel(wctx)
	var seq atomic.Int64
	ack := func(recs []*pgmsg.Record) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range recs {
			acked[string(r.Value)] = pos{r.Partition, r.Offset}
		}
	}
	// A plain publisher: an error means the outcome is unknown; nothing
	// is counted.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for pubCtx.Err() == nil {
			recs := []*pgmsg.Record{{Topic: "bounced", Value: []byte(fmt.Sprint("p-", seq.Add(1)))},
				{Topic: "bounced", Value: []byte(fmt.Sprint("p-", seq.Add(1)))}}
			cctx, cancel := context.WithTimeout(pubCtx, 3*time.Second)
			err := c.Publish(cctx, recs, nil)
			cancel()
			if err != nil {
				failedCalls.Add(1)
				time.Sleep(20 * time.Millisecond)
				continue
			}
			ack(recs)
		}
	}()
	// An idempotent publisher: each batch is retried, same sequence,
	// until it is acknowledged (stored once even when an earlier attempt
	// was stored and its answer lost).
	wg.Add(1)
	go func() {
		defer wg.Done()
		var next int64
		for n := 0; pubCtx.Err() == nil; n++ {
			recs := []*pgmsg.Record{{Topic: "bounced", Value: []byte(fmt.Sprint("i-", n))}}
			for pubCtx.Err() == nil {
				cctx, cancel := context.WithTimeout(pubCtx, 3*time.Second)
				_, err := c.PublishIdempotent(cctx, "bouncer-test", next, recs, nil)
				cancel()
				if err == nil {
					ack(recs)
					break
				}
				failedCalls.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
			next++
		}
	}()
	// An enqueuer.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for pubCtx.Err() == nil {
			cctx, cancel := context.WithTimeout(pubCtx, 3*time.Second)
			res, err := c.Enqueue(cctx, "bounced", pgmsg.EnqueueParams{Payload: []byte(`{}`)}, nil)
			cancel()
			if err != nil {
				failedCalls.Add(1)
				time.Sleep(20 * time.Millisecond)
				continue
			}
			mu.Lock()
			jobs[res.ID] = true
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	// A worker and two group members, restarted after an error as a
	// supervisor would.
	supervise := func(run func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				if err := run(); err != nil && wctx.Err() == nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	w, err := c.NewWorker("bounced", func(_ context.Context, j *pgmsg.Job) error {
		mu.Lock()
		done[j.ID] = true
		mu.Unlock()
		return nil
	}, nil)
	require.NoError(t, err)
	supervise(func() error { return w.Run(wctx) })
	for m := range 2 {
		supervise(func() error {
			cn, err := c.NewConsumer("bounced", "g", &pgmsg.ConsumerOpts{MemberID: fmt.Sprint("m", m),
				HeartbeatInterval: 200 * time.Millisecond, SessionTimeout: 3 * time.Second})
			if err != nil {
				return err
			}
			defer cn.Close()
			return cn.Run(wctx, func(_ context.Context, cl *pgmsg.Claim) error {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range cl.Records {
					handled[pos{r.Partition, r.Offset}] = string(r.Value)
				}
				return nil
			})
		})
	}
	progress := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) + len(done)
	}
	waitProgress := func(what string) {
		t.Helper()
		from := progress()
		waitFor(t, ctx, what, func() bool { return progress() >= from+50 })
	}

	waitProgress("load before the faults")
	const rounds = 3
	terminated := 0
	for i := range rounds {
		bn.Kill()
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, bn.Start())
		waitProgress(fmt.Sprintf("progress after PgBouncer restart %d", i+1))
		var n int
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(pg_catalog.pg_terminate_backend(pid)) FROM pg_catalog.pg_stat_activity
			WHERE application_name = $1`, bouncedApp).Scan(&n))
		terminated += n
		waitProgress(fmt.Sprintf("progress after terminating %d backends", n))
	}
	stopPub()
	// Drain: the group reaches the end, every acknowledged job is done.
	waitFor(t, ctx, "the group and the worker to catch up", func() bool {
		gs, err := b.Client.ListGroups(ctx, "bounced", "g")
		if err != nil || len(gs) != 2 || gs[0].Lag != 0 || gs[1].Lag != 0 {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		for id := range jobs {
			if !done[id] {
				return false
			}
		}
		return true
	})
	stop()
	wg.Wait()

	// What is stored, read directly.
	stored := map[pos]string{}
	for p := range int32(2) {
		for from := int64(0); ; {
			recs, err := b.Client.Fetch(ctx, "bounced", p, from, 1000)
			require.NoError(t, err)
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				require.Equal(t, from, r.Offset, "offset gap in partition %d", p)
				stored[pos{p, r.Offset}] = string(r.Value)
				from = r.Offset + 1
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	lost, dup := 0, 0
	values := map[string]int{}
	for _, v := range stored {
		values[v]++
	}
	for v, at := range acked {
		if stored[at] != v {
			lost++
		}
		if values[v] > 1 && v[0] == 'i' {
			dup++
		}
	}
	notHandled := 0
	for at, v := range stored {
		if handled[at] != v {
			notHandled++
		}
	}
	t.Logf("PgBouncer killed and restarted %d times, %d backends terminated; %d records acknowledged (%d stored), %d jobs acknowledged, %d calls failed; lost %d, idempotent stored twice %d, stored but not handled by the group %d",
		rounds, terminated, len(acked), len(stored), len(jobs), failedCalls.Load(), lost, dup, notHandled)
	require.Positive(t, terminated, "the faults hit server connections")
	require.Zero(t, lost, "acknowledged records lost")
	require.Zero(t, dup, "an idempotent batch stored twice")
	require.Zero(t, notHandled, "the group skipped a record")
	for id := range jobs {
		require.True(t, done[id], "job %d acknowledged but never completed", id)
	}
}
