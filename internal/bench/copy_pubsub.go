package bench

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// copyPubSub is the ingest ceiling: COPY of each batch into a bare table
// with a bigint primary key and the payload, no counter, no offsets.
type copyPubSub struct {
	env    *Env
	o      PubSubOptions
	admin  *pgxpool.Pool
	pool   *pgxpool.Pool
	schema string
	next   atomic.Int64
}

func (d *copyPubSub) setup(ctx context.Context) error {
	var err error
	if d.admin, d.pool, d.schema, err = openScratch(ctx, d.env, "pgmsg_copy", d.o.poolSize()); err != nil {
		return err
	}
	_, err = d.pool.Exec(ctx, `CREATE TABLE raw (id bigint PRIMARY KEY, payload bytea NOT NULL)`)
	return err
}

func (d *copyPubSub) publish(ctx context.Context, vals [][]byte) error {
	first := d.next.Add(int64(len(vals))) - int64(len(vals))
	i := 0
	_, err := d.pool.CopyFrom(ctx, pgx.Identifier{"raw"}, []string{"id", "payload"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == len(vals) {
				return nil, nil
			}
			row := []any{first + int64(i), vals[i]}
			i++
			return row, nil
		}))
	return err
}

func (d *copyPubSub) consumers(int, func([][]byte)) []func(ctx context.Context) error { return nil }

func (d *copyPubSub) lag(context.Context) (int64, error) { return 0, nil }

func (d *copyPubSub) teardown(ctx context.Context) error {
	closeScratch(ctx, d.admin, d.pool, d.schema)
	return nil
}
