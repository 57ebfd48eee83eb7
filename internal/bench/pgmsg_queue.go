package bench

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg"
)

func init() {
	RegisterQueue(ImplPgmsg, func(env *Env, o QueueOptions) QueueDriver { return &pgmsgQueue{env: env, o: o} })
	RegisterQueue(ImplPgmsgSeq, func(env *Env, o QueueOptions) QueueDriver {
		return &pgmsgQueue{env: env, o: o, seqKeys: seqKeys(o.SequenceKeys)}
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
	if _, err := d.c.CreateQueue(ctx, name, pgmsg.QueueConfig{}); err != nil {
		return err
	}
	d.queue = name
	return nil
}

func (d *pgmsgQueue) params(vals [][]byte) []pgmsg.EnqueueParams {
	ps := make([]pgmsg.EnqueueParams, len(vals))
	for i, v := range vals {
		ps[i] = pgmsg.EnqueueParams{Payload: v}
		if d.seqKeys != nil {
			ps[i].SequenceKey = d.seqKeys[d.next%len(d.seqKeys)]
			d.next++
		}
	}
	return ps
}

func (d *pgmsgQueue) Prefill(ctx context.Context, vals [][]byte) error {
	_, err := d.c.EnqueueMany(ctx, d.queue, d.params(vals), &pgmsg.EnqueueOpts{DisableCreateQueue: true})
	return err
}

func (d *pgmsgQueue) Enqueue(ctx context.Context, vals [][]byte) error {
	_, err := d.c.EnqueueMany(ctx, d.queue, d.params(vals), &pgmsg.EnqueueOpts{DisableCreateQueue: true})
	return err
}

// Work runs one Worker. Jobs are counted when their completion has
// committed (WorkerOpts.OnCompleted), as the seed baseline's SQL and River count
// theirs: the worker archives finished jobs in batches (CompleteLinger, 2ms
// by default).
func (d *pgmsgQueue) Work(ctx context.Context, workers int, done func([][]byte)) error {
	w, err := d.c.NewWorker(d.queue, func(_ context.Context, job *pgmsg.Job) error {
		return nil
	}, &pgmsg.WorkerOpts{Concurrency: workers, ShutdownTimeout: 10 * time.Second, OnCompleted: func(jobs []*pgmsg.Job) {
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
