package kafkacompat

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestIdempotentProduceKeepsOrder: an idempotent producer with several
// requests in flight on one connection (franz-go allows 5) writes a
// partition's records in the order produced, at contiguous offsets, as
// franz-go's TestGroupETL checks in its produce phase. A broker must store
// a producer's batches in sequence order (refusing one that comes early
// with OUT_OF_ORDER_SEQUENCE_NUMBER, which the client retries), whatever
// order it handles the requests in.
func TestIdempotentProduceKeepsOrder(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		const topic = "idem-order"
		n := envInt(t, "PGMSG_ORDER_RECORDS", 20000)
		tg.createTopic(t, topic, 1)
		cl, err := kgo.NewClient(kgo.SeedBrokers(tg.seeds...), kgo.DefaultProduceTopic(topic),
			kgo.MaxBufferedRecords(10000), kgo.MaxBufferedBytes(50000), kgo.ProducerLinger(0),
			kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgoLogLevel(), nil)))
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), envDuration(t, "PGMSG_ORDER_TIMEOUT", 2*time.Minute))
		defer cancel()
		var mu sync.Mutex
		var offsets []int64
		var firstErr error
		body := make([]byte, 100)
		for i := range n {
			cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: body}, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				offsets = append(offsets, r.Offset)
			})
		}
		if err := cl.Flush(ctx); err != nil {
			mu.Lock()
			acked := len(offsets)
			mu.Unlock()
			t.Fatalf("flush: %v: %d of %d records acknowledged, %d buffered", err, acked, n, cl.BufferedProduceRecords())
		}
		mu.Lock()
		defer mu.Unlock()
		require.NoError(t, firstErr)
		require.Len(t, offsets, n)
		bad := 0
		for i, o := range offsets {
			if o != int64(i) {
				if bad < 5 {
					t.Errorf("record %d (in produce order) was stored at offset %d", i, o)
				}
				bad++
			}
		}
		require.Zero(t, bad, "records stored out of produce order")
		// The partition holds the keys in produce order.
		recs := tg.native(t, topic, 0)
		require.Len(t, recs, n)
		for i, r := range recs {
			require.Equal(t, strconv.Itoa(i), *r.Key, "offset %d", i)
		}
	})
}

// kgoLogLevel is the franz-go clients' log level of the tests:
// PGMSG_KGO_LOG=debug, info or warn (default: errors only).
func kgoLogLevel() kgo.LogLevel {
	switch os.Getenv("PGMSG_KGO_LOG") {
	case "debug":
		return kgo.LogLevelDebug
	case "info":
		return kgo.LogLevelInfo
	case "warn":
		return kgo.LogLevelWarn
	}
	return kgo.LogLevelError
}
