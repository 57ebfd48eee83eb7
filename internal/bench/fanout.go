package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgcluster"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// fanoutJoinWave is how many of a run's groups join at a time.
const fanoutJoinWave = 50

// fanoutPublishers publish at evenly spaced instants, so that a slow call
// does not hold the rate back.
const fanoutPublishers = 4

// FanoutOptions configure RunFanout.
type FanoutOptions struct {
	// URL of the database; empty starts a throwaway PostgreSQL.
	URL string
	// Schema the runs work in: created and migrated if missing, dropped
	// at the end if RunFanout created it.
	Schema string
	// Groups are the runs: one per count, each with that many groups (one
	// consumer each, the pgmsg defaults) reading a topic of its own.
	Groups []int
	// Partitions of each run's topic. Default 4.
	Partitions int
	// Rate is the records published per second, in calls of Batch
	// records. Defaults 1,000 and 10.
	Rate  float64
	Batch int
	// Payload bytes per record (at least 8). Default 100.
	Payload int
	// Warmup runs the load before measuring; Duration is the measured
	// window. Defaults 10s and 30s.
	Warmup, Duration time.Duration
	// PoolSize is the consumers' client's pool (the publishers have one of
	// their own). Default 32.
	PoolSize int
	// MaxRecords, ClaimCooldown and ClaimCooldownMinRate are the
	// consumers' (pgmsg.ConsumerOpts; 0: pgmsg's defaults).
	MaxRecords           int
	ClaimCooldown        time.Duration
	ClaimCooldownMinRate int
	// ConsumerClaimRate is the consumers' client's claim budget
	// (pgmsg.Config; 0: pgmsg's default, negative: none).
	ConsumerClaimRate int
	Progress          io.Writer
}

func (o FanoutOptions) withDefaults() FanoutOptions {
	if o.Schema == "" {
		o.Schema = "pgmsg_fanout"
	}
	if len(o.Groups) == 0 {
		o.Groups = []int{5, 1000}
	}
	if o.Partitions <= 0 {
		o.Partitions = 4
	}
	if o.Rate <= 0 {
		o.Rate = 1000
	}
	if o.Batch <= 0 {
		o.Batch = 10
	}
	o.Payload = max(o.Payload, 8)
	if o.Payload == 8 {
		o.Payload = 100
	}
	if o.Warmup <= 0 {
		o.Warmup = 10 * time.Second
	}
	if o.Duration <= 0 {
		o.Duration = 30 * time.Second
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 32
	}
	return o
}

// FanoutRow is one run: groups reading a topic written at the rate.
type FanoutRow struct {
	Groups       int     `json:"groups"`
	WritesPerSec float64 `json:"writes_per_sec"`
	// DeliveredPerSec: records handed to the groups' handlers, all groups.
	DeliveredPerSec float64 `json:"delivered_per_sec"`
	// LagMax and LagP99 are a group's lag in records (published less
	// handled), sampled every second of the window for every group.
	LagMax int64 `json:"lag_max"`
	LagP99 int64 `json:"lag_p99"`
	// E2EP50MS ... : publish call to handler, every delivered record.
	E2EP50MS float64 `json:"e2e_p50_ms"`
	E2EP99MS float64 `json:"e2e_p99_ms"`
	// PgCPUPct and ProcessCPUPct are % of a core over the window;
	// PgUSPerRecord and ProcessUSPerRecord per delivered record (-1: not
	// measurable).
	PgCPUPct           float64 `json:"pg_cpu_pct"`
	PgUSPerRecord      float64 `json:"pg_us_per_record"`
	ProcessCPUPct      float64 `json:"process_cpu_pct"`
	ProcessUSPerRecord float64 `json:"process_us_per_record"`
	Errors             int64   `json:"errors"`
	FirstError         string  `json:"first_error,omitempty"`
}

// FanoutResult is what RunFanout measured.
type FanoutResult struct {
	Partitions int         `json:"partitions"`
	Rate       float64     `json:"rate"`
	Rows       []FanoutRow `json:"rows"`
	Server     ServerInfo  `json:"server"`
}

// RunFanout runs, one after the other on one server, each count of
// groups reading one topic published at the same rate, and measures
// whether every group keeps up and the CPU per delivered record
// (docs/benchmarks.md, "Many groups").
func RunFanout(ctx context.Context, o FanoutOptions) (*FanoutResult, error) {
	o = o.withDefaults()
	logf := func(format string, a ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "fanout: "+format+"\n", a...)
		}
	}
	url := o.URL
	if url == "" {
		logf("no database URL: starting a throwaway PostgreSQL ...")
		cl, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"max_connections": "200"}})
		if err != nil {
			return nil, err
		}
		defer func() { _ = cl.Stop() }()
		url = cl.URL
	}
	info, err := Describe(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to PostgreSQL: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(o.PoolSize)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := pgmsgmigrate.ValidateSchema(o.Schema); err != nil {
		return nil, err
	}
	var existed bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, o.Schema).Scan(&existed); err != nil {
		return nil, err
	}
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: o.Schema})
	if err != nil {
		return nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		return nil, err
	}
	if !existed {
		defer func() {
			_, _ = pool.Exec(context.Background(), fmt.Sprintf("DROP SCHEMA %s CASCADE", o.Schema))
		}()
	}
	// The publishers have a pool of their own, as publishing processes
	// would: in the consumers' they would queue behind a thousand claims.
	pcfg := cfg.Copy()
	pcfg.MaxConns = fanoutPublishers
	pubPool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	defer pubPool.Close()
	pg := findServerCPU(ctx, pool)
	if pg.postmaster == 0 {
		logf("the server is not on this machine: no PostgreSQL CPU figures")
	}
	res := &FanoutResult{Partitions: o.Partitions, Rate: o.Rate, Server: *info}
	for _, g := range o.Groups {
		row, err := fanoutRun(ctx, pool, pubPool, pg, o, g, logf)
		if err != nil {
			return nil, err
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// fanoutRun is one run of RunFanout: groups groups on a topic of their
// own, through a client of their own on pool.
func fanoutRun(ctx context.Context, pool, pubPool *pgxpool.Pool, pg serverCPU, o FanoutOptions, groups int,
	logf func(string, ...any)) (FanoutRow, error) {
	client, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: o.Schema, ConsumerClaimRate: o.ConsumerClaimRate})
	if err != nil {
		return FanoutRow{}, err
	}
	defer client.Close()
	pub, err := pgmsg.NewClient(pubPool, &pgmsg.Config{Schema: o.Schema})
	if err != nil {
		return FanoutRow{}, err
	}
	defer pub.Close()
	topic := fmt.Sprintf("fanout-%d-%s", groups, randomSuffix())
	if _, err := client.CreateTopic(ctx, topic, pgmsg.TopicConfig{Partitions: o.Partitions}); err != nil {
		return FanoutRow{}, err
	}
	defer func() { _ = client.DeleteTopic(context.WithoutCancel(ctx), topic) }()

	var (
		published atomic.Int64
		handled   = make([]atomic.Int64, groups)
		inWindow  atomic.Bool
		delivered atomic.Int64 // in the window
		e2e       = newHist()
		e2eMu     sync.Mutex
		errMu     sync.Mutex
		errN      int64
		firstErr  string
	)
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		errN++
		if firstErr == "" {
			firstErr = err.Error()
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	consumers := make([]*pgmsg.Consumer, 0, groups)
	defer func() {
		cancel()
		wg.Wait()
		for _, cn := range consumers {
			cn.Close()
		}
	}()
	logf("%d groups: joining ...", groups)
	// The groups join in waves, each joined (its member owns the topic's
	// partitions) before the next starts and all before anything is
	// published: a thousand first heartbeats at once queue for the pool
	// past their timeout.
	for first := 0; first < groups; first += fanoutJoinWave {
		wave := min(groups-first, fanoutJoinWave)
		for g := first; g < first+wave; g++ {
			cn, err := client.NewConsumer(topic, fmt.Sprintf("g%d", g), &pgmsg.ConsumerOpts{
				Claim: pgmsg.ClaimOpts{MaxRecords: o.MaxRecords}, ClaimCooldown: o.ClaimCooldown,
				ClaimCooldownMinRate: o.ClaimCooldownMinRate})
			if err != nil {
				return FanoutRow{}, err
			}
			consumers = append(consumers, cn)
			wg.Add(1)
			go func() {
				defer wg.Done()
				var lat []time.Duration
				err := cn.Run(runCtx, func(_ context.Context, cl *pgmsg.Claim) error {
					handled[g].Add(int64(len(cl.Records)))
					if !inWindow.Load() {
						return nil
					}
					delivered.Add(int64(len(cl.Records)))
					now := time.Now()
					lat = lat[:0]
					for _, r := range cl.Records {
						lat = append(lat, now.Sub(sentAt(r.Value)))
					}
					e2eMu.Lock()
					e2e.addMany(lat)
					e2eMu.Unlock()
					return nil
				})
				if err != nil && runCtx.Err() == nil {
					fail(err)
				}
			}()
		}
		for deadline := time.Now().Add(2 * time.Minute); ; {
			all := true
			for _, cn := range consumers[first:] {
				all = all && len(cn.Assignment()[topic]) == o.Partitions
			}
			if all {
				break
			}
			if time.Now().After(deadline) {
				return FanoutRow{}, fmt.Errorf("fanout: groups %d to %d did not join within 2 minutes", first, first+wave-1)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// publish publishes Batch stamped records at each of p's slots.
	publish := func(ctx context.Context, p *pacer) {
		vals := payloads(o.Batch, o.Payload)
		recs := make([]*pgmsg.Record, o.Batch)
		for {
			due, err := p.wait(ctx) // latencies count from the due time
			if err != nil {
				return
			}
			for i, v := range vals {
				stamp(v, due)
				recs[i] = &pgmsg.Record{Topic: topic, Value: v}
			}
			if err := pub.Publish(ctx, recs, nil); err != nil {
				if ctx.Err() == nil {
					fail(err)
				}
				continue
			}
			published.Add(int64(len(recs)))
		}
	}
	for i := range fanoutPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			publish(runCtx, newPacer(o.Rate/float64(o.Batch)/fanoutPublishers, float64(i)/fanoutPublishers))
		}()
	}
	logf("%d groups: %.0f records/s, warming up for %s ...", groups, o.Rate, o.Warmup)
	select {
	case <-time.After(o.Warmup):
	case <-ctx.Done():
		return FanoutRow{}, ctx.Err()
	}
	inWindow.Store(true)
	pg0, s0, w0, t0 := pg.read(), selfCPUOrNA(), published.Load(), time.Now()
	var lags []int64
	tk := time.NewTicker(time.Second)
	for time.Since(t0) < o.Duration {
		select {
		case <-tk.C:
		case <-ctx.Done():
			tk.Stop()
			return FanoutRow{}, ctx.Err()
		}
		pub := published.Load()
		var worst int64
		for g := range handled {
			l := max(pub-handled[g].Load(), 0)
			lags = append(lags, l)
			worst = max(worst, l)
		}
		logf("%d groups: %4.0fs  lag max %d", groups, time.Since(t0).Seconds(), worst)
	}
	tk.Stop()
	pg1, s1, w1, el := pg.read(), selfCPUOrNA(), published.Load(), time.Since(t0).Seconds()
	n := delivered.Load()
	inWindow.Store(false)
	slices.Sort(lags)
	row := FanoutRow{Groups: groups, WritesPerSec: float64(w1-w0) / el, DeliveredPerSec: float64(n) / el,
		PgCPUPct: pctOrNA(pg0, pg1, el), PgUSPerRecord: perOpN(pg0, pg1, int(n)) * 1000,
		ProcessCPUPct: pctOrNA(s0, s1, el), ProcessUSPerRecord: perOpN(s0, s1, int(n)) * 1000}
	if row.PgUSPerRecord < 0 {
		row.PgUSPerRecord = -1
	}
	if row.ProcessUSPerRecord < 0 {
		row.ProcessUSPerRecord = -1
	}
	if len(lags) > 0 {
		row.LagMax, row.LagP99 = lags[len(lags)-1], lags[int(0.99*float64(len(lags)-1)+0.5)]
	}
	e2eMu.Lock()
	row.E2EP50MS, row.E2EP99MS = e2e.quantileMS(0.5), e2e.quantileMS(0.99)
	e2eMu.Unlock()
	errMu.Lock()
	row.Errors, row.FirstError = errN, firstErr
	errMu.Unlock()
	logf("%d groups: delivered %.0f/s, lag max %d p99 %d, PostgreSQL %.1f %% (%.2f µs/record), pgmsg %.1f %% (%.2f µs/record)",
		groups, row.DeliveredPerSec, row.LagMax, row.LagP99, row.PgCPUPct, row.PgUSPerRecord, row.ProcessCPUPct, row.ProcessUSPerRecord)
	return row, nil
}

// PrintFanout prints the runs and the CPU per delivered record of the
// last run relative to the first.
func PrintFanout(w io.Writer, r *FanoutResult) {
	fmt.Fprintf(w, "one topic of %d partitions, %.0f records/s; PostgreSQL %s\n", r.Partitions, r.Rate, r.Server.Version)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "groups\twrites/s\tdelivered/s\tlag max\tlag p99\te2e p50 ms\te2e p99 ms\tPostgreSQL %\tµs/record\tpgmsg %\tµs/record\terrors")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%.1f\t%.2f\t%d\n", x.Groups, x.WritesPerSec, x.DeliveredPerSec,
			x.LagMax, x.LagP99, x.E2EP50MS, x.E2EP99MS, x.PgCPUPct, x.PgUSPerRecord, x.ProcessCPUPct, x.ProcessUSPerRecord, x.Errors)
	}
	_ = tw.Flush()
	if n := len(r.Rows); n >= 2 && r.Rows[0].PgUSPerRecord > 0 && r.Rows[0].ProcessUSPerRecord > 0 {
		a, b := r.Rows[0], r.Rows[n-1]
		fmt.Fprintf(w, "CPU per delivered record, %d groups / %d groups: PostgreSQL %.2fx (target <= 1.5x), pgmsg process %.2fx\n",
			b.Groups, a.Groups, b.PgUSPerRecord/a.PgUSPerRecord, b.ProcessUSPerRecord/a.ProcessUSPerRecord)
	}
}
