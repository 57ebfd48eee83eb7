package kafkagroup_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkagroup"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

// Real franz-go clients (kgo group consumers, kadm) against the listener
// with the coordinator, started in-process on 127.0.0.1:0.

type listener struct {
	*pgmsgtest.Env
	// Ctx ends after three minutes.
	Ctx  context.Context
	addr string
}

// newEnv gives the test a schema of its own and a Client on it, with no
// listener yet.
func newEnv(t *testing.T) *listener {
	t.Helper()
	return &listener{Env: pgmsgtest.New(t, pgtest.Pool(t, &pgtest.Opts{MaxConns: 24}), nil), Ctx: pgtest.Context(t, 3*time.Minute)}
}

func listen(t *testing.T) *listener {
	t.Helper()
	b := newEnv(t)
	coord, err := kafkagroup.New(kafkagroup.Config{Client: b.Client, MinSessionTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	srv, err := kafkasrv.New(kafkasrv.Config{Client: b.Client, Groups: coord})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.NoError(t, <-done)
		coord.Close()
	})
	b.addr = ln.Addr().String()
	return b
}

func (l *listener) kclient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(l.addr), kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	return cl
}

func (l *listener) publish(t *testing.T, topic string, from, n int) {
	t.Helper()
	recs := make([]*pgmsg.Record, n)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", from+i), Value: fmt.Appendf(nil, "v%d", from+i)}
	}
	require.NoError(t, l.Client.Publish(l.Ctx, recs, nil))
}

// seen records each (partition, offset) a consumer processed.
type seen struct {
	mu   sync.Mutex
	recs map[[2]int64]int
	n    int
}

func (s *seen) add(r *kgo.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs[[2]int64{int64(r.Partition), r.Offset}]++
	s.n++
}

func (s *seen) count() (distinct, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs), s.n
}

// consumer polls as a member of group, commits what it processed before
// it lets a rebalance happen, and stops (committing, leaving) when stop
// closes. assigned is set once the group has given it a partition.
func (l *listener) consumer(t *testing.T, group string, balancer kgo.GroupBalancer, s *seen, mine *atomic.Int64, assigned *atomic.Bool, stop <-chan struct{}) <-chan struct{} {
	cl := l.kclient(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics("t"), kgo.Balancers(balancer),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if len(m["t"]) > 0 {
				assigned.Store(true)
			}
		}),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.SessionTimeout(3*time.Second),
		kgo.HeartbeatInterval(100*time.Millisecond), kgo.RebalanceTimeout(10*time.Second),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cl.Close()
		for {
			ctx, cancel := context.WithTimeout(l.Ctx, 200*time.Millisecond)
			fs := cl.PollFetches(ctx)
			cancel()
			fs.EachRecord(s.add)
			mine.Add(int64(fs.NumRecords()))
			if err := cl.CommitUncommittedOffsets(l.Ctx); err != nil {
				t.Errorf("commit: %v", err)
			}
			cl.AllowRebalance()
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	return done
}

// Three consumers of each balancer join and leave while records arrive;
// every record is processed exactly once (each commits before it lets a
// rebalance happen), and the group's cursors end at the partitions' ends.
func TestKgoGroupConsumersRebalancing(t *testing.T) {
	for _, bal := range []struct {
		name string
		b    kgo.GroupBalancer
	}{{"range", kgo.RangeBalancer()}, {"roundrobin", kgo.RoundRobinBalancer()},
		{"cooperative-sticky", kgo.CooperativeStickyBalancer()}} {
		t.Run(bal.name, func(t *testing.T) {
			t.Parallel()
			l := listen(t)
			_, err := l.Client.CreateTopic(l.Ctx, "t", pgmsg.TopicConfig{Partitions: 6})
			require.NoError(t, err)
			l.publish(t, "t", 0, 300)
			s := &seen{recs: map[[2]int64]int{}}
			waitFor := func(n int) {
				require.Eventually(t, func() bool { d, _ := s.count(); return d >= n }, time.Minute, 10*time.Millisecond)
			}
			stops := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
			mine := make([]atomic.Int64, 3)
			assigned := make([]atomic.Bool, 3)
			var dones []<-chan struct{}
			// join starts consumer i and waits until the group has given it
			// partitions, so the records published next reach it (on a
			// loaded machine the others could otherwise drain them all
			// before the rebalance ends).
			join := func(i int) {
				dones = append(dones, l.consumer(t, "g-"+bal.name, bal.b, s, &mine[i], &assigned[i], stops[i]))
				require.Eventually(t, assigned[i].Load, time.Minute, 10*time.Millisecond, "consumer %d assigned", i)
			}
			processed := func(i int) {
				require.Eventually(t, func() bool { return mine[i].Load() > 0 }, time.Minute, 10*time.Millisecond, "consumer %d processed", i)
			}
			join(0)
			waitFor(50)
			join(1)
			l.publish(t, "t", 300, 300)
			waitFor(350)
			processed(1)
			join(2)
			l.publish(t, "t", 600, 300)
			waitFor(650)
			processed(2)
			close(stops[0]) // the first leaves
			<-dones[0]
			l.publish(t, "t", 900, 300)
			waitFor(1200)
			close(stops[1])
			close(stops[2])
			<-dones[1]
			<-dones[2]

			distinct, total := s.count()
			require.Equal(t, 1200, distinct, "every record processed")
			require.Equal(t, 1200, total, "none twice")
			for i := range mine {
				require.Positive(t, mine[i].Load(), "consumer %d had partitions", i)
			}
			parts, err := l.Client.ListGroups(l.Ctx, "t", "g-"+bal.name)
			require.NoError(t, err)
			require.Len(t, parts, 6)
			for _, p := range parts {
				require.Equal(t, p.EndOffset, p.NextOffset, "partition %d: the cursor is the committed offset", p.Partition)
				require.Zero(t, p.Lag)
			}
		})
	}
}

func TestKadmGroups(t *testing.T) {
	t.Parallel()
	l := listen(t)
	ctx := l.Ctx
	_, err := l.Client.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 2})
	require.NoError(t, err)
	l.publish(t, "t", 0, 20)
	adm := kadm.NewClient(l.kclient(t))
	t.Cleanup(adm.Close)

	// Commit and fetch offsets as an admin (no membership).
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "t", Partition: 0, At: 3, LeaderEpoch: -1, Metadata: "hello"})
	cr, err := adm.CommitOffsets(ctx, "admin-g", offs)
	require.NoError(t, err)
	require.NoError(t, cr.Error())
	fr, err := adm.FetchOffsets(ctx, "admin-g")
	require.NoError(t, err)
	o, ok := fr.Lookup("t", 0)
	require.True(t, ok)
	require.Equal(t, int64(3), o.At)
	require.Equal(t, "hello", o.Metadata)
	_, ok = fr.Lookup("t", 1)
	require.False(t, ok, "a partition never committed has no offset")
	// The offset is the pgmsg group's cursor (what `pgmsg group list` shows).
	parts, err := l.Client.ListGroups(ctx, "t", "admin-g")
	require.NoError(t, err)
	require.Equal(t, int64(3), parts[0].NextOffset)

	// A group with a consuming member.
	cl := l.kclient(t, kgo.ConsumerGroup("live-g"), kgo.ConsumeTopics("t"), kgo.SessionTimeout(3*time.Second),
		kgo.HeartbeatInterval(100*time.Millisecond), kgo.ClientID("consumer-1"))
	defer cl.Close()
	got := 0
	for got < 20 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, fs.Err())
		got += fs.NumRecords()
	}
	require.NoError(t, cl.CommitUncommittedOffsets(ctx))

	listed, err := adm.ListGroups(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"admin-g", "live-g"}, listed.Groups())
	dg, err := adm.DescribeGroups(ctx, "live-g")
	require.NoError(t, err)
	d := dg["live-g"]
	require.NoError(t, d.Err)
	require.Equal(t, "Stable", d.State)
	require.Equal(t, "consumer", d.ProtocolType)
	require.Len(t, d.Members, 1)
	require.Equal(t, "consumer-1", d.Members[0].ClientID)
	require.Equal(t, "/127.0.0.1", d.Members[0].ClientHost)
	ca, ok := d.Members[0].Assigned.AsConsumer()
	require.True(t, ok)
	require.Len(t, ca.Topics, 1)
	require.Len(t, ca.Topics[0].Partitions, 2)

	live, err := l.Client.ListGroups(ctx, "t", "live-g")
	require.NoError(t, err)
	require.Len(t, live, 2)
	lag, err := adm.Lag(ctx, "live-g")
	require.NoError(t, err)
	require.Zero(t, lag["live-g"].Lag.Total(), "committed everything")

	// Deleting: refused while the member is there, and the offsets of a
	// topic it consumes stay.
	del, err := adm.DeleteGroups(ctx, "live-g")
	require.NoError(t, err)
	require.ErrorIs(t, del["live-g"].Err, kerr.NonEmptyGroup)
	dor, err := adm.DeleteOffsets(ctx, "live-g", kadm.TopicsSet{"t": {0: {}}})
	require.NoError(t, err)
	require.ErrorIs(t, dor.Error(), kerr.GroupSubscribedToTopic)

	cl.Close()
	require.Eventually(t, func() bool {
		dg, err := adm.DescribeGroups(ctx, "live-g")
		return err == nil && dg["live-g"].State == "Empty"
	}, 30*time.Second, 10*time.Millisecond)
	dor, err = adm.DeleteOffsets(ctx, "live-g", kadm.TopicsSet{"t": {0: {}}})
	require.NoError(t, err)
	require.NoError(t, dor.Error())
	fr, err = adm.FetchOffsets(ctx, "live-g")
	require.NoError(t, err)
	_, ok = fr.Lookup("t", 0)
	require.False(t, ok)
	o, ok = fr.Lookup("t", 1)
	require.True(t, ok)
	require.Equal(t, live[1].EndOffset, o.At)
	del, err = adm.DeleteGroups(ctx, "live-g", "admin-g", "nothing")
	require.NoError(t, err)
	require.NoError(t, del["live-g"].Err)
	require.NoError(t, del["admin-g"].Err)
	require.ErrorIs(t, del["nothing"].Err, kerr.GroupIDNotFound)
	parts, err = l.Client.ListGroups(ctx, "t", "")
	require.NoError(t, err)
	require.Empty(t, parts, "the groups' cursors went with them")
}

// killer dials a client's connections and can cut them all, and refuse
// new ones: the client is as good as crashed (it never leaves the group).
type killer struct {
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
}

func (k *killer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return nil, fmt.Errorf("crashed")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err == nil {
		k.conns = append(k.conns, c)
	}
	return c, err
}

func (k *killer) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	for _, c := range k.conns {
		_ = c.Close()
	}
}

// A consumer that crashes (no LeaveGroup) is removed when its session
// times out; the others take its partitions over from its last commit:
// nothing is lost, and only what it processed without committing is
// processed again.
func TestKgoConsumerCrash(t *testing.T) {
	t.Parallel()
	l := listen(t)
	_, err := l.Client.CreateTopic(l.Ctx, "t", pgmsg.TopicConfig{Partitions: 4})
	require.NoError(t, err)
	l.publish(t, "t", 0, 200)
	s := &seen{recs: map[[2]int64]int{}}
	var uncommitted atomic.Int64 // records whose commit failed
	k := &killer{}
	run := func(dialer func(context.Context, string, string) (net.Conn, error), stop <-chan struct{}) <-chan struct{} {
		opts := []kgo.Opt{kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
			kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100 * time.Millisecond),
			kgo.RebalanceTimeout(10 * time.Second), kgo.RetryTimeout(time.Second)}
		if dialer != nil {
			opts = append(opts, kgo.Dialer(dialer))
		}
		cl := l.kclient(t, opts...)
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer cl.Close()
			for {
				ctx, cancel := context.WithTimeout(l.Ctx, 200*time.Millisecond)
				fs := cl.PollFetches(ctx)
				cancel()
				fs.EachRecord(s.add)
				cctx, cancel := context.WithTimeout(l.Ctx, 2*time.Second)
				if err := cl.CommitUncommittedOffsets(cctx); err != nil {
					uncommitted.Add(int64(fs.NumRecords()))
				}
				cancel()
				cl.AllowRebalance()
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
		return done
	}
	stopA, stopB := make(chan struct{}), make(chan struct{})
	doneA := run(k.dial, stopA)
	require.Eventually(t, func() bool { d, _ := s.count(); return d >= 100 }, time.Minute, 10*time.Millisecond)
	doneB := run(nil, stopB)
	require.Eventually(t, func() bool { d, _ := s.count(); return d >= 200 }, time.Minute, 10*time.Millisecond)
	k.kill()
	l.publish(t, "t", 200, 200)
	// b alone gets every partition once a's session has expired.
	require.Eventually(t, func() bool { d, _ := s.count(); return d >= 400 }, time.Minute, 10*time.Millisecond)
	close(stopB)
	<-doneB
	close(stopA)
	<-doneA

	distinct, total := s.count()
	require.Equal(t, 400, distinct, "nothing lost")
	require.LessOrEqual(t, int64(total-distinct), uncommitted.Load(),
		"only records processed without a commit are processed again")
	parts, err := l.Client.ListGroups(l.Ctx, "t", "g")
	require.NoError(t, err)
	for _, p := range parts {
		require.Equal(t, p.EndOffset, p.NextOffset)
	}
}

// Two listeners on one schema form a cluster: each coordinates its share
// of the groups (kafkasrv's registry rule). When the process that
// coordinates a group stops, the other takes the group over from
// PostgreSQL: its consumers carry on from their commits, nothing lost.
func TestKgoGroupCoordinatorStops(t *testing.T) {
	t.Parallel()
	b := newEnv(t)
	_, err := b.Client.CreateTopic(b.Ctx, "t", pgmsg.TopicConfig{Partitions: 4})
	require.NoError(t, err)
	l := b
	l.publish(t, "t", 0, 200)
	type proc struct {
		srv   *kafkasrv.Server
		coord *kafkagroup.Coordinator
		addr  string
		stop  func()
	}
	start := func() *proc {
		p := &proc{}
		var err error
		p.coord, err = kafkagroup.New(kafkagroup.Config{Client: b.Client, MinSessionTimeout: 100 * time.Millisecond,
			Owns: func(g string) bool { return p.srv.OwnsGroup(g) }})
		require.NoError(t, err)
		p.srv, err = kafkasrv.New(kafkasrv.Config{Client: b.Client, Groups: p.coord, Cluster: true, NodeID: -1,
			SessionTimeout: time.Second})
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		p.addr = ln.Addr().String()
		done := make(chan error, 1)
		go func() { done <- p.srv.Serve(ln) }()
		var once sync.Once
		p.stop = func() {
			once.Do(func() {
				require.NoError(t, p.srv.Close())
				require.NoError(t, <-done)
				p.coord.Close()
			})
		}
		t.Cleanup(p.stop)
		return p
	}
	pa, pb := start(), start()
	// A group that A coordinates, once both listeners see both (asked
	// over the wire, as a client would: FindCoordinator).
	admin, err := kgo.NewClient(kgo.SeedBrokers(pa.addr))
	require.NoError(t, err)
	defer admin.Close()
	var group string
	require.Eventually(t, func() bool {
		md := kmsg.NewPtrMetadataRequest()
		mr, err := md.RequestWith(b.Ctx, admin)
		if err != nil || len(mr.Brokers) != 2 {
			return false
		}
		for i := range 32 {
			fc := kmsg.NewPtrFindCoordinatorRequest()
			fc.CoordinatorKey = fmt.Sprintf("g%d", i)
			fr, err := fc.RequestWith(b.Ctx, admin)
			if err == nil && fr.ErrorCode == 0 && net.JoinHostPort(fr.Host, fmt.Sprint(fr.Port)) == pa.addr {
				group = fc.CoordinatorKey
				return true
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond)

	s := &seen{recs: map[[2]int64]int{}}
	var uncommitted atomic.Int64
	run := func(stop <-chan struct{}) <-chan struct{} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(pa.addr, pb.addr), kgo.MetadataMinAge(100*time.Millisecond),
			kgo.ConsumerGroup(group), kgo.ConsumeTopics("t"), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
			kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(100*time.Millisecond),
			kgo.RebalanceTimeout(10*time.Second))
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer cl.Close()
			for {
				ctx, cancel := context.WithTimeout(b.Ctx, 200*time.Millisecond)
				fs := cl.PollFetches(ctx)
				cancel()
				fs.EachRecord(s.add)
				cctx, cancel := context.WithTimeout(b.Ctx, 10*time.Second)
				if err := cl.CommitUncommittedOffsets(cctx); err != nil {
					uncommitted.Add(int64(fs.NumRecords()))
				}
				cancel()
				cl.AllowRebalance()
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
		return done
	}
	stop := make(chan struct{})
	d1, d2 := run(stop), run(stop)
	require.Eventually(t, func() bool { d, _ := s.count(); return d >= 200 }, time.Minute, 10*time.Millisecond)
	pa.stop() // the group's coordinator goes away
	l.publish(t, "t", 200, 200)
	require.Eventually(t, func() bool { d, _ := s.count(); return d >= 400 }, time.Minute, 10*time.Millisecond)
	close(stop)
	<-d1
	<-d2

	distinct, total := s.count()
	t.Logf("%d records, %d processed, %d in polls whose commit failed", distinct, total, uncommitted.Load())
	require.Equal(t, 400, distinct, "nothing lost")
	require.LessOrEqual(t, int64(total-distinct), uncommitted.Load(), "only uncommitted records again")
	parts, err := b.Client.ListGroups(b.Ctx, "t", group)
	require.NoError(t, err)
	for _, p := range parts {
		require.Equal(t, p.EndOffset, p.NextOffset)
	}
}
