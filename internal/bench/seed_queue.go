package bench

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// seedQueue runs the seed baseline's queue SQL verbatim: each worker claims one job
// with SKIP LOCKED, deletes it and archives it, one job per transaction.
type seedQueue struct {
	env    *Env
	o      QueueOptions
	admin  *pgxpool.Pool
	pool   *pgxpool.Pool
	schema string
}

func (d *seedQueue) Setup(ctx context.Context) error {
	var err error
	if d.admin, d.pool, d.schema, err = openScratch(ctx, d.env, "pgmsg_seed", d.o.Workers+4); err != nil {
		return err
	}
	_, err = d.pool.Exec(ctx, seedSchemaSQL)
	return err
}

func (d *seedQueue) Prefill(ctx context.Context, vals [][]byte) error {
	_, err := d.pool.CopyFrom(ctx, pgx.Identifier{"queue"}, []string{"payload"}, pgx.CopyFromSlice(len(vals), func(i int) ([]any, error) {
		return []any{vals[i]}, nil
	}))
	if err == nil {
		_, err = d.pool.Exec(ctx, "ANALYZE queue")
	}
	return err
}

func (d *seedQueue) Enqueue(ctx context.Context, vals [][]byte) error {
	for _, v := range vals {
		if _, err := d.pool.Exec(ctx, seedEnqueueSQL, v); err != nil {
			return err
		}
	}
	return nil
}

func (d *seedQueue) Work(ctx context.Context, workers int, done func([][]byte)) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				payload, ok, err := d.one(ctx)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if ok {
					done([][]byte{payload})
					continue
				}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// one claims, deletes and archives one job in one transaction.
func (d *seedQueue) one(ctx context.Context) ([]byte, bool, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var id int64
	var payload []byte
	var created time.Time
	if err := tx.QueryRow(ctx, seedClaimJobSQL).Scan(&id, &payload, &created); err != nil {
		if err == pgx.ErrNoRows {
			return nil, false, tx.Commit(ctx)
		}
		return nil, false, err
	}
	if _, err := tx.Exec(ctx, seedDeleteJobSQL, id); err != nil {
		return nil, false, err
	}
	if _, err := tx.Exec(ctx, seedArchiveJobSQL, id, payload, created); err != nil {
		return nil, false, err
	}
	return payload, true, tx.Commit(ctx)
}

func (d *seedQueue) Remaining(ctx context.Context) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT count(*) FROM queue`).Scan(&n)
	return n, err
}

func (d *seedQueue) Teardown(ctx context.Context) error {
	closeScratch(ctx, d.admin, d.pool, d.schema)
	return nil
}
