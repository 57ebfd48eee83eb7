package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/pgmsg/pgmsg/internal/bench"
)

// benchArgs carries the payload. River stores args as JSON, so the
// payload is base64: its raw size is 3/4 of the --payload bytes, which
// makes the encoded args about --payload bytes long, like the others'.
type benchArgs struct {
	Payload []byte `json:"payload"`
}

func (benchArgs) Kind() string { return "pgmsg_bench" }

// benchWorker does nothing but remember when its job was enqueued, for
// the completion event to report.
type benchWorker struct {
	river.WorkerDefaults[benchArgs]
	sent *sync.Map // job ID -> first 8 bytes of the payload
}

func (w *benchWorker) Work(ctx context.Context, job *river.Job[benchArgs]) error {
	if len(job.Args.Payload) >= 8 {
		w.sent.Store(job.ID, job.Args.Payload[:8])
	}
	return nil
}

// riverQueue runs River v0.51.2 in a scratch schema with its default
// client settings and o.Workers workers on the default queue.
type riverQueue struct {
	env    *bench.Env
	o      bench.QueueOptions
	pool   *pgxpool.Pool
	schema string
	client *river.Client[pgx.Tx]
	sent   sync.Map
}

func newRiverQueue(env *bench.Env, o bench.QueueOptions) bench.QueueDriver {
	bench.QueueOptionsDefaults(&o)
	return &riverQueue{env: env, o: o}
}

func (d *riverQueue) Setup(ctx context.Context) error {
	cfg, err := pgxpool.ParseConfig(d.env.URL)
	if err != nil {
		return err
	}
	// River needs few connections whatever its worker count: it fetches
	// and completes in batches. Give it the pool size the others get.
	cfg.MaxConns = int32(min(d.o.Workers+4, 64))
	cfg.ConnConfig.RuntimeParams["application_name"] = "pgmsg-bench"
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	d.schema = fmt.Sprintf("pgmsg_river_%d", time.Now().UnixNano()%1e9)
	if _, err := d.pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{d.schema}.Sanitize()); err != nil {
		d.schema = ""
		return err
	}
	drv := riverpgxv5.New(d.pool)
	m, err := rivermigrate.New(drv, &rivermigrate.Config{Schema: d.schema, Logger: quiet()})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{sent: &d.sent})
	d.client, err = river.NewClient(drv, &river.Config{
		Schema:  d.schema,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: d.o.Workers}},
		Workers: workers,
		Logger:  quiet(),
	})
	return err
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (d *riverQueue) params(vals [][]byte) []river.InsertManyParams {
	out := make([]river.InsertManyParams, len(vals))
	raw := max(8, base64.StdEncoding.DecodedLen(d.o.Payload))
	for i, v := range vals {
		out[i] = river.InsertManyParams{Args: benchArgs{Payload: v[:min(raw, len(v))]}}
	}
	return out
}

func (d *riverQueue) Prefill(ctx context.Context, vals [][]byte) error {
	_, err := d.client.InsertManyFast(ctx, d.params(vals))
	return err
}

func (d *riverQueue) Enqueue(ctx context.Context, vals [][]byte) error {
	_, err := d.client.InsertManyFast(ctx, d.params(vals))
	return err
}

func (d *riverQueue) Work(ctx context.Context, workers int, done func([][]byte)) error {
	events, cancel := d.client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: 1 << 20,
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
	})
	defer cancel()
	if err := d.client.Start(ctx); err != nil {
		return err
	}
	batch := make([][]byte, 0, 1024)
	for {
		select {
		case <-ctx.Done():
			stopCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer stop()
			_ = d.client.Stop(stopCtx)
			return nil
		case ev := <-events:
			batch = append(batch[:0], d.stampOf(ev))
		drain:
			for len(batch) < cap(batch) {
				select {
				case ev := <-events:
					batch = append(batch, d.stampOf(ev))
				default:
					break drain
				}
			}
			done(batch)
		}
	}
}

// stampOf returns the enqueue stamp the worker saw for ev's job.
func (d *riverQueue) stampOf(ev *river.Event) []byte {
	if v, ok := d.sent.LoadAndDelete(ev.Job.ID); ok {
		return v.([]byte)
	}
	return nil
}

func (d *riverQueue) Remaining(ctx context.Context) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.river_job WHERE state <> 'completed'`,
		pgx.Identifier{d.schema}.Sanitize())).Scan(&n)
	return n, err
}

func (d *riverQueue) Teardown(ctx context.Context) error {
	if d.pool == nil {
		return nil
	}
	if d.schema != "" {
		_, _ = d.pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{d.schema}.Sanitize()+" CASCADE")
	}
	d.pool.Close()
	return nil
}
