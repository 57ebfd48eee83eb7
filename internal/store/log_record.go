package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
)

// RecordRow is one record as a statement returns it: the columns offset,
// timestamp, key, value and headers of a record row.
type RecordRow struct {
	Offset    int64
	Timestamp time.Time
	// Key and Value are the record's own (nil for SQL NULL): the caller
	// may keep them. They may share one backing array with other records'
	// (capacity capped at their length), so they are never appended to in
	// place.
	Key, Value []byte
	// Headers is the jsonb object's JSON text, nil for NULL. It is only
	// valid until the RecordFunc returns.
	Headers []byte
	// Left is how many rows the read returns from this one on, this one
	// included, when the read knows it (its range of offsets), else 0: a
	// RecordFunc sizes what it allocates with it.
	Left int64
}

// RecordFunc receives each record a read returns, in the order the rows
// arrive. It may keep row's Key and Value, but neither row nor its
// Headers: the store reuses them for the next row. An error stops the
// read and is returned by it.
type RecordFunc func(row *RecordRow) error

// recordDecoder turns record rows (offset, timestamp, key, value,
// headers) into RecordRows for a RecordFunc.
type recordDecoder struct {
	// raw: the columns came in binary format (as they do with prepared
	// statements) and are decoded by hand; else with Scan.
	raw, binaryHeaders bool
	chunk              []byte
	dest               []any // Scan's destinations when not raw
	row                RecordRow
	left               int64 // rows expected from the next one on; 0: unknown
}

// chunkMax is the most a chunk of keys and values holds, unless one
// record needs more: a caller that keeps one record keeps its chunk.
const chunkMax = 256 << 10

func newRecordDecoder(fds []pgconn.FieldDescription) *recordDecoder {
	d := &recordDecoder{}
	// Keys, values and headers are copied out of the driver's buffer into
	// shared chunks (one allocation per 256 KiB, not one per field) when
	// they arrive in binary format, as they do with prepared statements.
	// (pgx asks for jsonb in text format: headers come as JSON text or,
	// in binary, as version 1 and the JSON text.)
	d.raw = len(fds) == 5
	for _, fd := range fds[:min(len(fds), 4)] {
		d.raw = d.raw && fd.Format == pgx.BinaryFormatCode
	}
	d.binaryHeaders = d.raw && fds[4].Format == pgx.BinaryFormatCode
	if !d.raw {
		d.dest = make([]any, len(fds))
	}
	return d
}

// reserve makes room in the chunk for need bytes, the current row's key
// and value. A new chunk is sized for the rows still expected, each as
// large as this one (up to chunkMax): a claim of records of one size
// allocates what it holds, where a fixed 256 KiB chunk per read cleared
// twice what a claim of 125 records of 1 KiB used (profiled).
func (d *recordDecoder) reserve(need int) {
	if cap(d.chunk)-len(d.chunk) >= need {
		return
	}
	size := int64(chunkMax)
	if left := d.row.Left; left > 0 {
		size = min(size, left*int64(need))
	}
	d.chunk = make([]byte, 0, max(int64(need), size))
}

// keep copies b into the chunk, where decode reserved room for it (were
// there none, append would move the chunk; the slices handed out before
// keep the old one).
func (d *recordDecoder) keep(b []byte) []byte {
	if b == nil {
		return nil // NULL
	}
	if len(b) == 0 {
		return []byte{} // empty, not NULL (a slice of a nil chunk would be nil)
	}
	start := len(d.chunk)
	d.chunk = append(d.chunk, b...)
	return d.chunk[start:len(d.chunk):len(d.chunk)]
}

// pgEpochUnixMicros is 2000-01-01 UTC, PostgreSQL's epoch, in Unix microseconds.
const pgEpochUnixMicros = 946684800 * 1000000

// decode decodes the current row of rows and hands it to add.
func (d *recordDecoder) decode(rows pgx.Rows, add RecordFunc) error {
	r := &d.row
	*r = RecordRow{Left: d.left}
	if d.left > 0 {
		d.left--
	}
	if d.raw {
		// Decoded by hand (int8 and timestamptz in binary are 8 bytes,
		// big-endian; the timestamp counts microseconds from 2000-01-01
		// UTC): pgx's Scan was a tenth of the consumer's CPU.
		v := rows.RawValues()
		if len(v[0]) != 8 || len(v[1]) != 8 {
			return fmt.Errorf("pgmsg: unexpected offset or timestamp in a record row")
		}
		r.Offset = int64(binary.BigEndian.Uint64(v[0]))
		us := int64(binary.BigEndian.Uint64(v[1])) + pgEpochUnixMicros
		r.Timestamp = time.Unix(us/1e6, (us%1e6)*1e3)
		d.reserve(len(v[2]) + len(v[3]))
		r.Key, r.Value = d.keep(v[2]), d.keep(v[3])
		if h := v[4]; h != nil && d.binaryHeaders {
			// Binary jsonb: version 1, then the JSON text.
			if len(h) < 1 || h[0] != 1 {
				return fmt.Errorf("pgmsg: unexpected binary jsonb version in headers of offset %d", r.Offset)
			}
			r.Headers = h[1:]
		} else {
			r.Headers = h
		}
	} else {
		clear(d.dest) // nil: skip the column
		d.dest[0], d.dest[1], d.dest[2], d.dest[3], d.dest[4] = &r.Offset, &r.Timestamp, &r.Key, &r.Value, &r.Headers
		if err := rows.Scan(d.dest...); err != nil {
			return err
		}
	}
	return add(r)
}

// decodeRecords hands every row of rows (the record columns, as
// recordDecoder takes them) to add, then closes rows. expect is how many
// rows the statement returns at most (its range of offsets), or 0.
func decodeRecords(rows pgx.Rows, expect int64, add RecordFunc) error {
	defer rows.Close()
	d := newRecordDecoder(rows.FieldDescriptions())
	d.left = max(expect, 0)
	for rows.Next() {
		if err := d.decode(rows, add); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ReadTable is the table that holds a claim's records: its segment
// relname, or the record table when the claim names none ("").
func ReadTable(relname string) string {
	if relname != "" {
		return relname
	}
	return "record"
}

// readRangeSQL reads a claim's range from table. standby: no rows unless
// the server is a standby (a read replica that was promoted no longer
// follows the primary).
func readRangeSQL(schema, table string, standby bool) string {
	cond := ""
	if standby {
		cond = "pg_catalog.pg_is_in_recovery() AND "
	}
	return `SELECT "offset", "timestamp", key, value, headers FROM ` + pgx.Identifier{schema, table}.Sanitize() +
		` WHERE ` + cond + `topic_id = $1 AND partition = $2 AND "offset" BETWEEN $3 AND $4 ORDER BY "offset"`
}

// RecordTableMode is how the statements that read through the record
// table run: as an unnamed statement, planned for its values each time
// (pruned to the segments it reads), never from a cached plan. A prepared
// statement's sixth execution plans it generically once to compare costs,
// and that plan locks every segment table of every topic and its index
// (8,011 locks with 4,000 segments, measured): past what the lock table
// holds (max_locks_per_transaction, docs/operations.md) that execution
// fails with "out of shared memory", and so does every one after it on the
// connection, since the generic plan is never made.
const RecordTableMode = pgx.QueryExecModeCacheDescribe

// ReadRange reads the records first..last of a topic's partition (by the
// topic's id) from table, a segment table or "record" (ReadTable), in
// offset order, handing each to add. The statement names a plain table,
// so it runs from a cached generic plan: no partition pruning, no
// planning per call. standby reads nothing unless the server is a
// standby (a read replica that was promoted no longer follows the
// primary). A table that does not exist (dropped by retention, or not
// replayed yet on a replica) fails with an error errs.IsUndefinedTable
// reports.
func (s *Store) ReadRange(ctx context.Context, exec DBTX, table string, standby bool, topicID, partition int32, first, last int64, add RecordFunc) error {
	args := []any{topicID, partition, first, last}
	if table == "record" {
		args = append([]any{RecordTableMode}, args...)
	}
	rows, err := exec.Query(ctx, readRangeSQL(s.schema, table, standby), args...)
	if err != nil {
		return errs.Map(err)
	}
	return errs.Map(decodeRecords(rows, last-first+1, add))
}

// FetchedRecord is a record read by RecordFetch.
type FetchedRecord struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	// Key and Value are nil for SQL NULL; Headers is the jsonb object's
	// JSON text, nil for NULL.
	Key, Value, Headers []byte
}

// RecordFetch reads up to max records of one partition from offset from
// on, without claiming (fetch()).
func (s *Store) RecordFetch(ctx context.Context, exec DBTX, topic string, partition int32, from int64, max int32) ([]FetchedRecord, error) {
	rows, err := s.q.RecordFetch(ctx, s.DB(exec), dbsqlc.RecordFetchParams{
		Topic: topic, Partition: partition, FromOffset: from, MaxRecords: max,
	})
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]FetchedRecord, len(rows))
	for i, r := range rows {
		out[i] = FetchedRecord{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.Time,
			Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	return out, nil
}

// WALInsertLSN returns the server's current WAL insert position, in bytes
// (pg_current_wal_insert_lsn()).
func (s *Store) WALInsertLSN(ctx context.Context, exec DBTX) (int64, error) {
	var lsn int64
	err := exec.QueryRow(ctx, `SELECT (pg_catalog.pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&lsn)
	return lsn, errs.Map(err)
}

// ReplayPosition reports whether the server is a standby and how far it
// has replayed the WAL, in bytes (0 when it has replayed nothing).
func (s *Store) ReplayPosition(ctx context.Context, exec DBTX) (recovering bool, replay int64, err error) {
	err = exec.QueryRow(ctx, `SELECT pg_catalog.pg_is_in_recovery(), coalesce((pg_catalog.pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint, 0)`).
		Scan(&recovering, &replay)
	return recovering, replay, errs.Map(err)
}

// NotifyTopics sends one notification per topic on channel (the wake-ups
// of consumers of publishes whose own statement did not notify), in its
// own transaction, committed asynchronously: a transaction that notifies
// holds PostgreSQL's cluster-wide notify lock through its commit, and a
// synchronous commit would hold it through a WAL flush, for a wake-up
// that nothing needs to survive a crash (consumers poll). exec must not
// be in a transaction.
func (s *Store) NotifyTopics(ctx context.Context, exec DBTX, channel string, topics []string) error {
	_, err := exec.Exec(ctx, "SELECT pg_catalog.set_config('synchronous_commit', 'off', true), pg_catalog.pg_notify($1, t) FROM pg_catalog.unnest($2::text[]) AS t",
		channel, topics)
	return errs.Map(err)
}

// rangeSegmentsSQL returns the segment tables that hold offsets $3 to $4
// of partition $2 of topic id $1 (in offset order, each with the part of
// the range it holds, none when no segment does), and the offset below
// which the partition may lack records: retention dropped the segments
// below its start_offset, compaction deleted records only below its
// compacted_to (_compact_run).
const rangeSegmentsSQL = `SELECT s.relname, greatest(s.start_offset, $3::bigint), least(s.end_offset - 1, $4::bigint),
       greatest(tp.start_offset, tp.compacted_to)
  FROM pgmsg.topic_partition tp
  LEFT JOIN pgmsg.segment s ON s.topic_id = tp.topic_id AND s.partition = tp.partition
                           AND s.start_offset <= $4::bigint AND s.end_offset > $3::bigint
 WHERE tp.topic_id = $1::integer AND tp.partition = $2::integer
 ORDER BY s.start_offset`

// SegmentRange is the part First..Last of a read range that the segment
// table Relname holds.
type SegmentRange struct {
	Relname     string
	First, Last int64
}

// RangeSegments returns the segment tables that hold offsets first..last
// of a topic's partition (by the topic's id), in offset order, and the
// offset below which the partition may lack records (holesBelow: what
// retention dropped and compaction deleted lies below it; from it on,
// every offset below the partition's next offset is stored).
func (s *Store) RangeSegments(ctx context.Context, exec DBTX, topicID, partition int32, first, last int64) (segs []SegmentRange, holesBelow int64, err error) {
	rows, err := s.DB(exec).Query(ctx, rangeSegmentsSQL, topicID, partition, first, last)
	if err != nil {
		return nil, 0, errs.Map(err)
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		var (
			rel    pgtype.Text
			lo, hi pgtype.Int8
		)
		if err := rows.Scan(&rel, &lo, &hi, &holesBelow); err != nil {
			return nil, 0, errs.Map(err)
		}
		found = true
		if rel.Valid {
			segs = append(segs, SegmentRange{Relname: rel.String, First: lo.Int64, Last: hi.Int64})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, errs.Map(err)
	}
	if !found {
		return nil, 0, errs.New(errs.PartitionOutOfRange, "partition %d of topic id %d does not exist", partition, topicID)
	}
	return segs, holesBelow, nil
}

// ReadSegments reads the records first..last of a topic's partition (by
// the topic's id) from the segment tables the catalog names for them
// (RangeSegments), one statement per segment, in offset order, handing
// each to add, and returns the partition's holesBelow (RangeSegments). It
// does not go through the record table, so it does not depend on that
// table's view of its partitions: the readers that hand records over
// read again with it when a read through the record table missed stored
// records (MissesStored). A segment retention drops meanwhile fails the
// read (errs.IsUndefinedTable).
func (s *Store) ReadSegments(ctx context.Context, exec DBTX, topicID, partition int32, first, last int64, add RecordFunc) (holesBelow int64, err error) {
	segs, holesBelow, err := s.RangeSegments(ctx, exec, topicID, partition, first, last)
	if err != nil {
		return 0, err
	}
	for _, sg := range segs {
		if err := s.ReadRange(ctx, exec, sg.Relname, false, topicID, partition, sg.First, sg.Last, add); err != nil {
			return 0, err
		}
	}
	return holesBelow, nil
}

// MissesStored reports whether recs, a read's records of offsets
// first..last of one partition (in offset order, each offset once, none
// outside first..last; offset gives a record's), lack an offset of
// first..last at or past holesBelow (RangeSegments): below it compaction
// and retention may have removed records, from it on (below the
// partition's next offset) every offset is stored. A read that returned
// fewer records than that missed stored records, and a reader that hands
// it over lets its consumer skip them: a consumer moves on past the last
// offset it was given (a group's claim commits its whole range, a Kafka
// consumer fetches from its last offset + 1). A read through the record
// table once returned only the records of the first of the two segments
// its range spanned, 1.6 s after the second was attached (the chaos
// failover run, docs/reliability.md). Every reader that hands records
// over checks its reads with it: internal/logread (claims),
// internal/kafkasrv (Fetch); the SQL functions claim() and fetch() do
// the same in _read_range().
func MissesStored[R any](recs []R, offset func(R) int64, first, last, holesBelow int64) bool {
	lo := max(first, holesBelow)
	if lo > last {
		return false
	}
	i := sort.Search(len(recs), func(i int) bool { return offset(recs[i]) >= lo })
	return int64(len(recs)-i) < last-lo+1
}
