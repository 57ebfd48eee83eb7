package pgmsgprom_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgprom"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestCollector(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := pgtest.Schema(t, nil)
	client, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema})
	require.NoError(t, err)
	defer client.Close()
	_, err = client.CreateTopic(ctx, "orders", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	_, err = client.CreateGroup(ctx, "orders", "billing", pgmsg.PositionEarliest)
	require.NoError(t, err)
	recs := []*pgmsg.Record{{Topic: "orders", Partition: 1, Value: []byte("a")}, {Topic: "orders", Partition: 1, Value: []byte("b")}}
	require.NoError(t, client.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))

	_, err = client.CreateQueue(ctx, "mail", pgmsg.QueueConfig{})
	require.NoError(t, err)
	_, err = client.EnqueueMany(ctx, "mail", []pgmsg.EnqueueParams{{Payload: []byte("1")}, {Payload: []byte("2")}}, nil)
	require.NoError(t, err)
	jobs, err := client.ClaimJobs(ctx, "mail", &pgmsg.ClaimJobsOpts{Max: 2})
	require.NoError(t, err)
	_, err = client.CompleteMany(ctx, jobs)
	require.NoError(t, err)

	col := pgmsgprom.NewCollector(client, nil)
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
	require.Equal(t, 0.0, testutil.ToFloat64(prometheus.Collector(scrapeErrs(col))))
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
