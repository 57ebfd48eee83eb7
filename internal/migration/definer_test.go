package migration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/pgtest"
)

// appRoleGrants are the grants of the application role documented in
// docs/operations.md ("Database roles"): the SQL API, DML on pgmsg's tables,
// no DDL. %[1]s is the schema, %[2]s the role.
const appRoleGrants = `
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %[1]s TO %[2]s;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %[1]s TO %[2]s;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %[1]s TO %[2]s;
`

// usageOnlyGrants: a role that may see the schema (a monitoring role, say)
// and was granted nothing in it.
const usageOnlyGrants = `GRANT USAGE ON SCHEMA %[1]s TO %[2]s;`

// rolePool creates a NOLOGIN role with grants (formatted with the quoted
// schema and the role) and returns a pool whose sessions SET ROLE to it.
func rolePool(t *testing.T, b *pgtest.Bundle, grants string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	role := "pgmsg_t_" + hex.EncodeToString(rnd[:])
	schema := pgx.Identifier{b.Schema}.Sanitize()
	_, err := b.Pool.Exec(ctx, "CREATE ROLE "+role+" NOLOGIN; "+fmt.Sprintf(grants, schema, role))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = b.Pool.Exec(context.Background(), fmt.Sprintf("DROP OWNED BY %s; DROP ROLE %s", role, role))
	})
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.MaxConns = 2
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+role)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// segmentState describes every segment of the schema: the tables named like
// segments, the segment rows and each partition's segment_end. A refused
// call must leave it unchanged.
func segmentState(t *testing.T, b *pgtest.Bundle) string {
	t.Helper()
	var s string
	require.NoError(t, b.Pool.QueryRow(context.Background(), fmt.Sprintf(`
SELECT format('tables %%s; segments %%s; ends %%s',
  (SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_catalog.pg_class c
    WHERE c.relnamespace = pg_catalog.to_regnamespace($1) AND c.relname LIKE 'record\_%%\_p%%'),
  (SELECT string_agg(s.relname || ':' || s.start_offset || '-' || s.end_offset, ',' ORDER BY s.relname) FROM %[1]s.segment s),
  (SELECT string_agg(tp.topic_id || '/' || tp.partition || '=' || tp.segment_end, ',' ORDER BY tp.topic_id, tp.partition)
     FROM %[1]s.topic_partition tp))`, pgx.Identifier{b.Schema}.Sanitize()),
		pgx.Identifier{b.Schema}.Sanitize()).Scan(&s))
	return s
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// The SECURITY DEFINER segment functions run as the
// schema owner, so PUBLIC must not be able to call them. A role that was
// granted only USAGE on the schema gets 42501 from each, and nothing is
// created or locked. PUBLIC once kept EXECUTE on them.
func TestSegmentFunctionsNotExecutableByPublic(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, nil)
	ctx := context.Background()
	s := pgx.Identifier{b.Schema}.Sanitize()
	_, err := b.Pool.Exec(ctx, `SELECT `+s+`.topic_create('t', 1, '{"segment_records": 16}')`)
	require.NoError(t, err)
	var id int32
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT topic_id FROM `+s+`.topic WHERE name = 't'`).Scan(&id))
	pool := rolePool(t, b, usageOnlyGrants)
	before := segmentState(t, b)
	for _, call := range []string{
		fmt.Sprintf(`SELECT %s._segment_lock(%d)`, s, id),
		fmt.Sprintf(`SELECT %s._segment_create(%d, 0, 16, 32)`, s, id),
		fmt.Sprintf(`SELECT %s._segment_ensure(%d, 0, 16, 16, 1000)`, s, id),
	} {
		_, err := pool.Exec(ctx, call)
		require.Equal(t, "42501", sqlState(err), "%s: %v", call, err)
	}
	require.Equal(t, before, segmentState(t, b))
}

// The segment functions create or lock only what a publish would: an
// existing topic's table; the partition's next segment, of the topic's
// size, while the partition lacks its two segments of headroom; segments up
// to next_offset plus that headroom. Anything else is refused with a PM code
// (PM001 unknown topic, PM005 partition, PM004 argument) and creates
// nothing, even for the application role, which holds EXECUTE on them.
// Publishing as that role still creates segments as it needs them, ahead of
// need and in a publish's own fallback. Once, the bad calls
// locked other tables (42P01 for an unknown one), created segments out of
// order, of any size and in any number, or failed half-way (42P07).
func TestSegmentFunctionsCheckArguments(t *testing.T) {
	t.Parallel()
	b := pgtest.Schema(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := pgx.Identifier{b.Schema}.Sanitize()
	owner, err := pgmsg.NewClient(b.Pool, &pgmsg.Config{Schema: b.Schema, DisableNotify: true})
	require.NoError(t, err)
	t.Cleanup(owner.Close)
	_, err = owner.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 2, SegmentRecords: 16})
	require.NoError(t, err)
	var id int32
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT topic_id FROM `+s+`.topic WHERE name = 't'`).Scan(&id))
	pool := rolePool(t, b, appRoleGrants)

	refused := func(code, call string, args ...any) {
		t.Helper()
		before := segmentState(t, b)
		q := fmt.Sprintf(call, append([]any{s}, args...)...)
		_, err := pool.Exec(ctx, q)
		require.Equal(t, code, sqlState(err), "%s: %v", q, err)
		require.Equal(t, before, segmentState(t, b), "%s changed the segments", q)
	}
	// Partition 0: segment [0, 16) (the one a partition is created
	// with), segment_end 16, next_offset 0.
	refused("PM001", `SELECT %s._segment_lock(%d)`, id+1000)
	refused("PM001", `SELECT %s._segment_lock(NULL)`)
	refused("PM001", `SELECT %s._segment_create(%d, 0, 16, 32)`, id+1000)
	refused("PM005", `SELECT %s._segment_create(%d, 2, 0, 16)`, id)
	refused("PM005", `SELECT %s._segment_create(%d, NULL, 16, 32)`, id)
	refused("PM004", `SELECT %s._segment_create(%d, 0, 0, 16)`, id)       // exists
	refused("PM004", `SELECT %s._segment_create(%d, 0, 1000, 1016)`, id)  // not the next one
	refused("PM004", `SELECT %s._segment_create(%d, 0, 16, 1000016)`, id) // not the topic's size
	refused("PM004", `SELECT %s._segment_create(%d, 0, NULL, NULL)`, id)  // no range
	refused("PM001", `SELECT %s._segment_ensure(%d, 0, 16, 16, 0)`, id+1000)
	refused("PM005", `SELECT %s._segment_ensure(%d, -1, 16, 16, 0)`, id)
	refused("PM004", `SELECT %s._segment_ensure(%d, 0, 16, 16, 1000)`, id) // past next_offset
	refused("PM004", `SELECT %s._segment_ensure(%d, 0, 16, 16, NULL)`, id)
	refused("PM004", `SELECT %s._segment_ensure(%d, 0, 48, 16, 0)`, id)   // not segment_end
	refused("PM004", `SELECT %s._segment_ensure(%d, 0, 1000, 16, 0)`, id) // not segment_end

	// What a publish would do is allowed: the lock, the next segment while
	// next_offset + 3 segments is not covered, an ensure that finds the two
	// segments of headroom there. Past that, the next segment is refused.
	_, err = pool.Exec(ctx, fmt.Sprintf(`SELECT %s._segment_create(%d, 0, 16, 32)`, s, id))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, fmt.Sprintf(`SELECT %s._segment_create(%d, 0, 32, 48)`, s, id))
	require.NoError(t, err)
	refused("PM004", `SELECT %s._segment_create(%d, 0, 48, 64)`, id) // three segments ahead already
	var n int
	require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT sum(record_count)::int FROM %s.publish('t',
  ARRAY(SELECT convert_to(i::text, 'UTF8') FROM generate_series(1, 20) i), p_partition => 0, p_notify => false)`, s)).Scan(&n))
	require.Equal(t, 20, n)
	_, err = pool.Exec(ctx, fmt.Sprintf(`SELECT %s._segment_lock(%d)`, s, id))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, fmt.Sprintf(`SELECT %s._segment_create(%d, 0, 48, 64)`, s, id))
	require.NoError(t, err)
	var end int64
	require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT %s._segment_ensure(%d, 0, 64, 16, 20)`, s, id)).Scan(&end))
	require.Equal(t, int64(64), end)
	_, err = pool.Exec(ctx, fmt.Sprintf(`SELECT %s._segment_create(%d, 0, 64, 80)`, s, id))
	require.NoError(t, err)
	refused("PM004", `SELECT %s._segment_create(%d, 0, 80, 96)`, id)

	// Publishing as the application role: one record at a time (segments
	// created ahead by segment_ensure in the background), then a batch of
	// 100 into partition 1, past its segment_end (created by the publish
	// itself, in _append's fallback).
	app, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: b.Schema, DisableNotify: true})
	require.NoError(t, err)
	t.Cleanup(app.Close)
	for i := range 40 {
		require.NoError(t, app.Publish(ctx, []*pgmsg.Record{{Topic: "t", Key: []byte{byte(i)}, Value: []byte{byte(i)}}}, nil), "publish %d", i)
	}
	require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT sum(record_count)::int FROM %s.publish('t',
  ARRAY(SELECT convert_to(i::text, 'UTF8') FROM generate_series(1, 100) i), p_partition => 1, p_notify => false)`, s)).Scan(&n))
	require.Equal(t, 100, n)
	_, err = pool.Exec(ctx, fmt.Sprintf(`SELECT %s.segment_ensure('t', 0), %s.segment_ensure('t', 1), %s.segments_ensure()`, s, s, s))
	require.NoError(t, err)

	// Every partition's segments are contiguous from 0 and cover its
	// offsets with two segments to spare; the counter row's segment_end
	// (the end publishers write below) is within them.
	rows, err := b.Pool.Query(ctx, fmt.Sprintf(`
SELECT tp.partition, tp.next_offset, tp.segment_end,
       (SELECT max(s.end_offset) FROM %[1]s.segment s WHERE s.topic_id = tp.topic_id AND s.partition = tp.partition),
       (SELECT array_agg(s.start_offset || '-' || s.end_offset ORDER BY s.start_offset)::text[]
          FROM %[1]s.segment s WHERE s.topic_id = tp.topic_id AND s.partition = tp.partition)
  FROM %[1]s.topic_partition tp WHERE tp.topic_id = $1 ORDER BY tp.partition`, s), id)
	require.NoError(t, err)
	total := 0
	for rows.Next() {
		var part int
		var next, counterEnd, segEnd int64
		var segs []string
		require.NoError(t, rows.Scan(&part, &next, &counterEnd, &segEnd, &segs))
		var want []string
		for lo := int64(0); lo < segEnd; lo += 16 {
			want = append(want, fmt.Sprintf("%d-%d", lo, lo+16))
		}
		require.Equal(t, want, segs, "partition %d segments", part)
		require.GreaterOrEqual(t, segEnd, next+32, "partition %d headroom", part)
		require.LessOrEqual(t, counterEnd, segEnd, "partition %d counter row's end", part)
		require.GreaterOrEqual(t, counterEnd, next, "partition %d counter row's end", part)
		total += int(next)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 160, total)

	// All of it reads back as the application role.
	got := 0
	for got < 160 {
		cl, err := app.Claim(ctx, "t", "g", &pgmsg.ClaimOpts{MaxRecords: 100})
		require.NoError(t, err)
		require.NotNil(t, cl, "claim after %d records", got)
		got += len(cl.Records)
		require.NoError(t, app.Commit(ctx, cl))
	}
	require.Equal(t, 160, got)
}
