package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// A COPY publish appends one partition's batch with COPY, which writes a
// page of records per WAL record where the direct statement's INSERT
// writes one per record (docs/benchmarks.md has the measurements). The
// whole publish is one pipeline of extended-protocol messages and its
// data, written at once: rowTIDPlanSQL pins the plans of the statements
// after it (they find the counter row by its ctid), copyBeginSQL locks
// the counter row and reads the next offset, COPY stores the records,
// copyEndSQL moves the counter, checks the count and answers, in one
// implicit transaction (committed by the Sync at the end) and one round
// trip.
//
// copyBeginSQL and copyEndSQL are what _publish_copy_begin() and
// _publish_copy_end() do, as plain statements prepared once per
// connection (they are the statement files publish_copy_reserve.sql,
// publish_copy_point.sql and publish_copy_end.sql, which the two functions
// run too): the functions' calls (PL/pgSQL, a pinned search_path, whose
// end walks every setting in PostgreSQL 15) and the parsing and planning
// of a simple-query message cost a tenth of the server's time at batch 100
// (a profile of that route; its history is in git). They call the functions for what
// only the functions do: the first publish of a partition (its offset
// sequence), declining (PM016) and the count check's error (PM004).
//
// pgx's CopyFrom cannot return the last statement's row, so the messages
// are written and read on the connection's socket directly, as CopyFrom
// does it: the statements and the data go out before the server answers
// the COPY (the server reads them in order; after an error it discards
// every message up to the Sync).

// copyBeginSQL locks the counter row of partition $2 of topic $1 for a
// batch of $3 records whose largest record is at most $4 bytes, and
// points the record table's offset default at the partition's offset
// sequence, set to the partition's next offset (_publish_copy_begin()):
// copyEndSQL moves the counter past the batch.
var copyBeginSQL = copyBegin("")

// copyBegin is copyBeginSQL with guard's WHEN clauses first: a guard
// that raises PM016 declines the publish before its offsets are used
// (the reservation is rolled back with the implicit transaction).
func copyBegin(guard string) string {
	return `WITH u AS (
    ` + stmt("publish_copy_reserve") + `
)
SELECT CASE ` + guard + `WHEN u.seq IS NULL THEN pgmsg._publish_copy_begin($1::integer, $2::integer, $3::integer, $4::bigint)::text
            ELSE ` + stmt("publish_copy_point", "{{copy_offset_seq}}", "u.seq", "u.base") + ` END
  FROM (SELECT 1) one LEFT JOIN u ON true`
}

// copyEndSQL moves the counter of partition $2 of topic $1 past the $3
// records of the COPY publish (the row copyBeginSQL locked) and answers
// it: base offset, publish time in Unix microseconds, segments_low. When
// COPY did not store exactly the records reserved, it raises the error
// _publish_copy_end() raises (PM004). It always finds the row: the COPY
// before it fails unless the begin statement locked it (the record
// table's offset default reads the setting the begin statement sets).
var copyEndSQL = stmt("publish_copy_end", "{{copy_offset_seq}}",
	"(SELECT NULL::bigint FROM pgmsg._raise('PM004', pg_catalog.format('the COPY stored %s records, not the %s reserved', "+
		"pg_catalog.currval(pg_catalog.current_setting({{copy_offset_seq}})::oid::regclass) - (c.next_offset - $3::integer) + 1, $3::integer)))")

// CopyMinRecords is the smallest batch published with COPY: below it the
// COPY statement's set-up costs more than the WAL records it saves.
const CopyMinRecords = 16

// copyMaxBytes bounds a COPY publish's data (one CopyData message); a
// larger batch goes through the direct statement.
const copyMaxBytes = 32 << 20

// copyDeclinedCode is _publish_copy_begin()'s answer when publish() has
// more to do (PM016).
const copyDeclinedCode = "PM016"

// copyMessagesBytes bounds what a COPY publish sends besides its rows
// (copySize): the statements' messages, the COPY's header and trailer.
const copyMessagesBytes = 1024

// copyPoolMaxBytes is the largest buffer kept for the next COPY publish:
// a batch of 1,000 records of 1 KiB, or a few merged, fits.
const copyPoolMaxBytes = 8 << 20

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// CopyEligible reports whether b can be published with COPY: a batch of
// at least CopyMinRecords whose records all give a timestamp or all leave
// it to the server (COPY cannot mix the two), within copyMaxBytes.
func (b *PublishBatch) CopyEligible() bool {
	if len(b.Values) < CopyMinRecords {
		return false
	}
	if b.timestamps != nil {
		for _, t := range b.timestamps {
			if !t.Valid {
				return false
			}
		}
	}
	return b.copySize() <= copyMaxBytes
}

func (b *PublishBatch) copySize() int {
	n := 0
	for i, v := range b.Values {
		n += 64 + len(v)
		if b.Keys != nil {
			n += len(b.Keys[i])
		}
		if b.Headers != nil {
			n += len(b.Headers[i])
		}
	}
	return n
}

// MaxRecordBound is an upper bound of the largest record of b as
// max_record_bytes counts it (key + value + headers as jsonb text). jsonb's
// text of a JSON object is at most twice the compact JSON the client
// sends: it adds a space after each colon and comma.
func (b *PublishBatch) MaxRecordBound() int64 {
	var m int64
	for i, v := range b.Values {
		n := int64(len(v))
		if b.Keys != nil {
			n += int64(len(b.Keys[i]))
		}
		if b.Headers != nil {
			n += 2 * int64(len(b.Headers[i]))
		}
		m = max(m, n)
	}
	return m
}

// PublishCopy appends b (CopyEligible) to partition b.Partition of the
// topic whose id is topicID, with COPY, on a connection of pool. It
// returns nil, nil when the server declined (PM016: the direct statement
// or publish() must do it) or when the connection's role may not use the
// partition's offset sequence; nothing is stored then.
//
// Only a role that may write the record table and the partitions' counter
// rows may publish with COPY: the schema's owner (docs/operations.md,
// "Database roles"). The first refusal (42501) is remembered, and the
// store's later COPY publishes answer nil, nil at once.
func (s *Store) PublishCopy(ctx context.Context, pool *pgxpool.Pool, topicID int32, b *PublishBatch) (*PublishResult, error) {
	t := s.copyTexts()
	return s.publishCopy(ctx, pool, b, copyAnswer, 0, func(buf []byte, prepared []string) []byte {
		return s.encodeCopy(buf, prepared[0], prepared[1], topicID, b)
	}, t.begin, t.end)
}

// copyAnswer is how many statements of a COPY publish complete before
// the one whose row is the answer: begin and COPY.
const copyAnswer = 2

// publishCopy runs a COPY publish of b on a connection of pool: it
// prepares texts (pgx keeps them by their text, so once per connection)
// and sends what encode appends, given their prepared names, in one
// round trip; the row of the statement after the first answer completed
// ones is the answer; extra bounds what encode writes besides encodeCopy's
// messages. It returns nil, nil when the server declined
// (PM016) or the connection's role may not use COPY (PublishCopy).
func (s *Store) publishCopy(ctx context.Context, pool *pgxpool.Pool, b *PublishBatch, answer, extra int,
	encode func(buf []byte, prepared []string) []byte, texts ...string) (*PublishResult, error) {
	if s.copyDenied.Load() {
		return nil, nil
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	plan, err := c.Conn().Prepare(ctx, rowTIDPlanSQL, rowTIDPlanSQL)
	if err != nil {
		return nil, errs.Map(err)
	}
	names := make([]string, len(texts))
	for i, q := range texts {
		sd, err := c.Conn().Prepare(ctx, q, q)
		if err != nil {
			return nil, errs.Map(err)
		}
		names[i] = sd.Name
	}

	// The buffer is sized once: growing it as the records are appended
	// copied each batch about twice more and was about half of the client's
	// CPU at batch 1000 (profiled).
	bp := copyBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= copyPoolMaxBytes {
			copyBufs.Put(bp)
		}
	}()
	if need := b.copySize() + copyMessagesBytes + extra; cap(*bp) < need {
		*bp = make([]byte, 0, need)
	}
	// rowTIDPlanSQL first: the begin and end statements find the counter
	// row by its ctid.
	buf := appendExecute(appendBind((*bp)[:0], plan.Name))
	buf = encode(buf, names)
	*bp = buf

	res, err := roundTrip(ctx, c.Conn(), buf, answer+1)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == copyDeclinedCode {
			return nil, nil
		}
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			s.copyDenied.Store(true)
			return nil, nil
		}
		return nil, errs.Map(err)
	}
	res.Partition = b.Partition
	res.RecordCount = int32(len(b.Values))
	return res, nil
}

// copyOffsetSeqSetting names the setting through which the record
// table's offset default (record."offset", set in 012_publish_copy.up.sql)
// finds the partition's offset sequence; it is the same in every schema.
const copyOffsetSeqSetting = "pgmsg.copy_offset_seq"

// copyTexts are a store's COPY publish statements, made once: the begin
// and end statements in its schema, and the COPY statement for each set
// of columns a batch may give (copyKeys, copyHeaders, copyTimestamps).
type copyTexts struct {
	once       sync.Once
	begin, end string
	copy       [8]string
}

// Bits of copyTexts.copy's index: the batch gives keys, headers,
// timestamps.
const (
	copyKeys = 1 << iota
	copyHeaders
	copyTimestamps
)

func (s *Store) copyTexts() *copyTexts {
	t := &s.copy
	t.once.Do(func() {
		// After qualifying: the setting's name is not a schema's.
		setting := func(q string) string {
			return strings.ReplaceAll(s.SQL(q), "{{copy_offset_seq}}", "'"+copyOffsetSeqSetting+"'")
		}
		t.begin, t.end = setting(copyBeginSQL), setting(copyEndSQL)
		for i := range t.copy {
			cols := "topic_id, partition, value"
			if i&copyKeys != 0 {
				cols += ", key"
			}
			if i&copyHeaders != 0 {
				cols += ", headers"
			}
			if i&copyTimestamps != 0 {
				cols += `, "timestamp"`
			}
			t.copy[i] = "COPY " + pgx.Identifier{s.schema}.Sanitize() + ".record (" + cols + ") FROM STDIN (FORMAT binary)"
		}
	})
	return t
}

// encodeCopy appends to buf the publish's messages: the prepared begin
// statement's Bind and Execute, the COPY (appendCopyRows), the prepared
// end statement's Bind and Execute, and Sync.
func (s *Store) encodeCopy(buf []byte, begin, end string, topicID int32, b *PublishBatch) []byte {
	p := newCopyParams(topicID, b)
	buf = appendBind(buf, begin, p.topic[:], p.part[:], p.count[:], p.bound[:])
	buf = appendExecute(buf)
	buf = s.appendCopyRows(buf, topicID, b)
	buf = appendBind(buf, end, p.topic[:], p.part[:], p.count[:])
	buf = appendExecute(buf)
	return append(buf, 'S', 0, 0, 0, 4)
}

// copyParams are the begin and end statements' parameters of b's COPY
// publish in binary format: topic id, partition, record count and the
// records' size bound.
type copyParams struct {
	topic, part, count [4]byte
	bound              [8]byte
}

func newCopyParams(topicID int32, b *PublishBatch) (p copyParams) {
	binary.BigEndian.PutUint32(p.topic[:], uint32(topicID))
	binary.BigEndian.PutUint32(p.part[:], uint32(b.Partition))
	binary.BigEndian.PutUint32(p.count[:], uint32(len(b.Values)))
	binary.BigEndian.PutUint64(p.bound[:], uint64(b.MaxRecordBound()))
	return p
}

// appendCopyRows appends b's COPY: its Parse, Bind and Execute, its data
// (binary format) in one CopyData message, and CopyDone.
func (s *Store) appendCopyRows(buf []byte, topicID int32, b *PublishBatch) []byte {
	cols := 0
	if b.Keys != nil {
		cols |= copyKeys
	}
	if b.Headers != nil {
		cols |= copyHeaders
	}
	if b.timestamps != nil {
		cols |= copyTimestamps
	}
	q := s.copyTexts().copy[cols]
	buf = append(buf, 'P')
	buf = binary.BigEndian.AppendUint32(buf, uint32(4+1+len(q)+1+2))
	buf = append(buf, 0) // the unnamed statement
	buf = append(buf, q...)
	buf = append(buf, 0, 0, 0) // no parameter types
	buf = appendBind(buf, "")
	buf = appendExecute(buf)

	start := len(buf)
	buf = append(buf, 'd', 0, 0, 0, 0)
	buf = append(buf, "PGCOPY\n\xff\r\n\x00"...)
	buf = binary.BigEndian.AppendUint32(buf, 0) // flags
	buf = binary.BigEndian.AppendUint32(buf, 0) // header extension
	fields := uint16(3)
	if b.Keys != nil {
		fields++
	}
	if b.Headers != nil {
		fields++
	}
	if b.timestamps != nil {
		fields++
	}
	for i, v := range b.Values {
		buf = binary.BigEndian.AppendUint16(buf, fields)
		buf = binary.BigEndian.AppendUint32(buf, 4)
		buf = binary.BigEndian.AppendUint32(buf, uint32(topicID))
		buf = binary.BigEndian.AppendUint32(buf, 4)
		buf = binary.BigEndian.AppendUint32(buf, uint32(b.Partition))
		buf = appendCopyBytes(buf, v, 0)
		if b.Keys != nil {
			buf = appendCopyBytes(buf, b.Keys[i], 0)
		}
		if b.Headers != nil {
			// jsonb's binary format: version 1, then the JSON text.
			buf = appendCopyBytes(buf, b.Headers[i], 1)
		}
		if b.timestamps != nil {
			buf = binary.BigEndian.AppendUint32(buf, 8)
			buf = binary.BigEndian.AppendUint64(buf, uint64(b.timestamps[i].Time.UnixMicro()-pgEpochMicros))
		}
	}
	buf = binary.BigEndian.AppendUint16(buf, 0xffff) // trailer: -1
	binary.BigEndian.PutUint32(buf[start+1:], uint32(len(buf)-start-1))
	return append(buf, 'c', 0, 0, 0, 4)
}

// appendBind appends a Bind message of statement stmt to the unnamed
// portal: params in binary format (nil: NULL), results in binary format.
func appendBind(buf []byte, stmt string, params ...[]byte) []byte {
	start := len(buf)
	buf = append(buf, 'B', 0, 0, 0, 0)
	buf = append(buf, 0) // the unnamed portal
	buf = append(buf, stmt...)
	buf = append(buf, 0)
	buf = binary.BigEndian.AppendUint16(buf, 1) // one format for all parameters:
	buf = binary.BigEndian.AppendUint16(buf, 1) // binary
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(params)))
	for _, p := range params {
		if p == nil {
			buf = binary.BigEndian.AppendUint32(buf, 0xffffffff)
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(p)))
		buf = append(buf, p...)
	}
	buf = binary.BigEndian.AppendUint16(buf, 1) // one format for all results:
	buf = binary.BigEndian.AppendUint16(buf, 1) // binary
	binary.BigEndian.PutUint32(buf[start+1:], uint32(len(buf)-start-1))
	return buf
}

// appendExecute appends an Execute message of the unnamed portal, all rows.
func appendExecute(buf []byte) []byte {
	return append(buf, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0)
}

// pgEpochMicros is 2000-01-01 UTC, PostgreSQL's epoch, in Unix microseconds.
const pgEpochMicros = 946684800000000

// appendCopyBytes appends a field: NULL for nil, else its length and, when
// version is set (jsonb), that byte before v.
func appendCopyBytes(buf, v []byte, version byte) []byte {
	if v == nil {
		return binary.BigEndian.AppendUint32(buf, 0xffffffff)
	}
	if version != 0 {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(v)+1))
		buf = append(buf, version)
		return append(buf, v...)
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(v)))
	return append(buf, v...)
}

// roundTrip writes msgs on conn's socket and reads the answers until the
// server is ready again: the row of the statement after the first answer
// completed ones (the end statement's), or the first error.
// When ctx ends mid-way it does what pgx does: it asks the server to
// cancel the statement (which then answers with an error, having stored
// nothing, and the connection stays usable), and cuts the socket if no
// answer comes within cancelWait; a connection whose exchange did not end
// cleanly is closed.
func roundTrip(ctx context.Context, conn *pgx.Conn, msgs []byte, answer int) (*PublishResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pg := conn.PgConn()
	nc := pg.Conn()
	var mu sync.Mutex
	finished := false
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		cctx, cancel := context.WithTimeout(context.Background(), cancelWait)
		_ = pg.CancelRequest(cctx)
		cancel()
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			_ = nc.SetDeadline(time.Now().Add(cancelWait))
		}
	})
	res, err := exchange(pg, nc, msgs, answer)
	mu.Lock()
	finished = true
	mu.Unlock()
	if !stop() {
		// The cancel request is out before the connection is used again
		// (the server ignores one that arrives when it is idle).
		<-cancelled
	}
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) {
		// The conversation is cut: the connection cannot be used again.
		_ = conn.Close(context.Background())
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return res, err
}

// cancelWait is how long a cancelled COPY publish waits for the server's
// answer to the cancel request before cutting the connection.
const cancelWait = 2 * time.Second

// exchange does roundTrip's writing and reading. A server error is
// returned as a *pgconn.PgError once the server is ready again.
func exchange(pg *pgconn.PgConn, nc interface{ Write([]byte) (int, error) }, msgs []byte, answer int) (*PublishResult, error) {
	if _, err := nc.Write(msgs); err != nil {
		return nil, err
	}
	fe := pg.Frontend()
	var res *PublishResult
	var serverErr error
	completed := 0 // statements done
	for {
		msg, err := fe.Receive()
		if err != nil {
			return nil, err
		}
		switch m := msg.(type) {
		case *pgproto3.CommandComplete:
			completed++
		case *pgproto3.DataRow:
			if completed == answer && serverErr == nil {
				if res, err = parseCopyEnd(m.Values); err != nil {
					return nil, err
				}
			}
		case *pgproto3.ErrorResponse:
			if serverErr == nil {
				serverErr = pgconn.ErrorResponseToPgError(m)
			}
		case *pgproto3.ReadyForQuery:
			if serverErr != nil {
				return nil, serverErr
			}
			if res == nil {
				return nil, errors.New("pgmsg: COPY publish: no answer from the end statement")
			}
			return res, nil
		}
	}
}

// parseCopyEnd reads copyEndSQL's row, in binary format: the base offset,
// the publish time in Unix microseconds, segments_low. A row of another
// shape ends the exchange as a cut one (the connection is closed).
func parseCopyEnd(v [][]byte) (*PublishResult, error) {
	if len(v) != 3 || len(v[0]) != 8 || len(v[1]) != 8 || len(v[2]) != 1 {
		return nil, errors.New("pgmsg: COPY publish: bad answer from the end statement")
	}
	return &PublishResult{BaseOffset: int64(binary.BigEndian.Uint64(v[0])),
		Timestamp: time.UnixMicro(int64(binary.BigEndian.Uint64(v[1]))), SegmentsLow: v[2][0] == 1}, nil
}
