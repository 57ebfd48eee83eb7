package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg"
)

// pgmsgPubSub drives the log through the public API, as an application
// would: Client.Publish for batches, the batching Producer for single
// records, one Consumer per partition and group.
type pgmsgPubSub struct {
	env   *Env
	o     PubSubOptions
	pool  *pgxpool.Pool
	guard *schemaGuard
	c     *pgmsg.Client
	prod  *pgmsg.Producer
	topic string
	// members[g][i] is consumer i of group g, joined in setup.
	members [][]*pgmsg.Consumer
	// settle is how long the groups took to settle after the joins.
	settle time.Duration
	// replicas are pools on PubSubOptions.ReadReplicas.
	replicas []*pgxpool.Pool
	// idempotent publishes with producer ids (ImplPgmsgIdempotent):
	// producers hands each publishing call a producer of its own.
	idempotent bool
	producers  chan *idemProducer
}

// idemProducer is one idempotent publisher: its id and next sequence.
type idemProducer struct {
	id  string
	seq int64
}

func (d *pgmsgPubSub) setup(ctx context.Context) error {
	var err error
	if d.pool, err = newPool(ctx, d.env.URL, d.o.poolSize(), ""); err != nil {
		return err
	}
	if d.guard, err = ensureSchema(ctx, d.pool, d.env.Schema, d.env.Force); err != nil {
		return err
	}
	for _, u := range d.o.ReadReplicas {
		p, err := newPool(ctx, u, d.o.poolSize(), "")
		if err != nil {
			return fmt.Errorf("bench: read replica: %w", err)
		}
		d.replicas = append(d.replicas, p)
	}
	if d.c, err = pgmsg.NewClient(d.pool, &pgmsg.Config{Schema: d.env.Schema, PollInterval: d.o.PgmsgPoll,
		ReadReplicas: d.replicas, ClaimGatherWait: d.o.PgmsgClaimGatherWait,
		RecordCacheBytes: d.o.PgmsgRecordCacheBytes}); err != nil {
		return err
	}
	d.topic = "bench-" + randomSuffix()
	if _, err := d.c.CreateTopic(ctx, d.topic, pgmsg.TopicConfig{Partitions: d.o.Partitions}); err != nil {
		d.topic = ""
		return err
	}
	for g := 0; g < d.o.Groups; g++ {
		if _, err := d.c.CreateGroup(ctx, d.topic, groupName(g), pgmsg.PositionEarliest); err != nil {
			return err
		}
	}
	if err := d.joinGroups(ctx); err != nil {
		return err
	}
	if d.o.Batch == 1 {
		if d.prod, err = d.c.NewProducer(&pgmsg.ProducerConfig{Idempotent: d.idempotent}); err != nil {
			return err
		}
	} else if d.idempotent {
		d.producers = make(chan *idemProducer, max(d.o.Producers, 1))
		for i := 0; i < cap(d.producers); i++ {
			d.producers <- &idemProducer{id: fmt.Sprintf("bench-%s-%d", randomSuffix(), i)}
		}
	}
	return nil
}

func groupName(g int) string { return fmt.Sprintf("bench-g%d", g) }

func (d *pgmsgPubSub) publish(ctx context.Context, vals [][]byte) error {
	if d.prod != nil {
		recs := make([]*pgmsg.Record, len(vals))
		for i, v := range vals {
			recs[i] = &pgmsg.Record{Topic: d.topic, Value: v}
		}
		return d.prod.ProduceSync(ctx, recs...)
	}
	recs := make([]*pgmsg.Record, len(vals))
	for i, v := range vals {
		recs[i] = &pgmsg.Record{Topic: d.topic, Value: v}
	}
	if d.producers != nil {
		p := <-d.producers
		defer func() { d.producers <- p }()
		_, err := d.c.PublishIdempotent(ctx, p.id, p.seq, recs, nil)
		p.seq += int64(len(recs))
		return err
	}
	return d.c.Publish(ctx, recs, nil)
}

func (d *pgmsgPubSub) settleSeconds() float64 { return d.settle.Seconds() }

// joinGroups creates the consumers (one per partition in each group, or
// Members) and waits until the membership has given each its share of the
// partitions, so that a group's join and first rebalance (a few
// heartbeats) happen before the run, as the seed baseline's statically
// assigned readers need none.
func (d *pgmsgPubSub) joinGroups(ctx context.Context) error {
	d.members = make([][]*pgmsg.Consumer, d.o.Groups)
	per := d.o.consumersPerGroup()
	for g := range d.members {
		for i := 0; i < per; i++ {
			cn, err := d.c.NewConsumer(d.topic, groupName(g), &pgmsg.ConsumerOpts{
				Claim:        pgmsg.ClaimOpts{MaxRecords: d.o.ClaimBatch, Member: fmt.Sprintf("bench-%d", i)},
				PollInterval: d.o.PgmsgPoll, ClaimCooldown: d.o.PgmsgClaimCooldown,
				ClaimCooldownMinRate: d.o.PgmsgClaimCooldownMinRate, SessionTimeout: d.o.PgmsgSessionTimeout,
			})
			if err != nil {
				return err
			}
			d.members[g] = append(d.members[g], cn)
		}
	}
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for {
		// Nothing is published yet: Poll only joins (its first call) and
		// waits; the heartbeats rebalance in the background.
		errs := make(chan error, d.o.Groups*per)
		var wg sync.WaitGroup
		for _, ms := range d.members {
			for _, cn := range ms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
					defer cancel()
					if _, err := cn.Poll(pctx); err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
						errs <- err
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		if settled(d.members, d.topic, d.o.Partitions) {
			d.settle = time.Since(start)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: consumer groups did not settle (every partition owned, %d to %d a member) within 60s",
				d.o.Partitions/per, (d.o.Partitions+per-1)/per)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// settled: in every group each partition is owned by one member and
// each member owns its even share (partitions/members, rounded down or up).
func settled(groups [][]*pgmsg.Consumer, topic string, partitions int) bool {
	for _, ms := range groups {
		lo, hi := partitions/len(ms), (partitions+len(ms)-1)/len(ms)
		owned := make(map[int32]bool, partitions)
		for _, cn := range ms {
			ps := cn.Assignment()[topic]
			if len(ps) < lo || len(ps) > hi {
				return false
			}
			for _, p := range ps {
				if owned[p] {
					return false
				}
				owned[p] = true
			}
		}
		if len(owned) != partitions {
			return false
		}
	}
	return true
}

func (d *pgmsgPubSub) consumers(g int, got func(vals [][]byte)) []func(ctx context.Context) error {
	loops := make([]func(ctx context.Context) error, len(d.members[g]))
	for i, cn := range d.members[g] {
		loops[i] = func(ctx context.Context) error {
			vals := make([][]byte, 0, d.o.ClaimBatch)
			return cn.Run(ctx, func(_ context.Context, cl *pgmsg.Claim) error {
				vals = vals[:0]
				for _, r := range cl.Records {
					vals = append(vals, r.Value)
				}
				got(vals)
				return nil
			})
		}
	}
	return loops
}

func (d *pgmsgPubSub) lag(ctx context.Context) (int64, error) {
	if d.o.Groups == 0 {
		return 0, nil
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

// readSplit is how many records the consumers read from read replicas and
// from the primary (zero without PubSubOptions.ReadReplicas).
func (d *pgmsgPubSub) readSplit() (replica, primary int64) {
	rs := d.c.ReplicaStats()
	if rs == nil {
		return 0, 0
	}
	for _, r := range rs.Replicas {
		replica += r.Records
	}
	return replica, rs.PrimaryRecords
}

// readShare is how many claims went out gathered and how many records
// claims took from the record cache.
func (d *pgmsgPubSub) readShare() (gathered, cached int64) {
	return d.c.GatheredClaims(), d.c.CachedRecordsServed()
}

func (d *pgmsgPubSub) teardown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if d.prod != nil {
		_ = d.prod.Close(ctx)
	}
	for _, ms := range d.members {
		for _, cn := range ms {
			cn.Close()
		}
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
	for _, p := range d.replicas {
		p.Close()
	}
	return nil
}
