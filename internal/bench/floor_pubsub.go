package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// floorPubSub is the delivery floor: the least a log whose groups read
// over their own connections can do per record delivered. A publish is
// the seed baseline's statement; a notifier sends the partition's wake-up after
// the commit, from a connection of its own, coalescing wake-ups as
// pgmsg's publisher does. Each (group, partition) reader keeps its
// position in memory only; the notification wakes it and it reads the new
// records with one plain SELECT. No claim, no lease, no offset written, no
// fencing, no restart: it is not a product, it is what nothing that stores
// a group's position can beat, so that a latency target can be told apart
// from what the machine allows.
type floorPubSub struct {
	env    *Env
	o      PubSubOptions
	admin  *pgxpool.Pool
	pool   *pgxpool.Pool
	schema string

	channel string
	wakes   [][]chan struct{} // [group][partition], buffered 1
	pos     [][]atomic.Int64  // [group][partition]: next offset to read
	pending []atomic.Bool     // [partition]: a wake-up is owed
	kick    chan struct{}
	// notifyErr is the notifier's failure, returned by the next publish.
	notifyErr atomic.Pointer[error]
	stop      context.CancelFunc
	done      sync.WaitGroup
}

// floorIdlePoll is how often a reader that no notification woke reads
// anyway (a notification is never lost while the listener is connected;
// this only bounds the wait should one be).
const floorIdlePoll = 100 * time.Millisecond

func (d *floorPubSub) setup(ctx context.Context) error {
	var err error
	if d.admin, d.pool, d.schema, err = openScratch(ctx, d.env, "pgmsg_floor", d.o.poolSize()); err != nil {
		return err
	}
	if _, err := d.pool.Exec(ctx, seedSchemaSQL); err != nil {
		return fmt.Errorf("bench: floor schema: %w", err)
	}
	for p := 0; p < d.o.Partitions; p++ {
		if _, err := d.pool.Exec(ctx, `INSERT INTO log_counter (id, next_offset) VALUES ($1, 1)`, p); err != nil {
			return err
		}
	}
	d.channel = d.schema // unique per run: notifications are database-wide
	d.wakes = make([][]chan struct{}, d.o.Groups)
	d.pos = make([][]atomic.Int64, d.o.Groups)
	for g := range d.wakes {
		d.wakes[g] = make([]chan struct{}, d.o.Partitions)
		d.pos[g] = make([]atomic.Int64, d.o.Partitions)
		for p := range d.wakes[g] {
			d.wakes[g][p] = make(chan struct{}, 1)
			d.pos[g][p].Store(1)
		}
	}
	if d.o.Groups == 0 {
		return nil
	}
	// One listening connection for every reader, as pgmsg's client has.
	lc, err := d.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	if _, err := lc.Exec(ctx, `LISTEN `+pgx.Identifier{d.channel}.Sanitize()); err != nil {
		lc.Release()
		return err
	}
	lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	d.stop = stop
	d.pending = make([]atomic.Bool, d.o.Partitions)
	d.kick = make(chan struct{}, 1)
	d.done.Add(2)
	go d.notifier(lctx)
	go func() {
		defer d.done.Done()
		// The connection may be mid-wait when the context ends: destroy it
		// rather than hand it back to the pool.
		defer func() { _ = lc.Hijack().Close(context.Background()) }()
		for {
			n, err := lc.Conn().WaitForNotification(lctx)
			if err != nil {
				return
			}
			p, err := strconv.Atoi(n.Payload)
			if err != nil || p < 0 || p >= d.o.Partitions {
				continue
			}
			for g := range d.wakes {
				select {
				case d.wakes[g][p] <- struct{}{}:
				default:
				}
			}
		}
	}()
	return nil
}

func (d *floorPubSub) publish(ctx context.Context, vals [][]byte) error {
	if err := d.notifyErr.Load(); err != nil {
		return fmt.Errorf("bench: floor notifier: %w", *err)
	}
	p := spread(d.o.Partitions)
	if _, err := d.pool.Exec(ctx, seedPublishSQL, int64(len(vals)), vals, p); err != nil {
		return err
	}
	if d.o.Groups > 0 {
		d.pending[p].Store(true)
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// notifier sends the wake-ups of committed publishes from a connection of
// its own, coalescing those that queue up while one is sent (as pgmsg's
// publisher does): a NOTIFY inside the publish would hold the database's
// notification lock through the publish's commit.
func (d *floorPubSub) notifier(ctx context.Context) {
	defer d.done.Done()
	parts := make([]string, 0, d.o.Partitions)
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		}
		parts = parts[:0]
		for p := range d.pending {
			if d.pending[p].Swap(false) {
				parts = append(parts, strconv.Itoa(p))
			}
		}
		if len(parts) == 0 {
			continue
		}
		if _, err := d.pool.Exec(ctx, `SELECT pg_notify($1, x) FROM unnest($2::text[]) x`, d.channel, parts); err != nil {
			if ctx.Err() == nil {
				d.notifyErr.Store(&err)
			}
			return
		}
	}
}

const floorReadSQL = `SELECT payload FROM topic
WHERE topic_id = $1::int AND c_offset >= $2 ORDER BY c_offset LIMIT $3`

func (d *floorPubSub) consumers(g int, got func(vals [][]byte)) []func(ctx context.Context) error {
	loops := make([]func(ctx context.Context) error, d.o.Partitions)
	for p := range loops {
		loops[p] = func(ctx context.Context) error {
			conn, err := d.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			vals := make([][]byte, 0, d.o.ClaimBatch)
			idle := time.NewTimer(floorIdlePoll)
			defer idle.Stop()
			for ctx.Err() == nil {
				pos := d.pos[g][p].Load()
				rows, err := conn.Query(ctx, floorReadSQL, p, pos, d.o.ClaimBatch)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				vals = vals[:0]
				for rows.Next() {
					var v []byte
					if err := rows.Scan(&v); err != nil {
						rows.Close()
						return err
					}
					vals = append(vals, v)
				}
				if err := rows.Err(); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				if len(vals) > 0 {
					d.pos[g][p].Store(pos + int64(len(vals)))
					got(vals)
				}
				if len(vals) == d.o.ClaimBatch {
					continue
				}
				idle.Reset(floorIdlePoll)
				select {
				case <-ctx.Done():
				case <-d.wakes[g][p]:
				case <-idle.C:
				}
			}
			return nil
		}
	}
	return loops
}

func (d *floorPubSub) lag(ctx context.Context) (int64, error) {
	next := make([]int64, d.o.Partitions)
	rows, err := d.pool.Query(ctx, `SELECT id, next_offset FROM log_counter`)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		var p int
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			rows.Close()
			return 0, err
		}
		if p >= 0 && p < len(next) {
			next[p] = n
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var lag int64
	for g := range d.pos {
		for p := range d.pos[g] {
			lag += next[p] - d.pos[g][p].Load()
		}
	}
	return lag, nil
}

func (d *floorPubSub) teardown(ctx context.Context) error {
	if d.stop != nil {
		d.stop()
		d.done.Wait()
	}
	closeScratch(ctx, d.admin, d.pool, d.schema)
	return nil
}
