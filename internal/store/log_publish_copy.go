package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
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
// writes one per record (migration 012; docs/benchmarks.md has the
// measurements). The whole publish is one simple-query message and its
// data, written at once: _publish_copy_begin() reserves the offsets, COPY
// stores the records, _publish_copy_end() checks the count and answers,
// in one implicit transaction and one round trip.
//
// pgx's CopyFrom cannot return the last statement's row, so the messages
// are written and read on the connection's socket directly, as CopyFrom
// does it: the query and the data go out before the server answers the
// COPY (the server reads them in order, and ignores copy data that
// arrives after an error has ended the query).

// CopyMinRecords is the smallest batch published with COPY: below it the
// COPY statement's set-up costs more than the WAL records it saves.
const CopyMinRecords = 16

// copyMaxBytes bounds a COPY publish's data (one CopyData message); a
// larger batch goes through the direct statement.
const copyMaxBytes = 32 << 20

// copyDeclinedCode is _publish_copy_begin()'s answer when publish() has
// more to do (PM016).
const copyDeclinedCode = "PM016"

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
func (s *Store) PublishCopy(ctx context.Context, pool *pgxpool.Pool, topicID int32, b *PublishBatch) (*PublishResult, error) {
	bp := copyBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= 1<<20 {
			copyBufs.Put(bp)
		}
	}()
	buf := s.encodeCopy((*bp)[:0], topicID, b)
	*bp = buf

	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	res, err := roundTrip(ctx, c.Conn(), buf)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == copyDeclinedCode || pgErr.Code == "42501") {
			return nil, nil
		}
		return nil, errs.Map(err)
	}
	res.Partition = b.Partition
	res.RecordCount = int32(len(b.Values))
	return res, nil
}

// encodeCopy appends to buf the publish's messages: the query, the COPY's
// data (binary format) in one CopyData message, and CopyDone.
func (s *Store) encodeCopy(buf []byte, topicID int32, b *PublishBatch) []byte {
	schema := pgx.Identifier{s.schema}.Sanitize()
	cols := "topic_id, partition, value"
	if b.Keys != nil {
		cols += ", key"
	}
	if b.Headers != nil {
		cols += ", headers"
	}
	if b.timestamps != nil {
		cols += `, "timestamp"`
	}
	n := len(b.Values)
	q := fmt.Sprintf(`SELECT %[1]s._publish_copy_begin(%[2]d, %[3]d, %[4]d, %[5]d); `+
		`COPY %[1]s.record (%[6]s) FROM STDIN (FORMAT binary); `+
		`SELECT * FROM %[1]s._publish_copy_end(%[2]d, %[3]d, %[4]d)`,
		schema, topicID, b.Partition, n, b.MaxRecordBound(), cols)
	buf = append(buf, 'Q')
	buf = binary.BigEndian.AppendUint32(buf, uint32(4+len(q)+1))
	buf = append(buf, q...)
	buf = append(buf, 0)

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
// server is ready again: _publish_copy_end()'s row, or the first error.
// When ctx ends mid-way it does what pgx does: it asks the server to
// cancel the statement (which then answers with an error, having stored
// nothing, and the connection stays usable), and cuts the socket if no
// answer comes within cancelWait; a connection whose exchange did not end
// cleanly is closed.
func roundTrip(ctx context.Context, conn *pgx.Conn, msgs []byte) (*PublishResult, error) {
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
	res, err := exchange(pg, nc, msgs)
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
func exchange(pg *pgconn.PgConn, nc interface{ Write([]byte) (int, error) }, msgs []byte) (*PublishResult, error) {
	if _, err := nc.Write(msgs); err != nil {
		return nil, err
	}
	fe := pg.Frontend()
	var res *PublishResult
	var serverErr error
	for {
		msg, err := fe.Receive()
		if err != nil {
			return nil, err
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			if len(m.Values) == 3 && serverErr == nil {
				if res, err = parseCopyEnd(m.Values); err != nil {
					serverErr = err
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
				return nil, errors.New("pgmsg: COPY publish: no answer from _publish_copy_end")
			}
			return res, nil
		}
	}
}

// parseCopyEnd reads _publish_copy_end()'s row, in text format: the base
// offset, the publish time in Unix microseconds, segments_low.
func parseCopyEnd(v [][]byte) (*PublishResult, error) {
	base, err1 := strconv.ParseInt(string(v[0]), 10, 64)
	us, err2 := strconv.ParseInt(string(v[1]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgmsg: COPY publish: bad answer: %w", err)
	}
	return &PublishResult{BaseOffset: base, Timestamp: time.UnixMicro(us), SegmentsLow: string(v[2]) == "t"}, nil
}
