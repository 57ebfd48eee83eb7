package pgmsg_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/pgmsg/pgmsg"
)

func testingProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkClaimCommit is one Claim of up to max 1 KiB records and its
// Commit: the consumer's two round trips. The commit goes back to the
// claim's first offset (a commit that moves nothing costs the same), so
// every iteration claims the same records and the topic need not grow
// with b.N.
func BenchmarkClaimCommit(b *testing.B) {
	for _, max := range []int{100, 1000} {
		b.Run(fmt.Sprintf("records=%d", max), func(b *testing.B) {
			client, topic := benchClient(b, 1)
			ctx := context.Background()
			if err := client.Publish(ctx, benchRecords(topic, max, 1024), nil); err != nil {
				b.Fatal(err)
			}
			opts := &pgmsg.ClaimOpts{MaxRecords: max}
			n := 0
			for b.Loop() {
				cl, err := client.Claim(ctx, topic, "g", opts)
				if err != nil {
					b.Fatal(err)
				}
				if cl == nil || len(cl.Records) != max {
					b.Fatalf("claimed %v, want %d records", cl, max)
				}
				if err := client.CommitOffset(ctx, cl, cl.Records[0].Offset); err != nil {
					b.Fatal(err)
				}
				n += len(cl.Records)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkClaimEmpty is a claim that finds nothing new: what every idle
// consumer pays per poll. It writes nothing.
func BenchmarkClaimEmpty(b *testing.B) {
	client, topic := benchClient(b, 4)
	ctx := context.Background()
	if _, err := client.CreateGroup(ctx, topic, "g", "earliest"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		cl, err := client.Claim(ctx, topic, "g", nil)
		if err != nil || cl != nil {
			b.Fatalf("claim: %v %v", cl, err)
		}
	}
}
