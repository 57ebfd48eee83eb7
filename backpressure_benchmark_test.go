package pgmsg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// BenchmarkPublishBackpressure is BenchmarkPublish (batches of 100 1 KiB
// records on one partition) with each backpressure setting, limits never
// reached, and a group that never reads: the worst case of the check,
// whose cursor stays at offset 0 as the partition grows.
func BenchmarkPublishBackpressure(b *testing.B) {
	for _, setting := range []string{"none", "max_lag_records", "max_lag_bytes"} {
		b.Run(setting, func(b *testing.B) {
			client, topic := benchClient(b, 1)
			ctx := context.Background()
			if setting != "none" {
				if _, err := client.SetTopicSettings(ctx, topic, map[string]any{setting: int64(1) << 62}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := client.CreateGroup(ctx, topic, "idle", pgmsg.PositionEarliest); err != nil {
				b.Fatal(err)
			}
			recs := benchRecords(topic, 100, 1024)
			for _, r := range recs {
				r.Partition = 0
			}
			opts := &pgmsg.PublishOpts{ManualPartition: true}
			b.SetBytes(100 * 1024)
			for b.Loop() {
				if err := client.Publish(ctx, recs, opts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkEnqueueMaxDepth is one Enqueue plus the ClaimJobs and Complete
// that keep the queue's depth steady, on a queue with and without a
// max_depth, above a backlog of jobs scheduled an hour ahead (waiting, so
// counted, but never claimed): the depth check counts backlog+1 jobs.
func BenchmarkEnqueueMaxDepth(b *testing.B) {
	for _, backlog := range []int{0, 10000} {
		for _, depth := range []int64{0, 1 << 40} {
			b.Run(fmt.Sprintf("backlog=%d/max_depth=%t", backlog, depth != 0), func(b *testing.B) {
				bundle := pgtest.Schema(b, nil)
				client, err := pgmsg.NewClient(bundle.Pool, &pgmsg.Config{Schema: bundle.Schema})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(client.Close)
				ctx := context.Background()
				if _, err := client.CreateQueue(ctx, "q", pgmsg.QueueConfig{MaxDepth: depth}); err != nil {
					b.Fatal(err)
				}
				later := make([]pgmsg.EnqueueParams, 1000)
				for i := range later {
					later[i] = pgmsg.EnqueueParams{Payload: []byte(`{}`), Delay: time.Hour}
				}
				for i := 0; i < backlog; i += len(later) {
					if _, err := client.EnqueueMany(ctx, "q", later, nil); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := bundle.Pool.Exec(ctx, fmt.Sprintf("VACUUM ANALYZE %q.job", bundle.Schema)); err != nil {
					b.Fatal(err)
				}
				job := pgmsg.EnqueueParams{Payload: []byte(`{"n":1}`)}
				for b.Loop() {
					if _, err := client.Enqueue(ctx, "q", job, nil); err != nil {
						b.Fatal(err)
					}
					jobs, err := client.ClaimJobs(ctx, "q", nil)
					if err != nil || len(jobs) != 1 {
						b.Fatalf("claim: %v %v", jobs, err)
					}
					if err := client.Complete(ctx, jobs[0]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
