package pgmsg_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/pgmsg/pgmsg"
)

// BenchmarkConsumerRun is Consumer.Run of one member reading a backlog of
// 10000 records of 1 KiB from one partition, 1000 records a claim: the
// claim loop, the commit riding on the next claim, the handler's
// supervision. The backlog is published once; each op is a new group
// (and member) reading it from the start, so the topic need not grow with
// b.N. An op ends when the handler has seen every record.
func BenchmarkConsumerRun(b *testing.B) {
	const backlog, batch = 10000, 1000
	client, topic := benchClient(b, 1)
	ctx := context.Background()
	for i := 0; i < backlog; i += batch {
		if err := client.Publish(ctx, benchRecords(topic, batch, 1024), nil); err != nil {
			b.Fatal(err)
		}
	}
	opts := &pgmsg.ConsumerOpts{Claim: pgmsg.ClaimOpts{MaxRecords: batch}}
	n, op := 0, 0
	for b.Loop() {
		op++
		cn, err := client.NewConsumer(topic, fmt.Sprintf("g%d", op), opts)
		if err != nil {
			b.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		var seen atomic.Int64
		err = cn.Run(runCtx, func(_ context.Context, cl *pgmsg.Claim) error {
			if seen.Add(int64(len(cl.Records))) >= backlog {
				stop()
			}
			return nil
		})
		stop()
		cn.Close()
		if err != context.Canceled {
			b.Fatalf("Run: %v", err)
		}
		if got := seen.Load(); got != backlog {
			b.Fatalf("handled %d records, want %d", got, backlog)
		}
		n += backlog
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}
