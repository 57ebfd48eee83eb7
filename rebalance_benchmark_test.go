package pgmsg_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgmsg/pgmsg"
)

// BenchmarkRebalanceJoin is how long a member joining a busy group waits
// for its first records: member A owns the topic's four partitions and is
// handling claims of records published every few milliseconds (each
// claim taking the handler's time); B joins,
// and the hand-over of its two partitions completes when A's claims on
// them end and the members heartbeat. One op is a join until B's handler
// has run and B owns its two partitions (then B leaves, and A owns all
// four again before the next).
func BenchmarkRebalanceJoin(b *testing.B) {
	for _, handle := range []time.Duration{2 * time.Millisecond, 100 * time.Millisecond} {
		b.Run("handler="+handle.String(), func(b *testing.B) { benchmarkRebalanceJoin(b, handle) })
	}
}

func benchmarkRebalanceJoin(b *testing.B, handle time.Duration) {
	client, topic := benchClient(b, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_ = client.Publish(ctx, benchRecords(topic, 8, 100), nil)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-done }()
	a, err := client.NewConsumer(topic, "g", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_ = a.Run(ctx, func(context.Context, *pgmsg.Claim) error {
			time.Sleep(handle)
			return nil
		})
	}()
	defer func() { cancel(); <-aDone }()
	ownsAll := func() {
		for len(a.Assignment()[topic]) != 4 {
			if ctx.Err() != nil {
				b.Fatal("stopped")
			}
			time.Sleep(time.Millisecond)
		}
	}
	ownsAll()
	var waited time.Duration
	for b.Loop() {
		bc, err := client.NewConsumer(topic, "g", nil)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		first := make(chan time.Duration, 1)
		runCtx, stop := context.WithCancel(ctx)
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			_ = bc.Run(runCtx, func(context.Context, *pgmsg.Claim) error {
				select {
				case first <- time.Since(start):
				default:
				}
				return nil
			})
		}()
		<-first
		for len(bc.Assignment()[topic]) != 2 {
			time.Sleep(100 * time.Microsecond)
		}
		waited += time.Since(start)
		b.StopTimer()
		stop()
		<-ran
		bc.Close()
		ownsAll()
		b.StartTimer()
	}
	b.ReportMetric(float64(waited.Milliseconds())/float64(b.N), "ms/join")
}
