package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

// TestChaosNetwork is the bounded run of the slow and broken network: the
// agents (producers idempotent and not, groups, workers, the HTTP
// server's clients) go through the proxy while it cuts, stalls, slows and
// blackholes their connections and cuts them between a COMMIT's (or any
// statement's) answer and the client, each kind at least once, for a few
// seconds each. The checker's invariants must hold: nothing acknowledged
// lost, no offset gap, no record processed twice past a commit, no job
// completed twice.
func TestChaosNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped in -short mode")
	}
	requireServerBinaries(t)
	res := runChaosResult(t, Options{
		Duration:       envDuration(t, "PGMSG_CHAOS_NETWORK_DURATION", 15*time.Second),
		FaultsPerKind:  1,
		Faults:         NetworkFaults,
		FaultMin:       700 * time.Millisecond,
		FaultMax:       1200 * time.Millisecond,
		Producers:      1,
		CopyProducers:  1,
		AsyncProducers: 1,
		Partitions:     2,
		Consumers:      2,
		TxConsumers:    1,
		Enqueuers:      1,
		Workers:        2,
		HTTPProducers:  1,
		HTTPConsumers:  1,
		Rate:           100,
	})
	for _, k := range NetworkFaults {
		if res.Faults[k] == nil || res.Faults[k].Injected == 0 {
			t.Errorf("fault %s was never injected", k)
		}
	}
	require.Positive(t, res.Report.Published)
	require.Positive(t, res.Report.JobsCompleted)
}

// chaosEnv is a test's schema of its own and a Client on it
// (pgmsgtest.Env), and a context that ends after three minutes.
type chaosEnv struct {
	*pgmsgtest.Env
	Ctx context.Context
}

func newChaosEnv(t *testing.T) *chaosEnv {
	t.Helper()
	return &chaosEnv{Env: pgmsgtest.New(t, pgtest.Pool(t, nil), nil), Ctx: pgtest.Context(t, 3*time.Minute)}
}

// proxied is a Client in a test schema of its own that reaches PostgreSQL
// through a Proxy.
func proxied(t *testing.T, cfg pgmsg.Config) (*chaosEnv, *Proxy, *pgmsg.Client) {
	t.Helper()
	b := newChaosEnv(t)
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	p, err := NewProxy(u.Hostname() + ":" + port)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	u.Host = p.Addr()
	q := u.Query()
	q.Set("sslmode", "disable") // the proxy frames the plain protocol
	u.RawQuery = q.Encode()
	pcfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	pcfg.MaxConns = 8
	pcfg.ConnConfig.RuntimeParams["search_path"] = ""
	pool, err := pgxpool.NewWithConfig(b.Ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg.Schema = b.Schema
	if cfg.PollInterval == 0 {
		cfg.PollInterval = pgmsgtest.PollInterval
	}
	c, err := pgmsg.NewClient(pool, &cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return b, p, c
}

// A link that is slow (50 to 200 ms each way, every exchange) but whose
// round trips stay well under the lease loses no lease: a job that runs
// for 2.5 leases is extended all along and completed on its first
// attempt, a group member keeps its session (no partition lost) and its
// claims, whose handler runs past the lease, are extended and committed:
// every record is handled once.
func TestLeasesSurviveSlowLink(t *testing.T) {
	const lease = 3 * time.Second
	b, p, c := proxied(t, pgmsg.Config{ClaimLease: lease})
	lo, hi := 50*time.Millisecond, 200*time.Millisecond
	p.SetLatency(lo, hi)
	defer p.SetLatency(0, 0)
	start := time.Now()
	require.NoError(t, c.Pool().QueryRow(b.Ctx, "SELECT 1").Scan(new(int)))
	// The delay is the proxy's sleep, in both directions: a lower bound
	// that holds on any machine.
	require.GreaterOrEqual(t, time.Since(start), 2*lo, "the proxy delays the round trip")
	leasesHold(t, b.Ctx, c, lease)
}

// leasesHold checks, on c, that no lease is lost: a job that runs for 2.5
// leases is extended all along and completed on its first attempt, and a
// group member keeps its session (no partition lost) and its claims,
// whose handler runs past the lease, are extended and committed, every
// record handled once.
func leasesHold(t *testing.T, ctx context.Context, c *pgmsg.Client, lease time.Duration) {
	t.Helper()
	_, err := c.CreateTopic(ctx, "slow", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	_, err = c.CreateQueue(ctx, "slow", pgmsg.QueueConfig{Lease: lease, MaxAttempts: 5})
	require.NoError(t, err)

	var recs []*pgmsg.Record
	for i := range 6 {
		recs = append(recs, &pgmsg.Record{Topic: "slow", Value: []byte(fmt.Sprint(i))})
	}
	require.NoError(t, c.Publish(ctx, recs, nil))
	job, err := c.Enqueue(ctx, "slow", pgmsg.EnqueueParams{Payload: []byte(`{}`)}, nil)
	require.NoError(t, err)

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var attempts, jobDone atomic.Int64
	w, err := c.NewWorker("slow", func(jctx context.Context, j *pgmsg.Job) error {
		attempts.Add(1)
		select {
		case <-time.After(lease * 5 / 2):
		case <-jctx.Done():
			return context.Cause(jctx)
		}
		jobDone.Add(1)
		return nil
	}, &pgmsg.WorkerOpts{Concurrency: 1})
	require.NoError(t, err)
	wg.Add(1)
	go func() { defer wg.Done(); _ = w.Run(wctx) }()

	var lost atomic.Int64
	var mu sync.Mutex
	handled := map[int64]int{}
	cons, err := c.NewConsumer("slow", "g", &pgmsg.ConsumerOpts{Claim: pgmsg.ClaimOpts{MaxRecords: 3},
		HeartbeatInterval: time.Second, SessionTimeout: 2 * lease,
		OnLost: func(string, []int32) { lost.Add(1) }})
	require.NoError(t, err)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cons.Close()
		_ = cons.Run(wctx, func(hctx context.Context, cl *pgmsg.Claim) error {
			select { // past the lease: the claim must be extended
			case <-time.After(lease + lease/2):
			case <-hctx.Done():
				return context.Cause(hctx)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range cl.Records {
				handled[r.Offset]++
			}
			return nil
		})
	}()

	waitFor(t, ctx, "the job and the records handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return jobDone.Load() == 1 && len(handled) == len(recs)
	})
	// Committed: the group's lag is 0.
	waitFor(t, ctx, "the last commit", func() bool {
		gs, err := c.ListGroups(ctx, "slow", "g")
		return err == nil && len(gs) == 1 && gs[0].Lag == 0
	})
	stop()
	wg.Wait()

	j, err := c.GetJob(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), attempts.Load(), "the job ran once: its lease was never lost")
	require.Equal(t, 1, j.Attempt)
	require.Zero(t, lost.Load(), "no partition lost to a session expiry")
	mu.Lock()
	defer mu.Unlock()
	for off, n := range handled {
		require.Equal(t, 1, n, "offset %d handled %d times: a claim was lost", off, n)
	}
}

// Calls stuck on a dead link (every byte swallowed, the connections
// open, as behind a partition no keepalive noticed yet) end when their
// context does, with its error, while the link is still dead: a publish,
// an idempotent publish, an enqueue, a claim and a fetch, each with a
// deadline; and a worker and a consumer stop when their context is
// cancelled.
func TestStuckCallsEndWithTheirContext(t *testing.T) {
	b, p, c := proxied(t, pgmsg.Config{})
	ctx := b.Ctx
	_, err := b.Client.CreateTopic(ctx, "stuck", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	_, err = b.Client.CreateQueue(ctx, "stuck", pgmsg.QueueConfig{})
	require.NoError(t, err)
	// Warm the client's caches and connections up through the proxy.
	require.NoError(t, c.Publish(ctx, []*pgmsg.Record{{Topic: "stuck", Value: []byte("a")}}, nil))

	var stalled atomic.Bool
	stalled.Store(true)
	stallDone := make(chan struct{})
	go func() {
		defer close(stallDone)
		p.Stall(8 * time.Second)
		stalled.Store(false)
	}()
	defer func() { <-stallDone }()
	time.Sleep(50 * time.Millisecond) // the stall is on

	calls := map[string]func(context.Context) error{
		"Publish": func(ctx context.Context) error {
			return c.Publish(ctx, []*pgmsg.Record{{Topic: "stuck", Value: []byte("b")}}, nil)
		},
		"PublishIdempotent": func(ctx context.Context) error {
			_, err := c.PublishIdempotent(ctx, "p", 0, []*pgmsg.Record{{Topic: "stuck", Value: []byte("c")}}, nil)
			return err
		},
		"Enqueue": func(ctx context.Context) error {
			_, err := c.Enqueue(ctx, "stuck", pgmsg.EnqueueParams{Payload: json.RawMessage(`{}`)}, nil)
			return err
		},
		"Claim": func(ctx context.Context) error {
			_, err := c.Claim(ctx, "stuck", "g", nil)
			return err
		},
		"Fetch": func(ctx context.Context) error {
			_, err := c.Fetch(ctx, "stuck", 0, 0, 10)
			return err
		},
		"Worker.Run": func(ctx context.Context) error {
			w, err := c.NewWorker("stuck", func(context.Context, *pgmsg.Job) error { return nil }, nil)
			if err != nil {
				return err
			}
			return w.Run(ctx)
		},
		"Consumer.Run": func(ctx context.Context) error {
			cn, err := c.NewConsumer("stuck", "g2", nil)
			if err != nil {
				return err
			}
			defer cn.Close()
			return cn.Run(ctx, func(context.Context, *pgmsg.Claim) error { return nil })
		},
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[string]error{}
	returnedStalled := map[string]bool{}
	for name, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			err := call(cctx)
			st := stalled.Load()
			mu.Lock()
			results[name], returnedStalled[name] = err, st
			mu.Unlock()
		}()
	}
	wg.Wait()
	for name := range calls {
		err := results[name]
		t.Logf("%s: %v", name, err)
		require.True(t, returnedStalled[name], "%s returned only once the link was back", name)
		if name == "Worker.Run" || name == "Consumer.Run" {
			// They run until their context ends, and then return nil or
			// its error.
			if err != nil {
				require.ErrorIs(t, err, context.DeadlineExceeded, name)
			}
			continue
		}
		require.Error(t, err, name)
		require.True(t, errors.Is(err, context.DeadlineExceeded) || pgmsg.ErrorCode(err) != "",
			"%s: %v is neither the context's error nor a pgmsg error", name, err)
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
