package kafkasrv_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
	"github.com/pgmsg/pgmsg/internal/store"
)

// Two listeners on one schema form one cluster: each lists both, they
// agree on partition leaders and group coordinators, which are spread
// over both; when one is killed (its registration left to expire), the
// other lists itself alone after the session timeout, leads every
// partition and coordinates every group; one closed leaves at once.
func TestCluster(t *testing.T) {
	t.Parallel()
	b := newEnv(t, 16, 2*time.Minute)
	ctx := b.Ctx
	_, err := b.Client.CreateTopic(ctx, "c", pgmsg.TopicConfig{Partitions: 8})
	require.NoError(t, err)
	start := func() (*kafkasrv.Server, string) {
		srv, err := kafkasrv.New(kafkasrv.Config{Client: b.Client, Cluster: true, NodeID: -1, SessionTimeout: 3 * time.Second})
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return srv, ln.Addr().String()
	}
	a, addrA := start()
	bsrv, addrB := start()
	metadata := func(addr string) *kmsg.MetadataResponse {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		require.NoError(t, err)
		defer cl.Close()
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("c")}}
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		return resp
	}
	brokersOf := func(m *kmsg.MetadataResponse) []int32 {
		var ids []int32
		for _, br := range m.Brokers {
			ids = append(ids, br.NodeID)
		}
		return ids
	}
	leadersOf := func(m *kmsg.MetadataResponse) map[int32]int32 {
		out := map[int32]int32{}
		for _, p := range m.Topics[0].Partitions {
			out[p.Partition] = p.Leader
		}
		return out
	}
	// Both see both once each has read the other's row. Each lists the
	// other after its next heartbeat; on a loaded machine a late heartbeat
	// can even expire a row and move a node id, so wait rather than
	// assume an order.
	require.Eventually(t, func() bool {
		want := []int32{a.NodeID(), bsrv.NodeID()}
		return sameIDs(want, brokersOf(metadata(addrA))) && sameIDs(want, brokersOf(metadata(addrB)))
	}, time.Minute, 50*time.Millisecond)
	require.NotEqual(t, a.NodeID(), bsrv.NodeID())
	la, lb := leadersOf(metadata(addrA)), leadersOf(metadata(addrB))
	require.Equal(t, la, lb, "the listeners agree on leaders")
	counts := map[int32]int{}
	for _, l := range la {
		counts[l]++
	}
	require.Len(t, counts, 2, "leadership is spread: %v", la)
	owned := 0
	for _, g := range []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"} {
		require.NotEqual(t, a.OwnsGroup(g), bsrv.OwnsGroup(g), "exactly one coordinates %s", g)
		if a.OwnsGroup(g) {
			owned++
		}
	}
	require.Positive(t, owned)
	require.Less(t, owned, 8)
	// Metadata's brokers are reachable: a client seeded with A produces
	// to partitions B leads.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrA), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	for p := range int32(8) {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "c", Partition: p, Value: []byte("v")}).FirstErr())
	}

	// Killed: B's row expires; A then leads and coordinates everything.
	require.NoError(t, bsrv.Kill())
	require.Eventually(t, func() bool { return len(metadata(addrA).Brokers) == 1 }, time.Minute, 50*time.Millisecond)
	for _, l := range leadersOf(metadata(addrA)) {
		require.Equal(t, a.NodeID(), l)
	}
	for _, g := range []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"} {
		require.True(t, a.OwnsGroup(g))
	}
	require.Len(t, metadata(addrA).Brokers, 1)

	// A third listener takes the free node id; closed, it leaves at once
	// (no session timeout to wait for: its row is gone).
	c, addrC := start()
	require.Len(t, metadata(addrC).Brokers, 2)
	require.Equal(t, bsrv.NodeID(), c.NodeID(), "the smallest node id no live listener holds")
	require.NoError(t, c.Close())
	_, live, err := storeBrokers(t, b)
	require.NoError(t, err)
	require.Len(t, live, 1)
}

func storeBrokers(t *testing.T, b *env) ([]int32, []store.KafkaBroker, error) {
	t.Helper()
	return store.New(b.Schema).KafkaBrokers(b.Ctx, b.Pool)
}

func sameIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[int32]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		seen[x]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}
