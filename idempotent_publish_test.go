package pgmsg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// requireState checks that err is a PostgreSQL error with SQLSTATE state.
func requireState(t *testing.T, err error, state string, msg ...any) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want SQLSTATE %s, got %v %v", state, err, msg)
	require.Equal(t, state, pgErr.Code, "%s %v", pgErr.Message, msg)
}

func idemRecords(topic string, n int) []*pgmsg.Record {
	recs := make([]*pgmsg.Record, n)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", i)}
		if i%3 != 0 { // a third unkeyed, the rest over several partitions
			recs[i].Key = fmt.Appendf(nil, "k%d", i)
		}
	}
	return recs
}

// A retried idempotent publish stores nothing and reports where the first
// attempt stored the records; the next sequence is stored; a sequence
// that goes back is refused with nothing written.
func TestPublishIdempotentStoresOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "idem", 4)

	first := idemRecords("idem", 12)
	dup, err := tb.client.PublishIdempotent(tb.ctx, "p1", 0, first, nil)
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, int64(12), storedRecords(t, tb, "idem"))

	again := idemRecords("idem", 12) // the same records, as a retry sends them
	dup, err = tb.client.PublishIdempotent(tb.ctx, "p1", 0, again, nil)
	require.NoError(t, err)
	require.True(t, dup, "the retry is reported as a duplicate")
	require.Equal(t, int64(12), storedRecords(t, tb, "idem"), "nothing written twice")
	for i := range first {
		require.Equal(t, first[i].Partition, again[i].Partition, "record %d", i)
		require.Equal(t, first[i].Offset, again[i].Offset, "record %d", i)
		require.True(t, first[i].Timestamp.Equal(again[i].Timestamp), "record %d", i)
	}
	// The records read back are the first attempt's, once each.
	for p := int32(0); p < 4; p++ {
		recs, err := tb.client.Fetch(tb.ctx, "idem", p, 0, 100)
		require.NoError(t, err)
		for _, r := range recs {
			require.Equal(t, first[indexOf(t, first, p, r.Offset)].Value, r.Value)
		}
	}

	// The next sequence is stored; another producer has its own numbers.
	dup, err = tb.client.PublishIdempotent(tb.ctx, "p1", 12, idemRecords("idem", 5), nil)
	require.NoError(t, err)
	require.False(t, dup)
	dup, err = tb.client.PublishIdempotent(tb.ctx, "p2", 0, idemRecords("idem", 12), nil)
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, int64(29), storedRecords(t, tb, "idem"))

	// Going back, or overlapping the last batch, is refused: nothing written.
	for _, seq := range []int64{0, 3, 14} {
		_, err = tb.client.PublishIdempotent(tb.ctx, "p1", seq, idemRecords("idem", 5), nil)
		require.ErrorIs(t, err, pgmsg.ErrOutOfOrderSequence, "sequence %d", seq)
		require.Equal(t, "PM015", pgmsg.ErrorCode(err))
	}
	require.Equal(t, int64(29), storedRecords(t, tb, "idem"))

	// Gaps are allowed.
	dup, err = tb.client.PublishIdempotent(tb.ctx, "p1", 1000, idemRecords("idem", 2), nil)
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, int64(31), storedRecords(t, tb, "idem"))
}

func indexOf(t *testing.T, recs []*pgmsg.Record, p int32, off int64) int {
	t.Helper()
	for i, r := range recs {
		if r.Partition == p && r.Offset == off {
			return i
		}
	}
	t.Fatalf("no record at partition %d offset %d", p, off)
	return -1
}

// Bad arguments are refused before anything is written.
func TestPublishIdempotentRefusesBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "idem-bad", 2)
	for _, c := range []struct {
		name     string
		producer string
		seq      int64
		recs     []*pgmsg.Record
		want     error
	}{
		{"empty producer", "", 0, idemRecords("idem-bad", 1), pgmsg.ErrInvalidArgument},
		{"long producer", strings.Repeat("p", 201), 0, idemRecords("idem-bad", 1), pgmsg.ErrInvalidArgument},
		{"negative sequence", "p", -1, idemRecords("idem-bad", 1), pgmsg.ErrInvalidArgument},
		{"sequence overflows", "p", 1<<63 - 2, idemRecords("idem-bad", 3), pgmsg.ErrInvalidArgument},
		{"empty batch", "p", 0, nil, pgmsg.ErrEmptyBatch},
		{"unknown topic", "p", 0, idemRecords("nope", 1), pgmsg.ErrUnknownTopic},
	} {
		_, err := tb.client.PublishIdempotent(tb.ctx, c.producer, c.seq, c.recs, nil)
		require.ErrorIs(t, err, c.want, c.name)
	}
	require.Equal(t, int64(0), storedRecords(t, tb, "idem-bad"))
}

// An Idempotent Producer numbers its records per partition and stores
// each once; the producer ids of two Producers differ.
func TestProducerIdempotent(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "idem-prod", 3)
	p, err := tb.client.NewProducer(&pgmsg.ProducerConfig{Idempotent: true, MaxBatchRecords: 7})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		rec := &pgmsg.Record{Topic: "idem-prod", Key: fmt.Appendf(nil, "k%d", i%17), Value: fmt.Appendf(nil, "%d", i)}
		p.Produce(tb.ctx, rec, func(_ *pgmsg.Record, err error) {
			errs <- err
			wg.Done()
		})
	}
	wg.Wait()
	require.NoError(t, p.Close(context.Background()))
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(200), storedRecords(t, tb, "idem-prod"))
	var producers, partitions int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(DISTINCT producer_id), count(*) FROM `+
		pgx.Identifier{tb.Schema}.Sanitize()+`.producer_state`).Scan(&producers, &partitions))
	require.Equal(t, 1, producers)
	require.Equal(t, 3, partitions)

	_, err = tb.client.NewProducer(&pgmsg.ProducerConfig{Idempotent: true, ProducerID: strings.Repeat("x", 201)})
	require.Error(t, err)
}
