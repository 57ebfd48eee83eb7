package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// PubSubOptions are the settings of a pubsub run; the same settings drive
// every implementation compared.
type PubSubOptions struct {
	// Duration of the measured window. Default 10s.
	Duration time.Duration
	// Warmup runs the load before measuring. Default 1s.
	Warmup time.Duration
	// Payload bytes per record (at least 8). Default 1024.
	Payload int
	// Partitions of the topic. Default 4.
	Partitions int
	// Producers publishing concurrently. Default 8.
	Producers int
	// Batch records per publish call. 1 means single-record calls through
	// pgmsg's batching Producer (the seed baseline's SQL then publishes one record
	// per statement). Default 100.
	Batch int
	// Groups consuming concurrently; each group runs one consumer per
	// partition. Default 0 (publish only).
	Groups int
	// Members is the consumers of each group when not one per partition
	// (pgmsg only): the group's membership spreads the partitions over
	// them, and the run reports how long that first rebalance took to
	// settle (PubSubResult.SettleS). Default 0: one per partition.
	Members int
	// ClaimBatch is the most records one claim returns. Default 1000.
	ClaimBatch int
	// Rate caps writes per second across all producers; 0 means as fast as
	// possible.
	Rate float64
	// ReadReplicas are URLs of streaming replicas that pgmsg's consumers
	// read claimed records from (Config.ReadReplicas; pgmsg only).
	ReadReplicas []string
	// Prefill publishes this many records before the run (untimed), for
	// consume-only runs (Producers 0). Default 0.
	Prefill int
	// Poll is how long an idle consumer of the seed baseline's SQL (seed, packed),
	// which nothing wakes, waits before claiming again. Default 10ms.
	Poll time.Duration
	// PgmsgPoll is pgmsg's Config.PollInterval: how often an idle pgmsg
	// consumer, which a notification wakes when records arrive, polls
	// anyway. Default 0: pgmsg's default, what an application gets. (Until
	// 2026-12-03 pgmsg's consumers polled every Poll, as the seed baseline's do;
	// the difference was measured then, in docs/benchmarks.md's history.)
	PgmsgPoll time.Duration
	// PgmsgClaimCooldown is pgmsg's ConsumerOpts.ClaimCooldown: the least
	// time between a notified consumer's claims. Default 0, pgmsg's
	// default; negative: none.
	PgmsgClaimCooldown time.Duration
	// PgmsgClaimCooldownMinRate is pgmsg's
	// ConsumerOpts.ClaimCooldownMinRate: the records per second below
	// which the cooldown does not hold. Default 0, pgmsg's default;
	// negative: the cooldown holds at any rate.
	PgmsgClaimCooldownMinRate int
	// PgmsgClaimGatherWait is pgmsg's Config.ClaimGatherWait: how long a
	// claim waits for the other groups' claims of its partition. Default
	// 0, pgmsg's default; negative: claims are not gathered.
	PgmsgClaimGatherWait time.Duration
	// PgmsgRecordCacheBytes is pgmsg's Config.RecordCacheBytes (0: its
	// default, negative: no record cache).
	PgmsgRecordCacheBytes int64
	// PgmsgSessionTimeout is pgmsg's ConsumerOpts.SessionTimeout (0: its
	// default). franz-go's members, which ImplKafka runs, default to 45 s.
	PgmsgSessionTimeout time.Duration
	// KafkaListener starts the in-process Kafka listener of ImplKafka.
	KafkaListener KafkaListenerFunc
	// KafkaBrokers are the address of a Kafka listener of another process
	// on the same database and schema (pgmsg serve --kafka-listen), used
	// by ImplKafka instead of an in-process one.
	KafkaBrokers []string
	// KafkaServerPID is that process's id: the run reports its CPU time
	// per record (Linux).
	KafkaServerPID int
	// KafkaLinger is the franz-go producers' linger. Default
	// KafkaLingerDefault.
	KafkaLinger time.Duration
	// KafkaNoIdempotence turns the franz-go producers' idempotence off
	// (on by default, as in franz-go: the listener then stores each batch
	// with pgmsg's idempotent publish).
	KafkaNoIdempotence bool
}

func (o *PubSubOptions) defaults() {
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup < 0 {
		o.Warmup = 0
	}
	if o.Payload <= 0 {
		o.Payload = 1024
	}
	o.Payload = max(o.Payload, 8)
	if o.Partitions <= 0 {
		o.Partitions = 4
	}
	if o.Producers < 0 || (o.Producers == 0 && o.Prefill == 0) {
		o.Producers = 8
	}
	if o.Batch <= 0 {
		o.Batch = 100
	}
	if o.ClaimBatch <= 0 {
		o.ClaimBatch = 1000
	}
	if o.Poll <= 0 {
		o.Poll = 10 * time.Millisecond
	}
}

// PubSubResult is the summary of one pubsub run.
type PubSubResult struct {
	Mode       string  `json:"mode"`
	Impl       string  `json:"impl"`
	DurationS  float64 `json:"duration_s"`
	Payload    int     `json:"payload"`
	Partitions int     `json:"partitions"`
	Producers  int     `json:"producers"`
	Batch      int     `json:"batch"`
	Groups     int     `json:"groups"`
	Members    int     `json:"members,omitempty"`
	// SettleS is the time from the members' first Poll (their join) until
	// every partition was owned by one of them and each owned its share
	// (--members only).
	SettleS      float64 `json:"settle_s,omitempty"`
	ClaimBatch   int     `json:"claim_batch"`
	Rate         float64 `json:"rate"`
	Prefill      int     `json:"prefill,omitempty"`
	Writes       int64   `json:"writes"`
	Reads        int64   `json:"reads"`
	WritesPerSec float64 `json:"writes_per_sec"`
	ReadsPerSec  float64 `json:"reads_per_sec"`
	PublishP50MS float64 `json:"publish_p50_ms"`
	PublishP99MS float64 `json:"publish_p99_ms"`
	E2EP50MS     float64 `json:"e2e_p50_ms"`
	E2EP99MS     float64 `json:"e2e_p99_ms"`
	FinalLag     int64   `json:"final_lag"`
	// ReplicaRecords and PrimaryRecords split the records pgmsg's
	// consumers read, warm-up included, between read replicas and the
	// primary (with --read-replica-url only).
	ReplicaRecords int64 `json:"replica_records,omitempty"`
	// GatheredClaims and CachedRecords are pgmsg's claims that went out
	// gathered (Config.ClaimGatherWait) and the records its claims took
	// from its record cache (Config.RecordCacheBytes), warm-up included.
	GatheredClaims int64  `json:"gathered_claims,omitempty"`
	CachedRecords  int64  `json:"cached_records,omitempty"`
	PrimaryRecords int64  `json:"primary_records,omitempty"`
	Errors         int64  `json:"errors"`
	FirstError     string `json:"first_error,omitempty"`
	// ListenerCPUS is the CPU time (user and system) the external Kafka
	// listener's process spent in the measured window, and
	// ListenerCPUPerRecordUS that per record written or read (kafka with
	// --kafka-server-pid only).
	ListenerCPUS           float64 `json:"listener_cpu_s,omitempty"`
	ListenerCPUPerRecordUS float64 `json:"listener_cpu_per_record_us,omitempty"`
	// ProcessCPUS is the CPU time of the bench's own process in the
	// measured window (the driver's client code; for kafka with the
	// listener in this process, the listener and the franz-go clients),
	// and PGCPUS that of the PostgreSQL processes serving the database
	// (when /proc shows them: a server on this machine). The per-record
	// figures divide by the records written plus read.
	ProcessCPUS           float64 `json:"process_cpu_s,omitempty"`
	ProcessCPUPerRecordUS float64 `json:"process_cpu_per_record_us,omitempty"`
	PGCPUS                float64 `json:"pg_cpu_s,omitempty"`
	PGCPUPerRecordUS      float64 `json:"pg_cpu_per_record_us,omitempty"`
}

// asyncPublisher is a driver whose publish need not wait for the
// records' acknowledgement (a Kafka producer's): publishAsync returns once
// vals are handed over, and done reports when they are stored or failed.
type asyncPublisher interface {
	publishAsync(ctx context.Context, vals [][]byte, done func(n int, err error))
}

// cpuMeter is a driver that can tell the CPU time of a server process.
type cpuMeter interface {
	cpuSeconds() (float64, bool)
}

// pubsubDriver is one implementation under test.
type pubsubDriver interface {
	// maxConns is the pool size it needs.
	setup(ctx context.Context) error
	// publish appends vals (one call, one batch) and returns when they are
	// committed.
	publish(ctx context.Context, vals [][]byte) error
	// consumers returns the loops of group g; each calls got for every
	// batch of records it received, until ctx ends.
	consumers(g int, got func(vals [][]byte)) []func(ctx context.Context) error
	// lag is the records published and not yet committed by a group,
	// summed over groups and partitions.
	lag(ctx context.Context) (int64, error)
	teardown(ctx context.Context) error
}

// poolSize is the connections a pubsub run opens: one per producer and
// per consumer, plus a few for setup and notifications. Every
// implementation gets the same.
func (o *PubSubOptions) poolSize() int { return o.Producers + o.Groups*o.consumersPerGroup() + 4 }

// consumersPerGroup is Members, or one per partition.
func (o *PubSubOptions) consumersPerGroup() int {
	if o.Members > 0 {
		return o.Members
	}
	return o.Partitions
}

// RunPubSub runs one pubsub benchmark of impl.
func RunPubSub(ctx context.Context, env *Env, impl string, o PubSubOptions) (*PubSubResult, error) {
	o.defaults()
	if o.Members < 0 || o.Members > o.Partitions {
		return nil, fmt.Errorf("bench: --members must be 1 to --partitions (%d), or 0 for one per partition", o.Partitions)
	}
	if o.Members > 0 && impl != ImplPgmsg && impl != ImplPgmsgIdempotent {
		return nil, fmt.Errorf("bench: --members is for the pgmsg implementations (%s reads with one reader per partition)", impl)
	}
	var d pubsubDriver
	switch impl {
	case ImplPgmsg:
		d = &pgmsgPubSub{env: env, o: o}
	case ImplPgmsgIdempotent:
		d = &pgmsgPubSub{env: env, o: o, idempotent: true}
	case ImplSeed:
		d = &seedPubSub{env: env, o: o}
	case ImplPacked:
		d = &seedPubSub{env: env, o: o, packed: true}
	case ImplCopy:
		if o.Groups > 0 {
			return nil, fmt.Errorf("bench: the copy baseline only publishes: use --groups 0")
		}
		d = &copyPubSub{env: env, o: o}
	case ImplFloor:
		d = &floorPubSub{env: env, o: o}
	case ImplKafka:
		d = &kafkaPubSub{env: env, o: o}
	default:
		return nil, fmt.Errorf("bench: unknown pubsub implementation %q (want pgmsg, pgmsg-idempotent, kafka, seed, packed, copy or floor)", impl)
	}
	if err := d.setup(ctx); err != nil {
		_ = d.teardown(context.WithoutCancel(ctx))
		return nil, err
	}
	defer func() { _ = d.teardown(context.WithoutCancel(ctx)) }()

	if o.Prefill > 0 {
		if env.Progress != nil {
			fmt.Fprintf(env.Progress, "%-12s prefilling %d records ...\n", impl, o.Prefill)
		}
		vals := payloads(min(o.Prefill, 1000), o.Payload)
		now := time.Now()
		for _, v := range vals {
			stamp(v, now)
		}
		for left := o.Prefill; left > 0; left -= len(vals) {
			if err := d.publish(ctx, vals[:min(left, len(vals))]); err != nil {
				return nil, fmt.Errorf("bench: prefill: %w", err)
			}
		}
	}
	// The connection that reads the PostgreSQL processes' ids, opened
	// before the window starts (best effort: no figure without it).
	cpuConn, err := pgx.Connect(ctx, env.URL)
	if err != nil {
		cpuConn = nil
	} else {
		defer func() { _ = cpuConn.Close(context.WithoutCancel(ctx)) }()
	}
	win := newWindow(o.Warmup, o.Duration)
	st := newStats(win)
	runCtx, cancel := context.WithDeadline(ctx, win.end)
	defer cancel()
	// A consume-only run ends when every group has read the prefill.
	var drained time.Time
	var drainOnce sync.Once
	drainAt := int64(o.Groups) * int64(o.Prefill)

	var wg sync.WaitGroup
	for g := 0; g < o.Groups; g++ {
		got := func(vals [][]byte) {
			now := time.Now()
			e2e := make([]time.Duration, len(vals))
			for i, v := range vals {
				from := sentAt(v)
				if from.Before(win.start) {
					from = win.start // prefilled: waiting since the start
				}
				e2e[i] = now.Sub(from)
			}
			st.read(len(vals), e2e)
			if o.Producers == 0 && st.readsAll.Load() >= drainAt {
				drainOnce.Do(func() { drained = now; cancel() })
			}
		}
		for _, loop := range d.consumers(g, got) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A consumer that fails is counted and started again after
				// a moment, as an application's supervisor would.
				for {
					err := loop(runCtx)
					if runCtx.Err() != nil {
						return
					}
					st.fail(err)
					select {
					case <-runCtx.Done():
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
			}()
		}
	}
	// CPU time over the measured window: this process, the PostgreSQL
	// processes serving the database and an external listener's.
	meter, _ := d.(cpuMeter)
	if meter != nil {
		if _, ok := meter.cpuSeconds(); !ok {
			meter = nil
		}
	}
	var cpuA, cpuB cpuSample
	var extA, extB float64
	cpuOK, extOK := false, false
	var cpuWG sync.WaitGroup
	cpuWG.Add(1)
	go func() {
		defer cpuWG.Done()
		select {
		case <-runCtx.Done():
			return
		case <-time.After(time.Until(win.measured)):
		}
		cpuA = takeCPUSample(ctx, cpuConn)
		if meter != nil {
			extA, extOK = meter.cpuSeconds()
		}
		<-runCtx.Done()
		cpuB = takeCPUSample(context.WithoutCancel(ctx), cpuConn)
		cpuOK = true
		if meter != nil {
			var ok bool
			extB, ok = meter.cpuSeconds()
			extOK = extOK && ok
		}
	}()
	async, _ := d.(asyncPublisher)
	perProducer := o.Rate / float64(o.Producers) / float64(o.Batch) // calls per second
	for i := 0; i < o.Producers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vals := payloads(o.Batch, o.Payload)
			// Spread over the interval: together the producers publish
			// at evenly spaced instants, not all at once.
			p := newPacer(perProducer, float64(i)/float64(o.Producers))
			for {
				// t0 is when the call was due: a publish held up by the
				// one before it counts from then (pacer.wait).
				t0, err := p.wait(runCtx)
				if err != nil {
					return
				}
				for _, v := range vals {
					stamp(v, t0)
				}
				if async != nil {
					async.publishAsync(runCtx, vals, func(n int, err error) {
						switch {
						case err != nil:
							if runCtx.Err() == nil {
								st.fail(err)
							}
						case time.Now().Before(win.end):
							st.wrote(n, time.Since(t0))
						}
					})
					continue
				}
				err = d.publish(runCtx, vals)
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					st.fail(err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				st.wrote(len(vals), time.Since(t0))
			}
		}()
	}

	progCtx, stopProg := context.WithCancel(runCtx)
	progDone := make(chan struct{})
	go func() {
		defer close(progDone)
		st.runProgress(progCtx, env, impl, func(el time.Duration, dw, dr int64, iv time.Duration, pub, e2e *hist) string {
			lag := int64(o.Groups)*st.writesAll.Load() - st.readsAll.Load()
			s := fmt.Sprintf("%4s  write %7s/s  pub p50 %6.1fms p99 %6.1fms", el, human(perSec(dw, iv)), pub.quantileMS(0.5), pub.quantileMS(0.99))
			if o.Groups > 0 {
				s += fmt.Sprintf("  read %7s/s  lag %7d  e2e p50 %6.1fms p99 %6.1fms", human(perSec(dr, iv)), max(lag, 0), e2e.quantileMS(0.5), e2e.quantileMS(0.99))
			}
			if n := st.errors.Load(); n > 0 {
				s += fmt.Sprintf("  errors %d", n)
			}
			return s
		})
	}()
	wg.Wait()
	cpuWG.Wait()
	stopProg()
	<-progDone
	endProgress(env)
	end := time.Now()
	if !drained.IsZero() {
		end = drained
	}
	var settle float64
	if s, ok := d.(interface{ settleSeconds() float64 }); ok && o.Members > 0 {
		settle = round(s.settleSeconds(), 2)
	}
	var replicaRecords, primaryRecords, gathered, cached int64
	if rr, ok := d.(interface{ readSplit() (int64, int64) }); ok {
		replicaRecords, primaryRecords = rr.readSplit()
	}
	if rs, ok := d.(interface{ readShare() (int64, int64) }); ok {
		gathered, cached = rs.readShare()
	}
	lag, err := d.lag(context.WithoutCancel(ctx))
	if err != nil {
		st.fail(fmt.Errorf("final lag: %w", err))
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	el := win.elapsed(end)
	r := &PubSubResult{
		Mode: "pubsub", Impl: impl, DurationS: round(el.Seconds(), 2), Payload: o.Payload,
		Partitions: o.Partitions, Producers: o.Producers, Batch: o.Batch, Groups: o.Groups, Members: o.Members,
		ClaimBatch: o.ClaimBatch, Rate: o.Rate, Prefill: o.Prefill,
		Writes: st.writes.n.Load(), Reads: st.reads.n.Load(),
		PublishP50MS: round(st.pubTotal.quantileMS(0.5), 2), PublishP99MS: round(st.pubTotal.quantileMS(0.99), 2),
		E2EP50MS: round(st.e2eTotal.quantileMS(0.5), 2), E2EP99MS: round(st.e2eTotal.quantileMS(0.99), 2),
		FinalLag: lag, Errors: st.errors.Load(), FirstError: st.firstError(),
		SettleS: settle, ReplicaRecords: replicaRecords, PrimaryRecords: primaryRecords, GatheredClaims: gathered, CachedRecords: cached,
	}
	r.WritesPerSec = rate(r.Writes, el)
	r.ReadsPerSec = rate(r.Reads, el)
	if n := r.Writes + r.Reads; n > 0 && cpuOK {
		r.ProcessCPUS = round(cpuB.self-cpuA.self, 2)
		r.ProcessCPUPerRecordUS = round((cpuB.self-cpuA.self)/float64(n)*1e6, 2)
		if pg, ok := pgDelta(cpuA, cpuB); ok {
			r.PGCPUS = round(pg, 2)
			r.PGCPUPerRecordUS = round(pg/float64(n)*1e6, 2)
		}
		if extOK {
			r.ListenerCPUS = round(extB-extA, 2)
			r.ListenerCPUPerRecordUS = round((extB-extA)/float64(n)*1e6, 2)
		}
	}
	return r, nil
}

// spread picks the partition of an unkeyed batch, as pgmsg does.
func spread(partitions int) int32 { return rand.Int32N(int32(partitions)) }
