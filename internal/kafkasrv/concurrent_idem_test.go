package kafkasrv_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

// Idempotent producers on several connections, each pipelining its
// batches to one partition and sending each batch twice in a row (the
// second a retry), all at once: every batch is stored once, whole, in its
// producer's order, each retry answered with its original's base offset,
// and each answer's offset holds that batch's first record.
func TestProduceIdempotentConcurrent(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "group", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	const producers, batches, per = 6, 40, 3
	type answer struct {
		producer, batch int
		base            int64
	}
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	for p := range producers {
		rc := dialRaw(t, tb)
		init := rc.roundTrip(t, kmsg.NewPtrInitProducerIDRequest()).(*kmsg.InitProducerIDResponse)
		require.Zero(t, init.ErrorCode)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := time.Now().UnixMilli()
			var frames []byte
			for i := range batches {
				recs := make([]rawRecord, per)
				for j := range recs {
					recs[j] = rawRecord{value: fmt.Appendf(nil, "%d-%d-%d", p, i, j)}
				}
				b := rawBatch(init.ProducerID, init.ProducerEpoch, int32(i*per), ts, recs...)
				frames = append(frames, rc.frame(produceReq("group", 0, b))...)
				frames = append(frames, rc.frame(produceReq("group", 0, b))...)
			}
			if _, err := rc.Write(frames); !assertNoErr(t, err) {
				return
			}
			var prev int64 = -1
			for i := range 2 * batches {
				_, body, err := rc.read(t)
				if !assertNoErr(t, err) {
					return
				}
				resp := kmsg.NewPtrProduceResponse()
				resp.Version = 9
				if !assertNoErr(t, resp.ReadFrom(body[1:])) {
					return
				}
				sp := resp.Topics[0].Partitions[0]
				if sp.ErrorCode != 0 {
					t.Errorf("producer %d request %d: error %d %s", p, i, sp.ErrorCode, derefOr(sp.ErrorMessage))
					return
				}
				if i%2 == 1 && sp.BaseOffset != prev {
					t.Errorf("producer %d batch %d: the retry answered %d, the original %d", p, i/2, sp.BaseOffset, prev)
				}
				prev = sp.BaseOffset
				if i%2 == 0 {
					mu.Lock()
					answers = append(answers, answer{p, i / 2, sp.BaseOffset})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	require.False(t, t.Failed())
	const total = producers * batches * per
	got, err := tb.Client.Fetch(tb.Ctx, "group", 0, 0, total+1)
	require.NoError(t, err)
	require.Len(t, got, total, "each batch stored once")
	next := make([]int, producers) // each producer's next batch, in log order
	for k := 0; k < total; k += per {
		var p, i, j int
		_, err := fmt.Sscanf(string(got[k].Value), "%d-%d-%d", &p, &i, &j)
		require.NoError(t, err)
		require.Equal(t, next[p], i, "producer %d's batches in its order", p)
		next[p]++
		for j := range per {
			require.Equal(t, fmt.Sprintf("%d-%d-%d", p, i, j), string(got[k+j].Value), "batch whole at offset %d", k)
		}
	}
	require.Len(t, answers, producers*batches)
	for _, a := range answers {
		require.Equal(t, fmt.Sprintf("%d-%d-0", a.producer, a.batch), string(got[a.base].Value))
	}
}

func assertNoErr(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// An idempotent producer's batches pipelined on its connection to one
// partition wait in the partition's queue together (the next one need
// not wait for the previous one's commit) and are stored in one round,
// in order, with one commit.
func TestProducePipelinedOneRound(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Client.CreateTopic(tb.Ctx, "pipe", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	rc := dialRaw(t, tb)
	init := rc.roundTrip(t, kmsg.NewPtrInitProducerIDRequest()).(*kmsg.InitProducerIDResponse)
	require.Zero(t, init.ErrorCode)
	const batches, per = 3, 2
	release := tb.srv.HoldPartition("pipe", 0)
	ts := time.Now().UnixMilli()
	var frames []byte
	for i := range batches {
		b := rawBatch(init.ProducerID, init.ProducerEpoch, int32(i*per), ts,
			rawRecord{value: fmt.Appendf(nil, "%d-0", i)}, rawRecord{value: fmt.Appendf(nil, "%d-1", i)})
		frames = append(frames, rc.frame(produceReq("pipe", 0, b))...)
	}
	_, err = rc.Write(frames)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(tb.Ctx, 30*time.Second)
	defer cancel()
	err = tb.srv.AwaitQueued(ctx, "pipe", 0, batches)
	release()
	require.NoError(t, err, "the pipelined batches never waited in the queue together")
	for i := range batches {
		_, body, err := rc.read(t)
		require.NoError(t, err)
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 9
		require.NoError(t, resp.ReadFrom(body[1:]))
		sp := resp.Topics[0].Partitions[0]
		require.Zero(t, sp.ErrorCode, derefOr(sp.ErrorMessage))
		require.Equal(t, int64(i*per), sp.BaseOffset, "batch %d", i)
	}
	var n, xacts int
	require.NoError(t, tb.Pool.QueryRow(tb.Ctx, fmt.Sprintf(`SELECT count(*), count(DISTINCT xmin::text) FROM %q.record`, tb.Schema)).Scan(&n, &xacts))
	require.Equal(t, batches*per, n)
	require.Equal(t, 1, xacts, "transactions that stored the pipelined batches")
	got, err := tb.Client.Fetch(tb.Ctx, "pipe", 0, 0, batches*per)
	require.NoError(t, err)
	for k, r := range got {
		require.Equal(t, fmt.Sprintf("%d-%d", k/per, k%per), string(r.Value))
	}
}
