package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgcluster"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
	"github.com/pgmsg/pgmsg/pgmsgprom"
)

// replicaPair is a private primary and a streaming replica of it: the
// shared test server cannot be base-backed-up, so each test that
// needs a replica starts its own pair.
type replicaPair struct {
	primary, standby         *pgcluster.Cluster
	primaryPool, standbyPool *pgxpool.Pool
	client                   *pgmsg.Client
}

func startReplicaPair(t *testing.T, ctx context.Context) *replicaPair {
	t.Helper()
	settings := map[string]string{"fsync": "off", "full_page_writes": "off"}
	primary, err := pgcluster.Start(ctx, pgcluster.Options{Settings: settings})
	if err != nil {
		t.Fatalf("start primary: %v", err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := pgcluster.StartStandby(ctx, primary, pgcluster.Options{Settings: settings})
	if err != nil {
		t.Fatalf("start standby: %v", err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	p := &replicaPair{primary: primary, standby: standby}
	p.primaryPool, err = pgxpool.New(ctx, primary.URL)
	require.NoError(t, err)
	t.Cleanup(p.primaryPool.Close)
	p.standbyPool, err = pgxpool.New(ctx, standby.URL)
	require.NoError(t, err)
	t.Cleanup(p.standbyPool.Close)
	m, err := pgmsgmigrate.New(p.primaryPool, nil)
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	p.client, err = pgmsg.NewClient(p.primaryPool, &pgmsg.Config{PollInterval: 50 * time.Millisecond,
		ReadReplicas: []*pgxpool.Pool{p.standbyPool}})
	require.NoError(t, err)
	t.Cleanup(p.client.Close)
	return p
}

// caughtUp waits until the standby has replayed everything the primary
// has written so far.
func (p *replicaPair) caughtUp(t *testing.T, ctx context.Context) {
	t.Helper()
	var target string
	require.NoError(t, p.primaryPool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&target))
	require.Eventually(t, func() bool {
		var ok bool
		err := p.standbyPool.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn`, target).Scan(&ok)
		return err == nil && ok
	}, time.Minute, 10*time.Millisecond, "the standby did not replay up to %s", target)
}

func (p *replicaPair) publish(t *testing.T, ctx context.Context, topic string, from, n int) {
	t.Helper()
	recs := make([]*pgmsg.Record, 0, n)
	for i := from; i < from+n; i++ {
		recs = append(recs, &pgmsg.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%17), Value: fmt.Appendf(nil, "v%d", i),
			Headers: map[string][]byte{"i": fmt.Appendf(nil, "%d", i)}})
	}
	require.NoError(t, p.client.Publish(ctx, recs, nil))
}

// topic creates a topic, publishes n records to it and waits until the
// standby has them.
func (p *replicaPair) topic(t *testing.T, ctx context.Context, name string, partitions, n int) {
	t.Helper()
	_, err := p.client.CreateTopic(ctx, name, pgmsg.TopicConfig{Partitions: partitions})
	require.NoError(t, err)
	p.publish(t, ctx, name, 0, n)
	p.caughtUp(t, ctx)
}

// groupReader consumes topic in one group and keeps what each partition
// delivered, in delivery order.
type groupReader struct {
	mu    sync.Mutex
	seen  map[int32][]int64
	total int
}

func (p *replicaPair) read(t *testing.T, ctx context.Context, topic, group string) *groupReader {
	t.Helper()
	g := &groupReader{seen: map[int32][]int64{}}
	cn, err := p.client.NewConsumer(topic, group, &pgmsg.ConsumerOpts{Claim: pgmsg.ClaimOpts{MaxRecords: 7}})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(runCtx, func(_ context.Context, cl *pgmsg.Claim) error {
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, r := range cl.Records {
				if string(r.Value) != "v"+string(r.Headers["i"]) {
					t.Errorf("record %s/%d@%d: value %q, header i %q", topic, r.Partition, r.Offset, r.Value, r.Headers["i"])
				}
				g.seen[r.Partition] = append(g.seen[r.Partition], r.Offset)
				g.total++
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("consumer of group %s: %v", group, err)
		}
		cn.Close()
	})
	return g
}

// waitFor waits until the group has read n records, then checks that each
// partition delivered its offsets once, in order, from 0.
func (g *groupReader) waitFor(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.total >= n
	}, 2*time.Minute, 10*time.Millisecond)
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Equal(t, n, g.total, "records delivered more than once")
	for part, offs := range g.seen {
		for i, o := range offs {
			require.Equal(t, int64(i), o, "partition %d: delivery %d", part, i)
		}
	}
}

func replicaStats(t *testing.T, c *pgmsg.Client) (pgmsg.ReplicaStats, int64) {
	t.Helper()
	rs := c.ReplicaStats()
	require.Len(t, rs.Replicas, 1)
	t.Logf("replica %+v, read on the primary: %d claims, %d records", rs.Replicas[0], rs.PrimaryReads, rs.PrimaryRecords)
	return rs.Replicas[0], rs.PrimaryReads
}

// A replica that has caught up serves every claim; one whose replay is
// paused serves none and nothing is read short: the primary reads the
// claims after the bounded wait; once replay resumes, the replica serves
// claims again.
func TestReadReplicaLagging(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := startReplicaPair(t, ctx)
	p.topic(t, ctx, "events", 3, 300)

	groups := []*groupReader{p.read(t, ctx, "events", "a"), p.read(t, ctx, "events", "b")}
	for _, g := range groups {
		g.waitFor(t, 300)
	}
	st, primaryReads := replicaStats(t, p.client)
	require.Zero(t, st.Fallbacks, "a caught-up replica fell back: %s", st.LastError)
	require.Zero(t, primaryReads)
	require.Positive(t, st.Reads)
	require.EqualValues(t, 600, st.Records)
	// The counters reach Prometheus.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(pgmsgprom.NewCollector(p.client, nil))
	n, err := testutil.GatherAndCount(reg, "pgmsg_replica_records_total", "pgmsg_replica_reads_total",
		"pgmsg_replica_fallbacks_total", "pgmsg_replica_lag_bytes", "pgmsg_replica_healthy", "pgmsg_replica_primary_reads_total")
	require.NoError(t, err)
	require.Equal(t, 6, n)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "pgmsg_replica_records_total" {
			require.EqualValues(t, 600, mf.GetMetric()[0].GetCounter().GetValue())
		}
	}

	// Replay paused: the replica lags by everything published from now on.
	_, err = p.standbyPool.Exec(ctx, `SELECT pg_wal_replay_pause()`)
	require.NoError(t, err)
	p.publish(t, ctx, "events", 300, 300)
	for _, g := range groups {
		g.waitFor(t, 600)
	}
	st, primaryReads = replicaStats(t, p.client)
	require.Positive(t, st.Fallbacks)
	require.Positive(t, primaryReads)
	require.Positive(t, st.LagBytes)
	// Every record delivered was read once, from one side or the other.
	require.EqualValues(t, 2*600, st.Records+p.client.ReplicaStats().PrimaryRecords)
	require.Contains(t, st.LastError, "did not replay")
	before := st.Reads

	_, err = p.standbyPool.Exec(ctx, `SELECT pg_wal_replay_resume()`)
	require.NoError(t, err)
	// Publish in small steps until the replica, once its skip has passed,
	// serves claims again.
	next := 600
	require.Eventually(t, func() bool {
		p.publish(t, ctx, "events", next, 3)
		next += 3
		return p.client.ReplicaStats().Replicas[0].Reads > before
	}, 2*time.Minute, 100*time.Millisecond)
	for _, g := range groups {
		g.waitFor(t, next)
	}
}

// A replica killed while consumers read, or promoted (it no longer
// follows the primary), is skipped: every record is still read once per
// group, none short.
func TestReadReplicaKilledOrPromoted(t *testing.T) {
	for _, how := range []string{"killed", "promoted"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			p := startReplicaPair(t, ctx)
			// One partition: its one member claims with the direct statement
			// (the other test's three go through claim_range).
			p.topic(t, ctx, "events", 1, 200)
			g := p.read(t, ctx, "events", "a")
			g.waitFor(t, 200)
			st, _ := replicaStats(t, p.client)
			require.Positive(t, st.Reads)

			if how == "killed" {
				p.standby.Kill()
			} else {
				// Without waiting in the statement: a pg_promote() that
				// waits can be cancelled by a recovery conflict while the
				// standby still replays (it was, once, under load in CI).
				_, err := p.standbyPool.Exec(ctx, `SELECT pg_promote(wait => false)`)
				require.NoError(t, err)
				require.Eventually(t, func() bool {
					var recovering bool
					err := p.standbyPool.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovering)
					return err == nil && !recovering
				}, time.Minute, 10*time.Millisecond)
				// Writes the primary never sees: a promoted replica diverges.
				_, err = p.standbyPool.Exec(ctx, `CREATE TABLE diverged ()`)
				require.NoError(t, err)
			}
			p.publish(t, ctx, "events", 200, 200)
			g.waitFor(t, 400)
			st, primaryReads := replicaStats(t, p.client)
			require.Positive(t, st.Fallbacks)
			require.Positive(t, primaryReads)
			if how == "promoted" {
				require.Contains(t, st.LastError, "not in recovery")
			}
		})
	}
}
