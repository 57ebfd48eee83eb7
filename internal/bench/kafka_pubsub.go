package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
)

// KafkaListenerFunc starts a Kafka listener (internal/kafkasrv with its
// group coordinator) over c and returns the address clients dial and a
// stop function. The CLI provides it: the listener's packages sit above
// this one.
type KafkaListenerFunc func(ctx context.Context, c *pgmsg.Client) (addr string, stop func(), err error)

// KafkaLingerDefault is the franz-go producers' linger of ImplKafka.
const KafkaLingerDefault = 5 * time.Millisecond

// kafkaPubSub drives the log through pgmsg's Kafka listener with franz-go
// clients, as a Kafka application would: one producer client per
// producer (acks=all, idempotent, PubSubOptions.KafkaLinger), records
// produced asynchronously, each call's records counted once acknowledged;
// one group member per partition and group (kgo's consumer group, the
// classic protocol), reading through Fetch. The listener is in this
// process (PubSubOptions.KafkaListener, on a pool of the same size the
// native driver gets) or another one (PubSubOptions.KafkaBrokers, e.g.
// pgmsg serve --kafka-listen on the same database and schema).
type kafkaPubSub struct {
	env   *Env
	o     PubSubOptions
	pool  *pgxpool.Pool // setup, teardown and lag
	guard *schemaGuard
	c     *pgmsg.Client
	topic string

	lpool    *pgxpool.Pool // the in-process listener's
	lc       *pgmsg.Client
	stopL    func()
	seeds    []string
	prods    chan *kgo.Client
	allProds []*kgo.Client
	members  [][]*kgo.Client
}

func (d *kafkaPubSub) setup(ctx context.Context) error {
	var err error
	if d.pool, err = newPool(ctx, d.env.URL, 4, ""); err != nil {
		return err
	}
	if d.guard, err = ensureSchema(ctx, d.pool, d.env.Schema, d.env.Force); err != nil {
		return err
	}
	if d.c, err = pgmsg.NewClient(d.pool, &pgmsg.Config{Schema: d.env.Schema}); err != nil {
		return err
	}
	d.topic = "bench-" + randomSuffix()
	if _, err := d.c.CreateTopic(ctx, d.topic, pgmsg.TopicConfig{Partitions: d.o.Partitions}); err != nil {
		d.topic = ""
		return err
	}
	switch {
	case len(d.o.KafkaBrokers) > 0:
		d.seeds = d.o.KafkaBrokers
	case d.o.KafkaListener != nil:
		if d.lpool, err = newPool(ctx, d.env.URL, d.o.poolSize(), ""); err != nil {
			return err
		}
		if d.lc, err = pgmsg.NewClient(d.lpool, &pgmsg.Config{Schema: d.env.Schema, PollInterval: d.o.PgmsgPoll,
			ClaimGatherWait: d.o.PgmsgClaimGatherWait, RecordCacheBytes: d.o.PgmsgRecordCacheBytes}); err != nil {
			return err
		}
		addr, stop, err := d.o.KafkaListener(ctx, d.lc)
		if err != nil {
			return fmt.Errorf("bench: start the Kafka listener: %w", err)
		}
		d.stopL = stop
		d.seeds = []string{addr}
	default:
		return errors.New("bench: the kafka implementation needs a listener: KafkaListener or KafkaBrokers")
	}
	linger := d.o.KafkaLinger
	if linger == 0 {
		linger = KafkaLingerDefault
	}
	d.prods = make(chan *kgo.Client, max(d.o.Producers, 1))
	for i := 0; i < d.o.Producers; i++ {
		opts := []kgo.Opt{kgo.SeedBrokers(d.seeds...), kgo.DefaultProduceTopic(d.topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(linger),
			kgo.MaxBufferedRecords(max(10*d.o.Batch, 1000)), kgo.ProducerBatchCompression(kgo.NoCompression())}
		if d.o.KafkaNoIdempotence {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return err
		}
		d.allProds = append(d.allProds, cl)
		d.prods <- cl
	}
	return d.joinGroups(ctx)
}

// joinGroups starts one member per partition in each group and waits
// until each holds one partition, so that joins and rebalances happen
// before the run (as the native driver's joinGroups does).
func (d *kafkaPubSub) joinGroups(ctx context.Context) error {
	if d.o.Groups == 0 {
		return nil
	}
	var assigned atomic.Int64 // members holding exactly one partition
	d.members = make([][]*kgo.Client, d.o.Groups)
	for g := range d.members {
		for i := 0; i < d.o.Partitions; i++ {
			var mu sync.Mutex
			held := 0
			set := func(n int) {
				mu.Lock()
				defer mu.Unlock()
				was := held == 1
				held += n
				if is := held == 1; is != was {
					if is {
						assigned.Add(1)
					} else {
						assigned.Add(-1)
					}
				}
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(d.seeds...), kgo.ConsumerGroup(groupName(g)), kgo.ConsumeTopics(d.topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.ClientID(fmt.Sprintf("bench-%d", i)),
				kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { set(len(m[d.topic])) }),
				kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { set(-len(m[d.topic])) }),
				kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { set(-len(m[d.topic])) }))
			if err != nil {
				return err
			}
			d.members[g] = append(d.members[g], cl)
		}
	}
	// kgo joins on the first poll: poll each member briefly until all are
	// settled (nothing is published yet).
	deadline := time.Now().Add(60 * time.Second)
	for assigned.Load() != int64(d.o.Groups*d.o.Partitions) {
		if time.Now().After(deadline) {
			return errors.New("bench: Kafka consumer groups did not settle (one partition per member) within 60s")
		}
		var wg sync.WaitGroup
		for _, ms := range d.members {
			for _, cl := range ms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
					defer cancel()
					cl.PollFetches(pctx)
				}()
			}
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (d *kafkaPubSub) publish(ctx context.Context, vals [][]byte) error {
	if len(d.allProds) == 0 {
		// A consume-only run's prefill (no producers): stored natively,
		// as the pgmsg driver's is, so that both read the same log.
		recs := make([]*pgmsg.Record, len(vals))
		for i, v := range vals {
			recs[i] = &pgmsg.Record{Topic: d.topic, Value: v}
		}
		return d.c.Publish(ctx, recs, nil)
	}
	errc := make(chan error, 1)
	d.publishAsync(ctx, vals, func(_ int, err error) { errc <- err })
	return <-errc
}

// publishAsync produces vals and returns once they are buffered (waiting
// for room when the producer's buffer is full); done is called once every
// record is acknowledged or failed.
func (d *kafkaPubSub) publishAsync(ctx context.Context, vals [][]byte, done func(n int, err error)) {
	cl := <-d.prods
	defer func() { d.prods <- cl }()
	left := atomic.Int64{}
	left.Store(int64(len(vals)))
	var errOnce sync.Once
	var first error
	for _, v := range vals {
		// The caller reuses vals: the record keeps a copy.
		r := &kgo.Record{Value: append([]byte(nil), v...)}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				errOnce.Do(func() { first = err })
			}
			if left.Add(-1) == 0 {
				done(len(vals), first)
			}
		})
	}
}

func (d *kafkaPubSub) consumers(g int, got func(vals [][]byte)) []func(ctx context.Context) error {
	loops := make([]func(ctx context.Context) error, len(d.members[g]))
	for i, cl := range d.members[g] {
		loops[i] = func(ctx context.Context) error {
			vals := make([][]byte, 0, d.o.ClaimBatch)
			for ctx.Err() == nil {
				fs := cl.PollRecords(ctx, d.o.ClaimBatch)
				if ctx.Err() != nil {
					return nil
				}
				var ferr error
				fs.EachError(func(_ string, _ int32, err error) {
					if ferr == nil && !errors.Is(err, context.Canceled) {
						ferr = err
					}
				})
				fs.EachPartition(func(p kgo.FetchTopicPartition) {
					if len(p.Records) == 0 {
						return
					}
					vals = vals[:0]
					for _, r := range p.Records {
						vals = append(vals, r.Value)
					}
					got(vals)
				})
				if ferr != nil {
					return ferr
				}
			}
			return nil
		}
	}
	return loops
}

func (d *kafkaPubSub) lag(ctx context.Context) (int64, error) {
	if d.o.Groups == 0 {
		return 0, nil
	}
	// The groups' offsets are committed every 5 s (kgo's autocommit) and
	// when a member leaves: commit now, then read the cursors natively.
	for _, ms := range d.members {
		for _, cl := range ms {
			_ = cl.CommitUncommittedOffsets(ctx)
		}
	}
	gs, err := d.c.ListGroups(ctx, d.topic, "")
	if err != nil {
		return 0, err
	}
	var n int64
	for _, g := range gs {
		n += g.Lag
	}
	return n, nil
}

// cpuSeconds is the CPU time of the external listener's process
// (PubSubOptions.KafkaServerPID), user and system, from /proc.
func (d *kafkaPubSub) cpuSeconds() (float64, bool) {
	if d.o.KafkaServerPID <= 0 {
		return 0, false
	}
	s, _, err := cpuSeconds(d.o.KafkaServerPID, false)
	if err != nil {
		return 0, false
	}
	return s, true
}

func (d *kafkaPubSub) teardown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, cl := range d.allProds {
		_ = cl.Flush(ctx)
		cl.Close()
	}
	var wg sync.WaitGroup
	for _, ms := range d.members {
		for _, cl := range ms {
			wg.Add(1)
			go func() { defer wg.Done(); cl.Close() }()
		}
	}
	wg.Wait()
	if d.stopL != nil {
		d.stopL()
	}
	if d.lc != nil {
		d.lc.Close()
	}
	if d.lpool != nil {
		d.lpool.Close()
	}
	if d.c != nil {
		if d.topic != "" {
			_ = d.c.DeleteTopic(ctx, d.topic)
		}
		d.c.Close()
	}
	if d.guard != nil {
		d.guard.release(ctx)
	}
	if d.pool != nil {
		d.pool.Close()
	}
	return nil
}
