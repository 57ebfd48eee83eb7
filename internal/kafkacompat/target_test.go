package kafkacompat

import (
	"context"
	"net"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

// rec is a record as a client wrote or read it: the fields every client
// test compares. Headers are sorted by key (pgmsg keeps a record's headers
// as a map: a key once, the order not kept; docs/kafka.md).
type rec struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Key       *string  `json:"key"`
	Value     *string  `json:"value"`
	Headers   []header `json:"headers"`
	Timestamp int64    `json:"timestamp"` // milliseconds since the epoch
}

type header struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func sortHeaders(hs []header) []header {
	if len(hs) == 0 {
		return nil
	}
	out := append([]header(nil), hs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func strp(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// target is the cluster the client tests run against: pgmsg's listener
// (the proof), or kfake (the reference that shows a failure is the
// listener's, not the test's).
type target struct {
	name  string
	seeds []string
	// native reads every record of a partition without the Kafka
	// protocol: pgmsg's Client.Fetch (for kfake, a kgo read).
	native func(t *testing.T, topic string, partition int32) []rec
	// committed returns a group's committed offsets of topic (the next
	// offset to read per partition): for pgmsg, the group's cursors as
	// pgmsg's own API reports them.
	committed func(t *testing.T, topic, group string) map[int32]int64
	// createTopic creates a topic: on pgmsg with pgmsg's own API (a topic
	// made natively is a Kafka topic; the kgo suite covers CreateTopics),
	// on kfake with CreateTopics.
	createTopic func(t *testing.T, topic string, partitions int32)
	adm         *kadm.Client
}

// targets returns the clusters to test against: PGMSG_KAFKA_COMPAT_TARGET
// is pgmsg (the default), kfake or all.
func targets(t *testing.T) []func(t *testing.T) *target {
	switch v := os.Getenv("PGMSG_KAFKA_COMPAT_TARGET"); v {
	case "", "pgmsg":
		return []func(*testing.T) *target{startPgmsg}
	case "kfake":
		return []func(*testing.T) *target{startKfake}
	case "all":
		return []func(*testing.T) *target{startPgmsg, startKfake}
	default:
		t.Fatalf("PGMSG_KAFKA_COMPAT_TARGET=%q: pgmsg, kfake or all", v)
		return nil
	}
}

// forEachTarget runs fn as a subtest per target.
func forEachTarget(t *testing.T, fn func(t *testing.T, tg *target)) {
	for _, start := range targets(t) {
		tg := start(t)
		t.Run(tg.name, func(t *testing.T) { fn(t, tg) })
	}
}

// pgmsgServer is an in-process listener over a fresh schema.
type pgmsgServer struct {
	*pgmsgtest.Env
	// Ctx ends after startPgmsgServer's timeout.
	Ctx  context.Context
	srv  *kafkasrv.Server
	addr string
}

// startPgmsgServer starts the Kafka listener on 127.0.0.1:0 with cfg
// (its Client set here) over a schema of the test's own.
func startPgmsgServer(t *testing.T, cfg kafkasrv.Config, timeout time.Duration) *pgmsgServer {
	t.Helper()
	b := pgmsgtest.New(t, pgtest.Pool(t, &pgtest.Opts{MaxConns: 32}), nil)
	cfg.Client = b.Client
	var srv *kafkasrv.Server
	withGroups(t, &cfg, func(ctx context.Context, kind, name, op string) bool { return srv.Authorize(ctx, kind, name, op) })
	srv, err := kafkasrv.New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.NoError(t, <-done)
	})
	return &pgmsgServer{Env: b, Ctx: pgtest.Context(t, timeout), srv: srv, addr: ln.Addr().String()}
}

func startPgmsg(t *testing.T) *target {
	t.Helper()
	s := startPgmsgServer(t, kafkasrv.Config{}, 5*time.Minute)
	tg := &target{name: "pgmsg", seeds: []string{s.addr}}
	tg.native = func(t *testing.T, topic string, partition int32) []rec {
		t.Helper()
		var out []rec
		for from := int64(0); ; {
			recs, err := s.Client.Fetch(s.Ctx, topic, partition, from, 1000)
			require.NoError(t, err)
			if len(recs) == 0 {
				return out
			}
			for _, r := range recs {
				out = append(out, nativeRec(r))
				from = r.Offset + 1
			}
		}
	}
	tg.committed = func(t *testing.T, topic, group string) map[int32]int64 {
		t.Helper()
		d, err := s.Client.DescribeGroup(s.Ctx, topic, group)
		require.NoError(t, err)
		out := map[int32]int64{}
		for _, gp := range d.Partitions {
			out[gp.Partition] = gp.NextOffset
		}
		return out
	}
	tg.createTopic = func(t *testing.T, topic string, partitions int32) {
		t.Helper()
		_, err := s.Client.CreateTopic(s.Ctx, topic, pgmsg.TopicConfig{Partitions: int(partitions)})
		require.NoError(t, err)
	}
	tg.adm = newAdm(t, tg.seeds)
	return tg
}

func nativeRec(r *pgmsg.Record) rec {
	out := rec{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: strp(r.Key), Value: strp(r.Value),
		Timestamp: r.Timestamp.UnixMilli()}
	for k, v := range r.Headers {
		out.Headers = append(out.Headers, header{k, string(v)})
	}
	out.Headers = sortHeaders(out.Headers)
	return out
}

func startKfake(t *testing.T) *target {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	tg := &target{name: "kfake", seeds: c.ListenAddrs()}
	tg.adm = newAdm(t, tg.seeds)
	tg.createTopic = tg.createTopicKafka
	tg.native = func(t *testing.T, topic string, partition int32) []rec {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ends, err := tg.adm.ListEndOffsets(ctx, topic)
		require.NoError(t, err)
		end, _ := ends.Lookup(topic, partition)
		var out []rec
		if end.Offset == 0 {
			return out
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(tg.seeds...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}))
		require.NoError(t, err)
		defer cl.Close()
		for int64(len(out)) < end.Offset {
			fs := cl.PollFetches(ctx)
			require.NoError(t, ctx.Err())
			fs.EachRecord(func(r *kgo.Record) { out = append(out, kgoRec(r)) })
		}
		return out
	}
	tg.committed = func(t *testing.T, topic, group string) map[int32]int64 {
		t.Helper()
		offs, err := tg.adm.FetchOffsets(context.Background(), group)
		require.NoError(t, err)
		out := map[int32]int64{}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == topic {
				out[o.Partition] = o.At
			}
		})
		return out
	}
	return tg
}

func kgoRec(r *kgo.Record) rec {
	out := rec{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: strp(r.Key), Value: strp(r.Value),
		Timestamp: r.Timestamp.UnixMilli()}
	for _, h := range r.Headers {
		out.Headers = append(out.Headers, header{h.Key, string(h.Value)})
	}
	out.Headers = sortHeaders(out.Headers)
	return out
}

func newAdm(t *testing.T, seeds []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// createTopicKafka creates topic with partitions through the Kafka
// protocol.
func (tg *target) createTopicKafka(t *testing.T, topic string, partitions int32) {
	t.Helper()
	resp, err := tg.adm.CreateTopics(context.Background(), partitions, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
}
