package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgcluster"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
	"github.com/pgmsg/pgmsg/pgmsgprom"
)

// ScaleOptions configure RunScale.
type ScaleOptions struct {
	// URL of the database; empty starts a throwaway PostgreSQL.
	URL string
	// Schema the estate is built in: created and migrated if missing,
	// dropped at the end unless Keep.
	Schema string
	// Topics and Partitions of the estate; each topic gets Groups groups.
	Topics, Partitions, Groups int
	// Members heartbeat at the default interval, MembersPerGroup to a
	// group, for HeartbeatFor (after joining).
	Members, MembersPerGroup int
	HeartbeatFor             time.Duration
	// MembersFloor also runs as many callers of a bare SELECT 1 at the
	// same rate: the cost of the round trips alone.
	MembersFloor bool
	// MemberProcesses, when set, also runs the Members as real consumers
	// (Consumer, joined and then idle: their membership heartbeats at the
	// default interval) spread over this many clients, each with a pool of
	// its own, as that many worker processes would run them. A client's
	// members' periodic heartbeats go together (a consumer's may wait a
	// twentieth of the interval for the others'), where the Members row
	// above has each member call Client.Heartbeat on its own schedule.
	MemberProcesses int
	// Idle is how long the idle CPU is measured (maintenance loop and a
	// scrape every 15 s running).
	Idle time.Duration
	// Repeat is how many times each listing is timed (the median is
	// reported).
	Repeat int
	// CreateOnly times topic_create only (building the estate and at
	// full size) and skips the other operations.
	CreateOnly bool
	// Keep leaves a schema RunScale created; one that existed is always
	// left (and reused: topics that exist are not created again).
	Keep     bool
	Progress io.Writer
}

// ScaleRow is one measured operation.
type ScaleRow struct {
	Name string `json:"name"`
	// Ms is the median wall time of one operation, milliseconds.
	Ms float64 `json:"ms"`
	// PgCPUMs is the PostgreSQL server's CPU time per operation (all its
	// processes, from /proc), milliseconds; -1 when not measurable.
	PgCPUMs float64 `json:"pg_cpu_ms"`
	Target  string  `json:"target,omitempty"`
	Note    string  `json:"note,omitempty"`
}

// ScaleResult is what RunScale measured.
type ScaleResult struct {
	Topics     int        `json:"topics"`
	Partitions int        `json:"partitions"`
	Groups     int        `json:"groups_per_topic"`
	Relations  int64      `json:"relations"`
	PerPart    float64    `json:"relations_per_partition"`
	Rows       []ScaleRow `json:"rows"`
	Server     ServerInfo `json:"server"`
}

// RunScale builds an estate of many topics and times the operations whose
// cost must not grow with it (docs/benchmarks.md, "Many topics").
func RunScale(ctx context.Context, o ScaleOptions) (*ScaleResult, error) {
	o = o.withDefaults()
	logf := func(format string, a ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "scale: "+format+"\n", a...)
		}
	}
	url := o.URL
	if url == "" {
		logf("no database URL: starting a throwaway PostgreSQL ...")
		cl, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"max_locks_per_transaction": "1024"}})
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
	cfg.MaxConns = 16
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
	if !o.Keep && !existed {
		defer func() {
			_, _ = pool.Exec(context.Background(), fmt.Sprintf("DROP SCHEMA %s CASCADE", o.Schema))
		}()
	}
	client, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: o.Schema})
	if err != nil {
		return nil, err
	}
	defer client.Close()

	pg := findServerCPU(ctx, pool)
	if pg.postmaster == 0 {
		logf("the server is not on this machine: no CPU figures")
	}
	res := &ScaleResult{Topics: o.Topics, Partitions: o.Partitions, Groups: o.Groups, Server: *info}
	add := func(r ScaleRow) {
		res.Rows = append(res.Rows, r)
		logf("%-34s %9.1f ms  pg cpu %7.2f ms  %s %s", r.Name, r.Ms, r.PgCPUMs, r.Target, r.Note)
	}
	perOp := func(pg0, pg1 float64, n int) float64 {
		if pg0 < 0 || pg1 < 0 || n == 0 {
			return -1
		}
		return (pg1 - pg0) * 1000 / float64(n)
	}
	relCount := func() (int64, error) {
		var n int64
		err := pool.QueryRow(ctx, `SELECT count(*) + 2 * count(*) FILTER (WHERE c.reltoastrelid <> 0)
			FROM pg_class c WHERE c.relnamespace = $1::regnamespace`, o.Schema).Scan(&n)
		return n, err
	}
	base, err := relCount()
	if err != nil {
		return nil, err
	}
	var have int
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.topic WHERE name LIKE 'scale-%%'`, o.Schema)).Scan(&have); err != nil {
		return nil, err
	}
	if existed && have == 0 {
		base = 0 // an existing schema: no clean baseline
	}

	// The estate.
	name := func(i int) string { return fmt.Sprintf("scale-%05d", i) }
	var creates []float64
	pg0, start := pg.read(), time.Now()
	for i := range o.Topics {
		if i < have {
			continue
		}
		t0 := time.Now()
		if _, err := client.CreateTopic(ctx, name(i), pgmsg.TopicConfig{Partitions: o.Partitions}); err != nil && !errors.Is(err, pgmsg.ErrTopicExists) {
			return nil, fmt.Errorf("create %s: %w", name(i), err)
		}
		creates = append(creates, ms(time.Since(t0)))
		for g := range o.Groups {
			if _, err := client.CreateGroup(ctx, name(i), fmt.Sprintf("g%d", g), pgmsg.PositionEarliest); err != nil {
				return nil, err
			}
		}
		if (i+1)%500 == 0 {
			logf("%d topics in %s", i+1, time.Since(start).Round(time.Second))
		}
	}
	if len(creates) > 0 {
		pg1 := pg.read()
		add(ScaleRow{Name: "topic_create (building the estate)", Ms: quantile(creates, 0.5), PgCPUMs: perOp(pg0, pg1, len(creates)),
			Target: "<= 20", Note: fmt.Sprintf("%d created, p95 %.1f ms, groups included in CPU", len(creates), quantile(creates, 0.95))})
	}
	rels, err := relCount()
	if err != nil {
		return nil, err
	}
	res.Relations = rels
	if base > 0 {
		res.PerPart = float64(rels-base) / float64(o.Topics*o.Partitions)
	}
	logf("%d relations in the schema (toast tables and their indexes included), %.1f per partition", rels, res.PerPart)
	_, _ = pool.Exec(ctx, fmt.Sprintf("VACUUM ANALYZE %s.topic, %s.topic_partition, %s.segment, %s.group_cursor, %s.consumer_group",
		o.Schema, o.Schema, o.Schema, o.Schema, o.Schema))

	timed := func(label, target string, n int, fn func() (string, error)) error {
		var walls []float64
		var note string
		pg0 := pg.read()
		for range n {
			t0 := time.Now()
			s, err := fn()
			if err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
			walls = append(walls, ms(time.Since(t0)))
			note = s
		}
		add(ScaleRow{Name: label, Ms: quantile(walls, 0.5), PgCPUMs: perOp(pg0, pg.read(), n), Target: target, Note: note})
		return nil
	}
	// topic_create at full size, then those topics deleted again.
	var extra int
	if err := timed("topic_create (at full size)", "<= 20", o.Repeat, func() (string, error) {
		extra++
		_, err := client.CreateTopic(ctx, fmt.Sprintf("scale-extra-%d", extra), pgmsg.TopicConfig{Partitions: o.Partitions})
		return "", err
	}); err != nil {
		return nil, err
	}
	for i := 1; i <= extra; i++ {
		_ = client.DeleteTopic(ctx, fmt.Sprintf("scale-extra-%d", i))
	}
	if o.CreateOnly {
		return res, nil
	}
	steps := []struct {
		label, target string
		fn            func() (string, error)
	}{
		{"topic list", "<= 200", func() (string, error) {
			ts, err := client.ListTopics(ctx)
			return fmt.Sprintf("%d topics", len(ts)), err
		}},
		{"group list", "<= 200", func() (string, error) {
			gs, err := client.ListGroupSummaries(ctx, "", "") // pgmsg group list: one row per group
			return fmt.Sprintf("%d groups", len(gs)), err
		}},
		{"group list --partitions", "reported", func() (string, error) {
			gs, err := client.ListGroups(ctx, "", "") // every group's partitions
			return fmt.Sprintf("%d rows", len(gs)), err
		}},
		{"dashboard overview", "<= 200", func() (string, error) {
			// What the dashboard's api/log reads: the client's totals
			// brought up to date (nothing changed since the last call here).
			ts, gs, err := client.LogTotals(ctx)
			return fmt.Sprintf("LogTotals %d topics + %d groups", len(ts), len(gs)), err
		}},
		{"dashboard overview (full read)", "<= 200", func() (string, error) {
			// A new client has no totals to bring up to date: what the
			// first refresh after a start, or one after most topics
			// changed, costs.
			fresh, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: o.Schema})
			if err != nil {
				return "", err
			}
			defer fresh.Close()
			ts, gs, err := fresh.LogTotals(ctx)
			return fmt.Sprintf("LogTotals %d topics + %d groups", len(ts), len(gs)), err
		}},
		{"topic page", "<= 200", func() (string, error) {
			d, err := client.DescribeTopic(ctx, name(o.Topics/2))
			if err != nil {
				return "", err
			}
			gs, err := client.ListGroups(ctx, name(o.Topics/2), "")
			return fmt.Sprintf("DescribeTopic %d + ListGroups %d rows", d.Partitions, len(gs)), err
		}},
		{"maintenance pass", "<= 1000", func() (string, error) {
			r, err := client.MaintainOnce(ctx, nil)
			if err != nil {
				return "", err
			}
			var slow string
			var worst time.Duration
			for n, t := range r.Tasks {
				if t.Duration > worst {
					worst, slow = t.Duration, n
				}
				if t.Error != "" {
					return "", fmt.Errorf("%s: %s", n, t.Error)
				}
			}
			return fmt.Sprintf("slowest task %s %.0f ms", slow, ms(worst)), nil
		}},
	}
	for _, s := range steps {
		if err := timed(s.label, s.target, o.Repeat, s.fn); err != nil {
			return nil, err
		}
	}
	for _, per := range []bool{false, true} {
		label, target := "/metrics", "<= 1000, <= 5 MB"
		if per {
			label, target = "/metrics (PerPartition)", ""
		}
		col := pgmsgprom.NewCollector(client, &pgmsgprom.Opts{PerPartition: per, Timeout: time.Minute})
		reg := prometheus.NewRegistry()
		reg.MustRegister(col)
		h := col.Handler(reg) // as pgmsg serve's /metrics
		if err := timed(label, target, o.Repeat, func() (string, error) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
			body := w.Body.String()
			if w.Code != 200 {
				return "", fmt.Errorf("status %d", w.Code)
			}
			errs := "?"
			for _, l := range strings.Split(body, "\n") {
				if strings.HasPrefix(l, "pgmsg_scrape_errors_total ") {
					errs = strings.TrimPrefix(l, "pgmsg_scrape_errors_total ")
				}
			}
			return fmt.Sprintf("%.2f MB, %d lines, scrape errors %s", float64(len(body))/1e6, strings.Count(body, "\n"), errs), nil
		}); err != nil {
			return nil, err
		}
	}
	if dump, err := pgDump(); err == nil {
		if err := timed("pg_dump --schema-only", "reported", 1, func() (string, error) {
			cmd := exec.CommandContext(ctx, dump, "--schema-only", "--schema", o.Schema, "--dbname", url, "--file", os.DevNull)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
			}
			return "", nil
		}); err != nil {
			logf("%v", err)
		}
	}

	// Idle: the maintenance loop and a scrape every 15 s.
	if o.Idle > 0 {
		ictx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _ = client.RunMaintenance(ictx, nil) }()
		go func() {
			defer wg.Done()
			col := pgmsgprom.NewCollector(client, nil)
			reg := prometheus.NewRegistry()
			reg.MustRegister(col)
			h := col.Handler(reg) // as pgmsg serve's /metrics, the text written
			tk := time.NewTicker(15 * time.Second)
			defer tk.Stop()
			for {
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", nil))
				select {
				case <-ictx.Done():
					return
				case <-tk.C:
				}
			}
		}()
		time.Sleep(2 * time.Second) // the first maintenance pass and scrape
		pg0, s0, t0 := pg.read(), selfCPUOrNA(), time.Now()
		select {
		case <-time.After(o.Idle):
		case <-ctx.Done():
		}
		el := time.Since(t0).Seconds()
		pg1, s1 := pg.read(), selfCPUOrNA()
		cancel()
		wg.Wait()
		note := fmt.Sprintf("over %s: pgmsg process %.2f %% of a core", o.Idle, 100*(s1-s0)/el)
		add(ScaleRow{Name: "idle (maintenance loop + scrapes)", Ms: -1, PgCPUMs: -1, Target: "<= 1 % each",
			Note: note + fmt.Sprintf(", PostgreSQL %.2f %%", pctOrNA(pg0, pg1, el))})
	}
	if o.Members > 0 {
		row, err := heartbeats(ctx, pg, o, name, logf, fmt.Sprintf("%d members heartbeating", o.Members), "<= 5 % of a core",
			func(ctx context.Context, topic, group, member string) error {
				_, err := client.Heartbeat(ctx, topic, group, member, 0)
				return err
			})
		if err != nil {
			return nil, err
		}
		add(row)
		for g := range (o.Members + o.MembersPerGroup - 1) / o.MembersPerGroup {
			_, _ = client.DeleteGroup(ctx, name(g%o.Topics), fmt.Sprintf("hb-%d", g))
		}
	}
	if o.Members > 0 && o.MemberProcesses > 0 {
		row, err := consumerHeartbeats(ctx, pg, url, o, name, logf)
		if err != nil {
			return nil, err
		}
		add(row)
	}
	if o.Members > 0 && o.MembersFloor {
		// The same callers at the same rate, each call a bare SELECT 1:
		// what one round trip per member per interval costs whatever it
		// runs.
		row, err := heartbeats(ctx, pg, o, name, logf, fmt.Sprintf("%d callers of SELECT 1 (floor)", o.Members), "reported",
			func(ctx context.Context, _, _, _ string) error {
				_, err := pool.Exec(ctx, "SELECT 1")
				return err
			})
		if err != nil {
			return nil, err
		}
		add(row)
	}
	return res, nil
}

func pctOrNA(a, b, el float64) float64 {
	if a < 0 || b < 0 {
		return -1
	}
	return 100 * (b - a) / el
}

// heartbeats runs o.Members callers of call, MembersPerGroup to a group
// on the estate's first topics, each calling once every
// HeartbeatIntervalDefault, and measures the CPU of the server and of this
// process while they do.
func heartbeats(ctx context.Context, pg serverCPU, o ScaleOptions, name func(int) string, logf func(string, ...any),
	label, target string, call func(ctx context.Context, topic, group, member string) error) (ScaleRow, error) {
	groups := (o.Members + o.MembersPerGroup - 1) / o.MembersPerGroup
	interval := pgmsg.HeartbeatIntervalDefault
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var calls int
	var firstErr error
	var wg sync.WaitGroup
	measuring := make(chan struct{})
	for i := range o.Members {
		g := i / o.MembersPerGroup
		topic, group, member := name(g%o.Topics), fmt.Sprintf("hb-%d", g), fmt.Sprintf("m-%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the members over the interval, as independent
			// processes would be.
			select {
			case <-time.After(time.Duration(rand.Int64N(int64(interval)))):
			case <-hctx.Done():
				return
			}
			tk := time.NewTicker(interval)
			defer tk.Stop()
			for {
				if err := call(hctx, topic, group, member); err != nil {
					if hctx.Err() != nil {
						return
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				select {
				case <-measuring:
					mu.Lock()
					calls++
					mu.Unlock()
				default:
				}
				select {
				case <-hctx.Done():
					return
				case <-tk.C:
				}
			}
		}()
	}
	logf("%s: starting, %d groups ...", label, groups)
	time.Sleep(5 * interval) // joins and rebalances settle
	pg0, s0, t0 := pg.read(), selfCPUOrNA(), time.Now()
	close(measuring)
	select {
	case <-time.After(o.HeartbeatFor):
	case <-ctx.Done():
	}
	pg1, s1, el := pg.read(), selfCPUOrNA(), time.Since(t0).Seconds()
	mu.Lock()
	n := calls
	err := firstErr
	mu.Unlock()
	cancel()
	wg.Wait()
	if err != nil {
		return ScaleRow{}, fmt.Errorf("%s: %w", label, err)
	}
	pct := pctOrNA(pg0, pg1, el)
	return ScaleRow{Name: label, Ms: -1, PgCPUMs: perOpN(pg0, pg1, n),
		Target: target, Note: fmt.Sprintf("%d groups, %.0f calls/s; PostgreSQL %.1f %% of a core, pgmsg process %.1f %%",
			groups, float64(n)/el, pct, 100*(s1-s0)/el)}, nil
}

// consumerHeartbeats runs o.Members consumers, MembersPerGroup to a group
// on the estate's first topics, over o.MemberProcesses clients (pools of
// 2), joins them and lets them idle: what the server spends on their
// memberships (heartbeats at the default interval) is measured over
// HeartbeatFor, after 5 intervals for the joins to settle.
func consumerHeartbeats(ctx context.Context, pg serverCPU, url string, o ScaleOptions, name func(int) string,
	logf func(string, ...any)) (ScaleRow, error) {
	label := fmt.Sprintf("%d consumers' memberships in %d processes", o.Members, o.MemberProcesses)
	groups := (o.Members + o.MembersPerGroup - 1) / o.MembersPerGroup
	clients := make([]*pgmsg.Client, o.MemberProcesses)
	for i := range clients {
		p, err := newPool(ctx, url, 2, "")
		if err != nil {
			return ScaleRow{}, err
		}
		defer p.Close()
		if clients[i], err = pgmsg.NewClient(p, &pgmsg.Config{Schema: o.Schema}); err != nil {
			return ScaleRow{}, err
		}
		defer clients[i].Close()
	}
	for g := range groups {
		if _, err := clients[0].CreateGroup(ctx, name(g%o.Topics), fmt.Sprintf("hbc-%d", g), pgmsg.PositionLatest); err != nil {
			return ScaleRow{}, fmt.Errorf("%s: %w", label, err)
		}
		defer func() {
			_, _ = clients[0].DeleteGroup(context.WithoutCancel(ctx), name(g%o.Topics), fmt.Sprintf("hbc-%d", g))
		}()
	}
	logf("%s: joining ...", label)
	var wg sync.WaitGroup
	errc := make(chan error, o.Members)
	for i := range o.Members {
		g := i / o.MembersPerGroup
		c := clients[i%len(clients)]
		cn, err := c.NewConsumer(name(g%o.Topics), fmt.Sprintf("hbc-%d", g), &pgmsg.ConsumerOpts{
			Claim: pgmsg.ClaimOpts{Member: fmt.Sprintf("m-%d", i)}})
		if err != nil {
			return ScaleRow{}, fmt.Errorf("%s: %w", label, err)
		}
		defer cn.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The first Poll joins; nothing is published, so it waits out
			// its context and the membership goes on heartbeating.
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			if _, err := cn.Poll(pctx); err != nil && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return ScaleRow{}, fmt.Errorf("%s: %w", label, err)
	}
	time.Sleep(5 * pgmsg.HeartbeatIntervalDefault) // joins and rebalances settle
	pg0, s0, t0 := pg.read(), selfCPUOrNA(), time.Now()
	select {
	case <-time.After(o.HeartbeatFor):
	case <-ctx.Done():
		return ScaleRow{}, ctx.Err()
	}
	pg1, s1, el := pg.read(), selfCPUOrNA(), time.Since(t0).Seconds()
	return ScaleRow{Name: label, Ms: -1, PgCPUMs: -1, Target: "<= 5 % of a core",
		Note: fmt.Sprintf("%d groups; PostgreSQL %.1f %% of a core, pgmsg process %.1f %%",
			groups, pctOrNA(pg0, pg1, el), 100*(s1-s0)/el)}, nil
}

func perOpN(a, b float64, n int) float64 {
	if a < 0 || b < 0 || n == 0 {
		return -1
	}
	return (b - a) * 1000 / float64(n)
}

func pgDump() (string, error) {
	if bin, err := pgcluster.FindBinaries(); err == nil {
		if p := filepath.Join(bin, "pg_dump"); fileExists(p) {
			return p, nil
		}
	}
	return exec.LookPath("pg_dump")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

func (o ScaleOptions) withDefaults() ScaleOptions {
	if o.Schema == "" {
		o.Schema = "pgmsg_scale"
	}
	if o.Topics <= 0 {
		o.Topics = 1000
	}
	if o.Partitions <= 0 {
		o.Partitions = 4
	}
	if o.MembersPerGroup <= 0 {
		o.MembersPerGroup = 4
	}
	if o.HeartbeatFor <= 0 {
		o.HeartbeatFor = 20 * time.Second
	}
	if o.Repeat <= 0 {
		o.Repeat = 5
	}
	return o
}

// PrintScale prints the table.
func PrintScale(w io.Writer, r *ScaleResult) {
	fmt.Fprintf(w, "%d topics x %d partitions, %d group(s) per topic; %d relations (%.1f per partition); PostgreSQL %s\n",
		r.Topics, r.Partitions, r.Groups, r.Relations, r.PerPart, r.Server.Version)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "operation\tms (median)\tPostgreSQL CPU ms/op\ttarget\tnote")
	f := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", row.Name, f(row.Ms), f(row.PgCPUMs), row.Target, row.Note)
	}
	_ = tw.Flush()
}
