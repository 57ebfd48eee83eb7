package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/pgmsg/pgmsg"
)

func init() {
	RegisterQueue(ImplPgmsg, func(env *Env, o QueueOptions) QueueDriver { return &pgmsgQueue{env: env, o: o} })
	RegisterQueue(ImplPgmsgSeq, func(env *Env, o QueueOptions) QueueDriver {
		return &pgmsgQueue{env: env, o: o, seqKeys: seqKeys(o.SequenceKeys)}
	})
	RegisterQueue(ImplPgmsgKeyLimit, func(env *Env, o QueueOptions) QueueDriver {
		return &pgmsgQueue{env: env, o: o, limitKeys: seqKeys(o.LimitKeys), running: map[string]int{}}
	})
	RegisterQueue(ImplPgmsgWorkflow, func(env *Env, o QueueOptions) QueueDriver {
		return &pgmsgQueue{env: env, o: o, workflow: true}
	})
	RegisterQueue(ImplPgmsgFair, func(env *Env, o QueueOptions) QueueDriver {
		return &pgmsgQueue{env: env, o: o, tenants: seqKeys(o.Tenants)}
	})
}

// seqKeys returns n sequence keys.
func seqKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "seq-" + strconv.Itoa(i)
	}
	return keys
}

// pgmsgQueue drives the queue through the public API: EnqueueMany, and a
// Worker with o.Workers handlers (it claims and completes in batches).
type pgmsgQueue struct {
	env   *Env
	o     QueueOptions
	pool  *pgxpool.Pool
	guard *schemaGuard
	c     *pgmsg.Client
	queue string
	// seqKeys: each job is in a sequence, the next key of these in turn
	// (ImplPgmsgSeq); nil: none.
	seqKeys []string
	next    int
	// limitKeys: each job has a limit key, the next of these in turn, in
	// a queue with o.KeyLimit (ImplPgmsgKeyLimit); nil: none. running
	// counts each key's jobs in handlers now, maxRunning the most seen.
	limitKeys []string
	// workflow: each Prefill is one workflow (ImplPgmsgWorkflow).
	workflow   bool
	mu         sync.Mutex
	running    map[string]int
	maxRunning int
	// tenants: the prefilled jobs are the tenant "big"'s, the paced ones
	// (Enqueue) the next of these tenants' in turn (ImplPgmsgFair); nil:
	// no tenants. Either way the paced jobs are marked (payload byte 8)
	// and their enqueue-to-start latency (from their due time) is kept in
	// started, and the prefilled jobs' starts counted in backlog, the last
	// at backlogLast, from workStart on.
	tenants  []string
	sem      chan struct{}
	enqueued *hist // the paced enqueues' durations
	pacedErr error
	started  *hist
	// returned is when each paced job's enqueue returned (by id), and
	// afterReturn its start from then: the wait that is the claims', not
	// the enqueue's (negative when a job started before its enqueue's
	// answer reached the client; the start of a job whose enqueue had not
	// returned yet is kept in early and counted when it does).
	returned    map[int64]time.Time
	early       map[int64]time.Time
	afterReturn *hist
	backlog     int64
	backlogLast time.Time
	workStart   time.Time
}

func (d *pgmsgQueue) Setup(ctx context.Context) error {
	var err error
	if d.pool, err = newPool(ctx, d.env.URL, min(d.o.Workers+4, 64), ""); err != nil {
		return err
	}
	if d.guard, err = ensureSchema(ctx, d.pool, d.env.Schema, d.env.Force); err != nil {
		return err
	}
	if d.c, err = pgmsg.NewClient(d.pool, &pgmsg.Config{Schema: d.env.Schema, PollInterval: 10 * time.Millisecond}); err != nil {
		return err
	}
	name := "bench-" + randomSuffix()
	var cfg pgmsg.QueueConfig
	if d.limitKeys != nil {
		cfg.KeyLimit = d.o.KeyLimit
	}
	if _, err := d.c.CreateQueue(ctx, name, cfg); err != nil {
		return err
	}
	d.queue = name
	return nil
}

// marks reports whether the paced jobs are marked for their start
// latency: not when a limit key is kept in the payload.
func (d *pgmsgQueue) marks() bool { return d.limitKeys == nil && d.o.Payload > 8 }

func (d *pgmsgQueue) params(vals [][]byte, paced bool) []pgmsg.EnqueueParams {
	ps := make([]pgmsg.EnqueueParams, len(vals))
	for i, v := range vals {
		ps[i] = pgmsg.EnqueueParams{Payload: v}
		if d.marks() {
			v[8] = 0
			if paced {
				v[8] = 1
			}
		}
		if d.tenants != nil {
			ps[i].Tenant = "big"
			if paced {
				ps[i].Tenant = d.tenants[d.next%len(d.tenants)]
				d.next++
			}
		}
		if d.seqKeys != nil {
			ps[i].SequenceKey = d.seqKeys[d.next%len(d.seqKeys)]
			d.next++
		}
		if d.limitKeys != nil {
			key := d.limitKeys[d.next%len(d.limitKeys)]
			d.next++
			ps[i].LimitKey = key
			// A copy (vals are reused) with the key after the stamp, for
			// the handler's count.
			p := append([]byte(nil), v...)
			if len(p) < 9+len(key) {
				p = append(p, make([]byte, 9+len(key)-len(p))...)
			}
			p[copy(p[8:], key)+8] = 0
			ps[i].Payload = p
		}
	}
	return ps
}

func (d *pgmsgQueue) Prefill(ctx context.Context, vals [][]byte) error {
	ps := d.params(vals, false)
	if d.workflow {
		workflowDeps(ps, d.o.WorkflowLevels)
	}
	_, err := d.c.EnqueueMany(ctx, d.queue, ps, &pgmsg.EnqueueOpts{DisableCreateQueue: true})
	return err
}

// workflowDeps makes ps one workflow: ps[0] the root, the others levels
// of equal width (the last may be narrower), the first level depending on
// the root, each job of a later level on the jobs i and i+1 (mod width)
// of the level before.
func workflowDeps(ps []pgmsg.EnqueueParams, levels int) {
	width := max((len(ps)-1+levels-1)/levels, 1)
	name := func(i int) string { return "j" + strconv.Itoa(i) }
	ps[0].Name = name(0)
	for i := 1; i < len(ps); i++ {
		ps[i].Name = name(i)
		lvl, k := (i-1)/width, (i-1)%width
		if lvl == 0 {
			ps[i].DependsOnNames = []string{name(0)}
			continue
		}
		prev := 1 + (lvl-1)*width
		ps[i].DependsOnNames = []string{name(prev + k), name(prev + (k+1)%width)}
	}
}

func (d *pgmsgQueue) Enqueue(ctx context.Context, vals [][]byte) error {
	if d.marks() {
		return d.enqueuePaced(ctx, vals)
	}
	_, err := d.c.EnqueueMany(ctx, d.queue, d.params(vals, true), &pgmsg.EnqueueOpts{DisableCreateQueue: true})
	return err
}

// enqueuePaced enqueues the paced jobs vals as independent producers
// would (one per small tenant, o.Tenants at most at once): the pacer goes
// on to the next due time while this enqueue runs, so a slow enqueue
// shows in the jobs' latency from their due time, not in later jobs'. An
// error is returned by a later call.
func (d *pgmsgQueue) enqueuePaced(ctx context.Context, vals [][]byte) error {
	d.mu.Lock()
	if d.sem == nil {
		d.sem = make(chan struct{}, max(d.o.Tenants, 1))
	}
	if d.enqueued == nil {
		d.enqueued = newHist()
	}
	if d.returned == nil {
		d.returned, d.early, d.afterReturn = map[int64]time.Time{}, map[int64]time.Time{}, newHist()
	}
	err := d.pacedErr
	d.pacedErr = nil
	d.mu.Unlock()
	if err != nil {
		return err
	}
	own := make([][]byte, len(vals))
	for i, v := range vals {
		own[i] = append([]byte(nil), v...)
	}
	ps := d.params(own, true)
	select {
	case d.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	go func() {
		defer func() { <-d.sem }()
		t0 := time.Now()
		res, err := d.c.EnqueueMany(ctx, d.queue, ps, &pgmsg.EnqueueOpts{DisableCreateQueue: true})
		now := time.Now()
		d.enqueued.add(now.Sub(t0))
		d.mu.Lock()
		for _, r := range res {
			if at, ok := d.early[r.ID]; ok {
				delete(d.early, r.ID)
				d.afterReturn.add(at.Sub(now)) // negative: recorded as 0
				continue
			}
			d.returned[r.ID] = now
		}
		d.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			d.mu.Lock()
			d.pacedErr = err
			d.mu.Unlock()
		}
	}()
	return nil
}

// Work runs one Worker per o.Processes, each on a client and pool of its
// own (the first on Setup's), sharing workers. Jobs are counted when their
// completion has committed (WorkerOpts.OnCompleted), as the seed baseline's
// SQL and River count theirs: the worker archives finished jobs in batches
// (CompleteLinger, 2ms by default).
func (d *pgmsgQueue) Work(ctx context.Context, workers int, done func([][]byte)) error {
	d.mu.Lock()
	d.workStart, d.started = time.Now(), newHist()
	if d.enqueued == nil {
		d.enqueued = newHist()
	}
	d.mu.Unlock()
	procs := max(d.o.Processes, 1)
	g, gctx := errgroup.WithContext(ctx)
	for p := 0; p < procs; p++ {
		c, n := d.c, workers/procs
		if p < workers%procs {
			n++
		}
		if p > 0 {
			pool, err := newPool(ctx, d.env.URL, min(n+4, 64), "")
			if err != nil {
				return err
			}
			defer pool.Close()
			if c, err = pgmsg.NewClient(pool, &pgmsg.Config{Schema: d.env.Schema, PollInterval: 10 * time.Millisecond}); err != nil {
				return err
			}
			defer c.Close()
		}
		g.Go(func() error { return d.work(gctx, c, max(n, 1), done) })
	}
	return g.Wait()
}

// handle is the jobs' handler: for ImplPgmsgFair's paced jobs the time
// from their due time to the start; a wait of JobTime, if set; and for ImplPgmsgKeyLimit the count of the key's jobs running in every
// process's handlers.
func (d *pgmsgQueue) handle(ctx context.Context, job *pgmsg.Job) error {
	if d.marks() && d.o.Rate > 0 && len(job.Payload) > 8 {
		now := time.Now()
		if job.Payload[8] == 1 {
			d.started.add(now.Sub(sentAt(job.Payload)))
			d.mu.Lock()
			if d.returned != nil {
				if at, ok := d.returned[job.ID]; ok {
					delete(d.returned, job.ID)
					d.afterReturn.add(now.Sub(at))
				} else {
					d.early[job.ID] = now
				}
			}
			d.mu.Unlock()
		} else {
			d.mu.Lock()
			d.backlog++
			d.backlogLast = now
			d.mu.Unlock()
		}
	}
	if d.o.JobTime > 0 {
		t := time.NewTimer(d.o.JobTime)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if d.limitKeys == nil {
		return nil
	}
	// The key is the job's: its id's turn among the keys would not do
	// (ids are drawn per batch), so it is kept in the payload's bytes
	// after the enqueue stamp.
	key := string(job.Payload[8:keyEnd(job.Payload)])
	d.mu.Lock()
	d.running[key]++
	d.maxRunning = max(d.maxRunning, d.running[key])
	d.mu.Unlock()
	runtime.Gosched()
	d.mu.Lock()
	d.running[key]--
	d.mu.Unlock()
	return nil
}

// keyEnd is where the key written by params ends in p.
func keyEnd(p []byte) int {
	if i := bytes.IndexByte(p[8:], 0); i >= 0 {
		return 8 + i
	}
	return len(p)
}

// Check reports the most jobs of one key seen running at once
// (ImplPgmsgKeyLimit), and fails the run if it passed the limit.
func (d *pgmsgQueue) Check() (string, error) {
	if d.workflow {
		return d.checkWorkflow()
	}
	if d.marks() && d.o.Rate > 0 {
		return d.checkPaced(), nil
	}
	if d.limitKeys == nil {
		return "", nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := fmt.Sprintf("at most %d jobs of one key running at once (key limit %d, %d keys, %d processes)",
		d.maxRunning, d.o.KeyLimit, len(d.limitKeys), d.o.Processes)
	if d.maxRunning > d.o.KeyLimit {
		return s, fmt.Errorf("bench: key limit exceeded: %s", s)
	}
	return s, nil
}

// checkPaced reports the paced jobs' enqueue-to-start latency, from their
// due time, and the rate at which the prefilled backlog started: its jobs
// over the time from the workers' start to the last one's start, or to
// now if some were left.
func (d *pgmsgQueue) checkPaced() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	end := time.Now()
	if d.backlog >= int64(d.o.Jobs) {
		end = d.backlogLast
	}
	who := "without tenants"
	if d.tenants != nil {
		who = fmt.Sprintf("%d small tenants, backlog one tenant's", len(d.tenants))
	}
	ret := newHist()
	if d.afterReturn != nil {
		ret = d.afterReturn
	}
	return fmt.Sprintf("paced jobs (%s) started %.1f ms p50, %.1f ms p99 after their due time (%d jobs; their enqueues took %.1f ms p50, %.1f ms p99; from their enqueue's return %.1f ms p50, %.1f ms p99); backlog started %d of %d jobs at %.0f jobs/s",
		who, d.started.quantileMS(0.5), d.started.quantileMS(0.99), d.started.n, d.enqueued.quantileMS(0.5), d.enqueued.quantileMS(0.99),
		ret.quantileMS(0.5), ret.quantileMS(0.99), d.backlog, d.o.Jobs, float64(d.backlog)/end.Sub(d.workStart).Seconds())
}

func (d *pgmsgQueue) work(ctx context.Context, c *pgmsg.Client, workers int, done func([][]byte)) error {
	w, err := c.NewWorker(d.queue, d.handle, &pgmsg.WorkerOpts{Concurrency: workers, ShutdownTimeout: 10 * time.Second, CompleteBatch: d.o.CompleteBatch, OnCompleted: func(jobs []*pgmsg.Job) {
		vals := make([][]byte, len(jobs))
		for i, j := range jobs {
			vals[i] = j.Payload
		}
		done(vals)
	}})
	if err != nil {
		return err
	}
	err = w.Run(ctx)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

func (d *pgmsgQueue) Remaining(ctx context.Context) (int64, error) {
	st, err := d.c.QueueStats(ctx, d.queue)
	if err != nil {
		return 0, err
	}
	return st.Available + st.Scheduled + st.Running + st.Retrying + st.Pending, nil
}

func (d *pgmsgQueue) Teardown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if d.c != nil {
		if d.queue != "" {
			_ = d.c.DeleteQueue(ctx, d.queue, true)
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

// checkWorkflow measures, on the database's clock, how long each job with
// dependencies waited after its last dependency's completion committed
// its release until a worker claimed it (attempted_at minus the latest
// finished_at of its dependencies), and fails the run if a job was
// claimed before a dependency completed.
func (d *pgmsgQueue) checkWorkflow() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var n, early int64
	var p50, p99, maxMS float64
	err := d.pool.QueryRow(ctx, fmt.Sprintf(`
		WITH q AS (SELECT queue_id FROM %[1]s.queue WHERE name = $1),
		lag AS (
			SELECT extract(epoch FROM a.attempted_at - max(b.finished_at)) * 1000 AS ms
			  FROM %[1]s.job_archive a CROSS JOIN LATERAL unnest(a.depends_on) dep(id)
			  JOIN %[1]s.job_archive b ON b.id = dep.id
			 WHERE a.queue_id = (SELECT queue_id FROM q) AND a.status = 'completed'
			 GROUP BY a.id, a.attempted_at)
		SELECT count(*), count(*) FILTER (WHERE ms < 0),
		       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 0), coalesce(max(ms), 0)
		  FROM lag`, pgx.Identifier{d.env.Schema}.Sanitize()), d.queue).Scan(&n, &early, &p50, &p99, &maxMS)
	if err != nil {
		return "", err
	}
	s := fmt.Sprintf("%d jobs with dependencies started %.1f ms p50, %.1f ms p99, %.1f ms max after their last dependency completed (database clock; %d levels)",
		n, p50, p99, maxMS, d.o.WorkflowLevels)
	if early > 0 {
		return s, fmt.Errorf("bench: %d jobs were claimed before a dependency completed: %s", early, s)
	}
	// With track_commit_timestamp on, the wait splits at the commit of the
	// last dependency's completion: before it, the rest of the completion
	// statement and its commit; after it, the claim.
	var tracked string
	if err := d.pool.QueryRow(ctx, "SELECT pg_catalog.current_setting('track_commit_timestamp')").Scan(&tracked); err != nil || tracked != "on" {
		return s, nil
	}
	var c50, c99, f50, f99 float64
	err = d.pool.QueryRow(ctx, fmt.Sprintf(`
		WITH q AS (SELECT queue_id FROM %[1]s.queue WHERE name = $1),
		w AS (
			SELECT a.attempted_at, max(b.finished_at) AS fin, max(pg_catalog.pg_xact_commit_timestamp(b.xmin)) AS rel
			  FROM %[1]s.job_archive a CROSS JOIN LATERAL unnest(a.depends_on) dep(id)
			  JOIN %[1]s.job_archive b ON b.id = dep.id
			 WHERE a.queue_id = (SELECT queue_id FROM q) AND a.status = 'completed'
			 GROUP BY a.id, a.attempted_at),
		lag AS (SELECT extract(epoch FROM w.rel - w.fin) * 1000 AS c, extract(epoch FROM w.attempted_at - w.rel) * 1000 AS f
		          FROM w WHERE w.rel IS NOT NULL)
		SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY c), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY c), 0),
		       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY f), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY f), 0)
		  FROM lag`, pgx.Identifier{d.env.Schema}.Sanitize()), d.queue).Scan(&c50, &c99, &f50, &f99)
	if err != nil {
		return "", err
	}
	s += fmt.Sprintf("; of which completion to its commit %.1f / %.1f ms p50 / p99, commit to claim %.1f / %.1f ms (track_commit_timestamp)",
		c50, c99, f50, f99)
	return s, nil
}
