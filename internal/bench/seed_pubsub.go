package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// seedPubSub runs the seed baseline's SQL: publish is the single statement of the
// seed in autocommit; each reader owns one (group, partition) and polls
// with the seed baseline's PartitionReader.Poll: BEGIN, claim, fetch, COMMIT.
type seedPubSub struct {
	env *Env
	o   PubSubOptions
	// packed stores up to packMax records per row (ImplPacked,
	// packed_pubsub.go); everything else is seed_sql.go's.
	packed bool
	admin  *pgxpool.Pool
	pool   *pgxpool.Pool
	schema string
}

// openScratch creates a scratch schema and a pool whose search_path is it.
func openScratch(ctx context.Context, env *Env, prefix string, conns int) (admin, pool *pgxpool.Pool, schema string, err error) {
	if admin, err = newPool(ctx, env.URL, 2, ""); err != nil {
		return nil, nil, "", err
	}
	if schema, err = scratchSchema(ctx, admin, prefix); err != nil {
		return admin, nil, "", err
	}
	pool, err = newPool(ctx, env.URL, conns, pgx.Identifier{schema}.Sanitize())
	return admin, pool, schema, err
}

func closeScratch(ctx context.Context, admin, pool *pgxpool.Pool, schema string) {
	if pool != nil {
		pool.Close()
	}
	if admin != nil {
		dropScratch(ctx, admin, schema)
		admin.Close()
	}
}

func (d *seedPubSub) setup(ctx context.Context) error {
	var err error
	prefix, schemaSQL := "pgmsg_seed", seedSchemaSQL
	if d.packed {
		prefix, schemaSQL = "pgmsg_packed", packedSchemaSQL
	}
	if d.admin, d.pool, d.schema, err = openScratch(ctx, d.env, prefix, d.o.poolSize()); err != nil {
		return err
	}
	if _, err := d.pool.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("bench: %s schema: %w", prefix, err)
	}
	var b strings.Builder
	b.WriteString("INSERT INTO log_counter (id, next_offset) VALUES ")
	for p := 0; p < d.o.Partitions; p++ {
		if p > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(%d, 1)", p)
	}
	if _, err := d.pool.Exec(ctx, b.String()); err != nil {
		return err
	}
	for g := 0; g < d.o.Groups; g++ {
		for p := 0; p < d.o.Partitions; p++ {
			if _, err := d.pool.Exec(ctx, `INSERT INTO consumer_offsets (group_id, topic_id, next_offset)
VALUES ($1, $2, 1)
ON CONFLICT (group_id, topic_id) DO NOTHING;`, groupName(g), p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *seedPubSub) publish(ctx context.Context, vals [][]byte) error {
	if d.packed {
		return d.publishPacked(ctx, vals)
	}
	_, err := d.pool.Exec(ctx, seedPublishSQL, int64(len(vals)), vals, spread(d.o.Partitions))
	return err
}

func (d *seedPubSub) consumers(g int, got func(vals [][]byte)) []func(ctx context.Context) error {
	loops := make([]func(ctx context.Context) error, d.o.Partitions)
	for p := range loops {
		loops[p] = func(ctx context.Context) error {
			vals := make([][]byte, 0, d.o.ClaimBatch)
			for ctx.Err() == nil {
				n, err := d.poll(ctx, groupName(g), p, &vals)
				if err != nil {
					return err
				}
				if n > 0 {
					got(vals)
					continue
				}
				select {
				case <-ctx.Done():
				case <-time.After(d.o.Poll):
				}
			}
			return nil
		}
	}
	return loops
}

// poll is the seed baseline's PartitionReader.Poll.
func (d *seedPubSub) poll(ctx context.Context, group string, partition int, vals *[][]byte) (int, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var start, end int64
	if err := tx.QueryRow(ctx, seedClaimSQL, group, int64(d.o.ClaimBatch), partition).Scan(&start, &end); err != nil {
		return 0, err
	}
	if end < start {
		return 0, tx.Commit(ctx)
	}
	*vals = (*vals)[:0]
	if d.packed {
		if err := d.fetchPacked(ctx, tx, start, end, partition, vals); err != nil {
			return 0, err
		}
		return len(*vals), tx.Commit(ctx)
	}
	rows, err := tx.Query(ctx, seedFetchSQL, start, end, partition)
	if err != nil {
		return 0, err
	}
	var off int64
	var payload []byte
	var created time.Time
	for rows.Next() {
		if err := rows.Scan(&off, &payload, &created); err != nil {
			rows.Close()
			return 0, err
		}
		*vals = append(*vals, payload)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return len(*vals), tx.Commit(ctx)
}

func (d *seedPubSub) lag(ctx context.Context) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT coalesce(sum(l.next_offset - c.next_offset), 0)::bigint
FROM consumer_offsets c JOIN log_counter l ON l.id = c.topic_id`).Scan(&n)
	return n, err
}

func (d *seedPubSub) teardown(ctx context.Context) error {
	closeScratch(ctx, d.admin, d.pool, d.schema)
	return nil
}
