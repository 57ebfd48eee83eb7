package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// packedPubSub is an experiment (issue 12): the seeds' SQL with up to
// packMax records stored per row, as length-prefixed values in one inline
// bytea (STORAGE PLAIN: never compressed nor moved out of line), so that
// a batch layout's gain can be measured against the seeds' one row per
// record in the same run. The claim is the seeds'; the fetch reads the rows
// that overlap the claimed range and the client keeps the claimed records.
type packedPubSub struct{ seedPubSub }

// packMax records of 1 KiB fill a page: a row must fit in one.
const packMax = 7

const packedSchemaSQL = `
CREATE TABLE log_counter (id INT PRIMARY KEY, next_offset BIGINT NOT NULL);
CREATE TABLE packed (
  topic_id INT NOT NULL, base_offset BIGINT NOT NULL, n INT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(), body BYTEA NOT NULL,
  PRIMARY KEY (topic_id, base_offset));
ALTER TABLE packed ALTER body SET STORAGE PLAIN;
CREATE TABLE consumer_offsets (group_id TEXT NOT NULL, topic_id INT NOT NULL, next_offset BIGINT NOT NULL DEFAULT 1, PRIMARY KEY (group_id, topic_id));`

const packedPublishSQL = `WITH reserve AS (
  UPDATE log_counter SET next_offset = next_offset + $1 WHERE id = $3::int RETURNING (next_offset - $1) AS first_off)
INSERT INTO packed (topic_id, base_offset, n, body)
SELECT $3::int, r.first_off + s.st, s.n, s.body FROM reserve r, unnest($2::bytea[], $4::int[], $5::int[]) AS s(body, st, n)`

const packedFetchSQL = `SELECT base_offset, n, body FROM packed
WHERE topic_id = $3::int AND base_offset BETWEEN $1 - 6 AND $2 ORDER BY base_offset`

func (d *packedPubSub) setup(ctx context.Context) error {
	var err error
	if d.admin, d.pool, d.schema, err = openScratch(ctx, d.env, "pgmsg_packed", d.o.poolSize()); err != nil {
		return err
	}
	if _, err := d.pool.Exec(ctx, packedSchemaSQL); err != nil {
		return fmt.Errorf("bench: packed schema: %w", err)
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
			if _, err := d.pool.Exec(ctx, `INSERT INTO consumer_offsets (group_id, topic_id, next_offset) VALUES ($1, $2, 1)`, groupName(g), p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *packedPubSub) publish(ctx context.Context, vals [][]byte) error {
	var bodies [][]byte
	var starts, ns []int32
	for i := 0; i < len(vals); {
		j, size := i, 0
		for j < len(vals) && j-i < packMax && (j == i || size+4+len(vals[j]) <= 8000) {
			size += 4 + len(vals[j])
			j++
		}
		body := make([]byte, 0, size)
		for _, v := range vals[i:j] {
			body = binary.BigEndian.AppendUint32(body, uint32(len(v)))
			body = append(body, v...)
		}
		bodies, starts, ns = append(bodies, body), append(starts, int32(i)), append(ns, int32(j-i))
		i = j
	}
	_, err := d.pool.Exec(ctx, packedPublishSQL, int64(len(vals)), bodies, spread(d.o.Partitions), starts, ns)
	return err
}

func (d *packedPubSub) consumers(g int, got func(vals [][]byte)) []func(ctx context.Context) error {
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

func (d *packedPubSub) poll(ctx context.Context, group string, partition int, vals *[][]byte) (int, error) {
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
	rows, err := tx.Query(ctx, packedFetchSQL, start, end, partition)
	if err != nil {
		return 0, err
	}
	*vals = (*vals)[:0]
	for rows.Next() {
		raw := rows.RawValues()
		base := int64(binary.BigEndian.Uint64(raw[0]))
		body := raw[2]
		buf := make([]byte, len(body))
		copy(buf, body)
		for off := base; len(buf) >= 4; off++ {
			n := int(binary.BigEndian.Uint32(buf))
			v := buf[4 : 4+n : 4+n]
			buf = buf[4+n:]
			if off >= start && off <= end {
				*vals = append(*vals, v)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return len(*vals), tx.Commit(ctx)
}
