package bench

import (
	"context"
	"encoding/binary"

	"github.com/jackc/pgx/v5"
)

// ImplPacked is an experiment: seedPubSub with packed set, the
// seed baseline's SQL (seed_sql.go) with up to packMax records stored per row, as length-prefixed
// values in one inline bytea (STORAGE PLAIN: never compressed nor moved out
// of line), so that a batch layout's gain can be measured against the
// seed baseline's one row per record in the same run. The claim is the seed baseline's; the
// fetch reads the rows that overlap the claimed range and the client keeps
// the claimed records.

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
WHERE topic_id = $3::int AND base_offset BETWEEN $1 - $4::int AND $2 ORDER BY base_offset`

func (d *seedPubSub) publishPacked(ctx context.Context, vals [][]byte) error {
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

// fetchPacked appends the claimed records [start, end] to vals, from the
// rows that overlap the range.
func (d *seedPubSub) fetchPacked(ctx context.Context, tx pgx.Tx, start, end int64, partition int, vals *[][]byte) error {
	// A row holding start begins at most packMax-1 records before it.
	rows, err := tx.Query(ctx, packedFetchSQL, start, end, partition, packMax-1)
	if err != nil {
		return err
	}
	for rows.Next() {
		raw := rows.RawValues()
		base := int64(binary.BigEndian.Uint64(raw[0]))
		buf := append([]byte(nil), raw[2]...)
		for off := base; len(buf) >= 4; off++ {
			n := int(binary.BigEndian.Uint32(buf))
			v := buf[4 : 4+n : 4+n]
			buf = buf[4+n:]
			if off >= start && off <= end {
				*vals = append(*vals, v)
			}
		}
	}
	return rows.Err()
}
