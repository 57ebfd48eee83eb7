package pgmsgprom_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgprom"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testClient is a client of a schema of its own holding topics of two
// partitions, each with a group named group read from the earliest
// offset; the context ends with the test (a minute at most).
func testClient(t *testing.T, group string, topics ...string) (context.Context, *pgmsg.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	b := pgtest.Schema(t, nil)
	client, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	for _, name := range topics {
		_, err = client.CreateTopic(ctx, name, pgmsg.TopicConfig{Partitions: 2})
		require.NoError(t, err)
		_, err = client.CreateGroup(ctx, name, group, pgmsg.PositionEarliest)
		require.NoError(t, err)
	}
	return ctx, client
}

func TestCollector(t *testing.T) {
	ctx, client := testClient(t, "billing", "orders")
	recs := []*pgmsg.Record{{Topic: "orders", Partition: 1, Value: []byte("a")}, {Topic: "orders", Partition: 1, Value: []byte("b")}}
	require.NoError(t, client.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))

	_, err := client.CreateQueue(ctx, "mail", pgmsg.QueueConfig{})
	require.NoError(t, err)
	_, err = client.EnqueueMany(ctx, "mail", []pgmsg.EnqueueParams{{Payload: []byte("1")}, {Payload: []byte("2")}}, nil)
	require.NoError(t, err)
	jobs, err := client.ClaimJobs(ctx, "mail", &pgmsg.ClaimJobsOpts{Max: 2})
	require.NoError(t, err)
	_, err = client.CompleteMany(ctx, jobs)
	require.NoError(t, err)

	col := pgmsgprom.NewCollector(client, &pgmsgprom.Opts{PerPartition: true})
	res, err := client.MaintainOnce(ctx, nil)
	require.NoError(t, err)
	col.ObserveMaintenance(res)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pgmsg_group_lag_records Records published but not yet committed by the group.
# TYPE pgmsg_group_lag_records gauge
pgmsg_group_lag_records{group="billing",partition="0",topic="orders"} 0
pgmsg_group_lag_records{group="billing",partition="1",topic="orders"} 2
# HELP pgmsg_partition_end_offset Next offset to be written: records ever published to the partition (use rate()).
# TYPE pgmsg_partition_end_offset gauge
pgmsg_partition_end_offset{partition="0",topic="orders"} 0
pgmsg_partition_end_offset{partition="1",topic="orders"} 2
# HELP pgmsg_queue_jobs_finished_last_minute Jobs archived in the last minute, by outcome (completed, cancelled); dead-lettered jobs are queue_jobs{state="dead"}.
# TYPE pgmsg_queue_jobs_finished_last_minute gauge
pgmsg_queue_jobs_finished_last_minute{outcome="cancelled",queue="mail"} 0
pgmsg_queue_jobs_finished_last_minute{outcome="completed",queue="mail"} 2
`), "pgmsg_group_lag_records", "pgmsg_partition_end_offset", "pgmsg_queue_jobs_finished_last_minute"))
	n, err := testutil.GatherAndCount(reg, "pgmsg_queue_job_latency_seconds", "pgmsg_queue_job_run_seconds")
	require.NoError(t, err)
	require.Equal(t, 5, n, "three latency quantiles and two run-time quantiles for queue mail")
	n, err = testutil.GatherAndCount(reg, "pgmsg_group_oldest_unconsumed_age_seconds", "pgmsg_maintenance_task_duration_seconds")
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 3)
	require.Equal(t, 0.0, testutil.ToFloat64(scrapeErrs(col)))

	// The topic and group totals are there with or without PerPartition;
	// the per-partition series only with it.
	totals := `
# HELP pgmsg_group_lag_records_sum Records published but not yet committed by the group, over all partitions.
# TYPE pgmsg_group_lag_records_sum gauge
pgmsg_group_lag_records_sum{group="billing",topic="orders"} 2
# HELP pgmsg_topic_end_offset Sum of the topic's partitions' next offsets: records ever published to it (use rate()).
# TYPE pgmsg_topic_end_offset gauge
pgmsg_topic_end_offset{topic="orders"} 2
# HELP pgmsg_topic_partitions Partitions of the topic.
# TYPE pgmsg_topic_partitions gauge
pgmsg_topic_partitions{topic="orders"} 2
`
	names := []string{"pgmsg_group_lag_records_sum", "pgmsg_topic_end_offset", "pgmsg_topic_partitions"}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(totals), names...))
	def := pgmsgprom.NewCollector(client, nil)
	dreg := prometheus.NewPedanticRegistry()
	require.NoError(t, dreg.Register(def))
	require.NoError(t, testutil.GatherAndCompare(dreg, strings.NewReader(totals), names...))
	n, err = testutil.GatherAndCount(dreg, "pgmsg_group_oldest_unconsumed_age_seconds_max", "pgmsg_group_skipped_records_sum",
		"pgmsg_topic_segments", "pgmsg_topic_start_offset", "pgmsg_group_next_offset_sum")
	require.NoError(t, err)
	require.Equal(t, 5, n, "one series of each total for topic orders and group billing")
	n, err = testutil.GatherAndCount(dreg, "pgmsg_partition_end_offset", "pgmsg_partition_bytes", "pgmsg_group_lag_records",
		"pgmsg_group_oldest_unconsumed_age_seconds")
	require.NoError(t, err)
	require.Zero(t, n, "per-partition series without Opts.PerPartition")
	require.Equal(t, 0.0, testutil.ToFloat64(scrapeErrs(def)))
	var age float64
	mfs, err := dreg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "pgmsg_group_oldest_unconsumed_age_seconds_max" {
			age = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	require.Positive(t, age, "billing has not read partition 1's records")
}

// scrapeErrs isolates the scrape error counter.
func scrapeErrs(c *pgmsgprom.Collector) prometheus.Collector {
	return prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		all := make(chan prometheus.Metric, 1000)
		c.Collect(all)
		close(all)
		for m := range all {
			if strings.Contains(m.Desc().String(), "scrape_errors_total") {
				ch <- m
			}
		}
	})
}

// queryCounter is a pgx tracer counting the queries a pool sends.
type queryCounter struct{ n atomic.Int64 }

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}

func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Every scrape ran four queries, one counting the whole job
// backlog; 16 scrape loops on 300k queued jobs slowed publishes 60-fold.
// With CacheTTL, concurrent scrapes share one collection and later ones
// read the cache until it is older than the TTL.
func TestCollectorCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := pgtest.Schema(t, nil)
	cfg := b.Pool.Config().Copy()
	var queries queryCounter
	cfg.ConnConfig.Tracer = &queries
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	client, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: b.Schema, DisableNotify: true})
	require.NoError(t, err)
	defer client.Close()
	_, err = client.CreateQueue(ctx, "mail", pgmsg.QueueConfig{})
	require.NoError(t, err)
	_, err = client.Enqueue(ctx, "mail", pgmsg.EnqueueParams{Payload: []byte("1")}, nil)
	require.NoError(t, err)

	// What one collection costs.
	before := queries.n.Load()
	one := prometheus.NewRegistry()
	require.NoError(t, one.Register(pgmsgprom.NewCollector(client, nil)))
	_, err = one.Gather()
	require.NoError(t, err)
	perCollection := queries.n.Load() - before
	require.Positive(t, perCollection)

	// A client of its own: LogTotals keeps its last answer per client,
	// and a second collection through the same one reads less.
	client2, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: b.Schema, DisableNotify: true})
	require.NoError(t, err)
	defer client2.Close()
	col := pgmsgprom.NewCollector(client2, &pgmsgprom.Opts{CacheTTL: time.Hour})
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(col))
	scrapeAll := func(n int) {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mfs, err := reg.Gather()
				require.NoError(t, err)
				require.NotEmpty(t, mfs)
			}()
		}
		wg.Wait()
	}
	before = queries.n.Load()
	scrapeAll(16)
	require.Equal(t, perCollection, queries.n.Load()-before, "16 concurrent scrapes ran more than one collection")
	require.Equal(t, 1.0, testutil.ToFloat64(onlyMetric(col, "scrape_collections_total")))

	// Within the TTL: no query at all, and the figures are the cached ones.
	_, err = client.Enqueue(ctx, "mail", pgmsg.EnqueueParams{Payload: []byte("2")}, nil)
	require.NoError(t, err)
	before = queries.n.Load()
	scrapeAll(16)
	require.Equal(t, before, queries.n.Load(), "scrapes within the TTL queried the database")
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pgmsg_queue_jobs Jobs by state.
# TYPE pgmsg_queue_jobs gauge
pgmsg_queue_jobs{queue="mail",state="archived"} 0
pgmsg_queue_jobs{queue="mail",state="available"} 1
pgmsg_queue_jobs{queue="mail",state="dead"} 0
pgmsg_queue_jobs{queue="mail",state="retrying"} 0
pgmsg_queue_jobs{queue="mail",state="running"} 0
pgmsg_queue_jobs{queue="mail",state="scheduled"} 0
`), "pgmsg_queue_jobs"))

	// Once the TTL has passed, one new collection sees the new job.
	short := pgmsgprom.NewCollector(client, &pgmsgprom.Opts{CacheTTL: 50 * time.Millisecond})
	sreg := prometheus.NewRegistry()
	require.NoError(t, sreg.Register(short))
	_, err = sreg.Gather()
	require.NoError(t, err)
	time.Sleep(60 * time.Millisecond)
	before = queries.n.Load()
	require.NoError(t, testutil.GatherAndCompare(sreg, strings.NewReader(`
# HELP pgmsg_queue_jobs Jobs by state.
# TYPE pgmsg_queue_jobs gauge
pgmsg_queue_jobs{queue="mail",state="archived"} 0
pgmsg_queue_jobs{queue="mail",state="available"} 2
pgmsg_queue_jobs{queue="mail",state="dead"} 0
pgmsg_queue_jobs{queue="mail",state="retrying"} 0
pgmsg_queue_jobs{queue="mail",state="running"} 0
pgmsg_queue_jobs{queue="mail",state="scheduled"} 0
`), "pgmsg_queue_jobs"))
	// One collection: its queries, fewer than the first's when the
	// client's LogTotals only brings its last answer up to date.
	require.Equal(t, 2.0, testutil.ToFloat64(onlyMetric(short, "scrape_collections_total")), "one collection once the TTL passed")
	require.Positive(t, queries.n.Load()-before)
	require.LessOrEqual(t, queries.n.Load()-before, perCollection)
}

// onlyMetric isolates one metric of the collector by name.
func onlyMetric(c *pgmsgprom.Collector, name string) prometheus.Collector {
	return prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		all := make(chan prometheus.Metric, 1000)
		c.Collect(all)
		close(all)
		for m := range all {
			if strings.Contains(m.Desc().String(), name) {
				ch <- m
			}
		}
	})
}

// A series whose value is unchanged is sent again as the metric built for
// it before; one whose value changed is rebuilt, and the series of a
// deleted topic are gone from the next scrape.
func TestCollectorSeriesFollowValues(t *testing.T) {
	ctx, client := testClient(t, "g", "a", "b")
	col := pgmsgprom.NewCollector(client, nil)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))
	want := func(aEnd, aLag int, withB bool) string {
		s := `
# HELP pgmsg_group_lag_records_sum Records published but not yet committed by the group, over all partitions.
# TYPE pgmsg_group_lag_records_sum gauge
pgmsg_group_lag_records_sum{group="g",topic="a"} ` + strconv.Itoa(aLag) + "\n"
		if withB {
			s += `pgmsg_group_lag_records_sum{group="g",topic="b"} 0` + "\n"
		}
		s += `# HELP pgmsg_topic_end_offset Sum of the topic's partitions' next offsets: records ever published to it (use rate()).
# TYPE pgmsg_topic_end_offset gauge
pgmsg_topic_end_offset{topic="a"} ` + strconv.Itoa(aEnd) + "\n"
		if withB {
			s += `pgmsg_topic_end_offset{topic="b"} 0` + "\n"
		}
		return s
	}
	names := []string{"pgmsg_group_lag_records_sum", "pgmsg_topic_end_offset"}
	for range 2 {
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want(0, 0, true)), names...))
	}
	require.NoError(t, client.Publish(ctx, []*pgmsg.Record{{Topic: "a", Value: []byte("x")}, {Topic: "a", Value: []byte("y")}}, nil))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want(2, 2, true)), names...))
	// The lagging group's age grows from scrape to scrape with the figures
	// unchanged (the other series are sent again as they were).
	ageOfA := func() float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "pgmsg_group_oldest_unconsumed_age_seconds_max" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "topic" && l.GetValue() == "a" {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		t.Fatal("no age series of topic a")
		return 0
	}
	age0 := ageOfA()
	time.Sleep(300 * time.Millisecond)
	require.Greater(t, ageOfA(), age0)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want(2, 2, true)), names...))
	p := int32(0)
	for {
		cl, err := client.Claim(ctx, "a", "g", &pgmsg.ClaimOpts{Partition: &p})
		require.NoError(t, err)
		if cl == nil {
			p++
			if p == 2 {
				break
			}
			continue
		}
		require.NoError(t, client.Commit(ctx, cl))
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want(2, 0, true)), names...))
	_, err := client.DeleteGroup(ctx, "b", "g")
	require.NoError(t, err)
	require.NoError(t, client.DeleteTopic(ctx, "b"))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want(2, 0, false)), names...))
	n, err := testutil.GatherAndCount(reg, "pgmsg_topic_partitions", "pgmsg_group_next_offset_sum")
	require.NoError(t, err)
	require.Equal(t, 2, n, "topic b's series are gone")
}
