package pgmsgmigrate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// recordTree is the record table's partition tree: each relation's parent,
// "-" for the record table itself.
func recordTree(t *testing.T, pool *pgxpool.Pool, schema string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT c.relname::text, coalesce(p.relname::text, '-')
		FROM pg_catalog.pg_partition_tree(pg_catalog.to_regclass($1)) pt
		JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) pt.relid
		LEFT JOIN pg_catalog.pg_class p ON p.oid OPERATOR(pg_catalog.=) pt.parentrelid`, pgx.Identifier{schema, "record"}.Sanitize())
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var c, p string
		require.NoError(t, rows.Scan(&c, &p))
		out[c] = p
	}
	require.NoError(t, rows.Err())
	return out
}

// recordConstraints counts the constraints of the record table and the
// tables under it, and says whether its primary key is there.
func recordConstraints(t *testing.T, pool *pgxpool.Pool, schema string) (n int, pkey bool) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE k.conname = 'record_pkey' AND k.conrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)) > 0
		FROM pg_catalog.pg_partition_tree(pg_catalog.to_regclass($1)) pt
		JOIN pg_catalog.pg_constraint k ON k.conrelid OPERATOR(pg_catalog.=) pt.relid`, pgx.Identifier{schema, "record"}.Sanitize()).Scan(&n, &pkey))
	return n, pkey
}

// recordState is what must survive migration 030 either way: every
// record through the record table, the owner and grants of every table
// under it that is not a block, and the record table's defaults and
// triggers.
func recordState(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	s := pgx.Identifier{schema}.Sanitize()
	rows, err := pool.Query(context.Background(), `
SELECT format('%s %s %s %s %s', r.topic_id, r.partition, r."offset", r.timestamp, encode(r.value, 'escape'))
  FROM `+s+`.record r
UNION ALL
SELECT format('rel %s owner %s acl %s', c.relname, c.relowner::regrole, (
         SELECT string_agg(x.p, ',' ORDER BY x.p)
           FROM aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a,
                LATERAL (SELECT format('%s:%s', CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, a.privilege_type)) x(p)))
  FROM pg_catalog.pg_partition_tree(pg_catalog.to_regclass($1)) pt
  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) pt.relid
 WHERE c.relname !~ '^record_b[0-9]+$'
UNION ALL
SELECT format('default %s %s', a.attname, pg_catalog.pg_get_expr(d.adbin, d.adrelid))
  FROM pg_catalog.pg_attrdef d JOIN pg_catalog.pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
 WHERE d.adrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)
UNION ALL
SELECT format('trigger %s', tg.tgname) FROM pg_catalog.pg_trigger tg
 WHERE tg.tgrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1) AND NOT tg.tgisinternal
ORDER BY 1`, pgx.Identifier{schema, "record"}.Sanitize())
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// Migration 030 moves an installation's topics, with their records,
// segments, grants and groups, under blocks of the record table and back:
// down leaves each topic's table a partition of the record table (the
// layout of 029, which its topic_create made), up puts it in its block,
// nothing is lost either way, and the topics can be read, written,
// created and deleted after the up step.
func TestRecordBlocksUpgrade(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_blk_%d", time.Now().UnixNano()%1e9)
	reader := schema + "_reader"
	t.Cleanup(func() {
		dropAll(t, pool, schema)
		_, _ = pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{reader}.Sanitize())
	})
	s := pgx.Identifier{schema}.Sanitize()
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	client, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: schema})
	require.NoError(t, err)
	defer client.Close()

	// A role granted the record table: topic_create grants it each segment.
	_, err = pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{reader}.Sanitize())
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "GRANT SELECT ON "+s+".record TO "+pgx.Identifier{reader}.Sanitize())
	require.NoError(t, err)
	// Topics in three blocks: ids 1 and 2 (block 0), 199 (block 1), 200
	// (block 2); each with records over several segments and a group that
	// read some of them.
	create := func(name string) {
		_, err := client.CreateTopic(ctx, name, pgmsg.TopicConfig{Partitions: 2, SegmentRecords: 16})
		require.NoError(t, err)
	}
	publish := func(name string, n int) {
		recs := make([]*pgmsg.Record, n)
		for i := range recs {
			recs[i] = &pgmsg.Record{Topic: name, Partition: int32(i % 2), Value: []byte(fmt.Sprintf("%s-%d", name, i))}
		}
		require.NoError(t, client.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	}
	names := []string{"a", "b", "c", "d"}
	for i, name := range names {
		if i == 2 {
			_, err = pool.Exec(ctx, "ALTER TABLE "+s+".topic ALTER COLUMN topic_id RESTART WITH 199")
			require.NoError(t, err)
		}
		create(name)
		publish(name, 40)
		_, err = client.CreateGroup(ctx, name, "g", pgmsg.PositionEarliest)
		require.NoError(t, err)
		cl, err := client.Claim(ctx, name, "g", &pgmsg.ClaimOpts{MaxRecords: 5})
		require.NoError(t, err)
		require.Len(t, cl.Records, 5)
		require.NoError(t, client.Commit(ctx, cl))
	}
	tree := recordTree(t, pool, schema)
	for topic, block := range map[int]string{1: "record_b0", 2: "record_b0", 199: "record_b1", 200: "record_b2"} {
		require.Equal(t, block, tree[fmt.Sprintf("record_%d", topic)], "topic %d", topic)
		require.Equal(t, "record", tree[block])
	}
	n, _ := recordConstraints(t, pool, schema)
	require.Zero(t, n, "a unique index, no constraint row per segment")
	// The guard's trigger on the record table, put back by the function
	// files after each step.
	_, err = pool.Exec(ctx, "SELECT "+s+".min_insync_replicas_set(2)")
	require.NoError(t, err)
	before := recordState(t, pool, schema)
	require.Contains(t, before, "trigger insync_record")
	require.Greater(t, len(before), 160, "records, tables and defaults read")

	// Down to 029: 030 and the versions after it.
	st, err := m.Status(ctx)
	require.NoError(t, err)
	steps := 0
	for _, v := range st {
		if v.Version >= 30 {
			steps++
		}
	}
	_, err = m.Down(ctx, steps)
	require.NoError(t, err)
	tree = recordTree(t, pool, schema)
	for rel, parent := range tree {
		require.NotRegexp(t, `^record_b[0-9]+$`, rel, "no block left")
		if parent == "record" {
			require.Regexp(t, `^record_[0-9]+$`, rel, "the topics' tables are the record table's partitions")
		}
	}
	require.Equal(t, "record", tree["record_199"])
	n, pkey := recordConstraints(t, pool, schema)
	require.True(t, pkey, "029's primary key is back")
	require.Greater(t, n, 30, "one for each segment and topic table")
	down := recordState(t, pool, schema)
	require.Equal(t, before, append(down, "trigger insync_record"), "029's layout holds the same records, grants and defaults")

	_, err = m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, "record_b1", recordTree(t, pool, schema)["record_199"])
	n, _ = recordConstraints(t, pool, schema)
	require.Zero(t, n, "a unique index, no constraint row per segment")
	require.Equal(t, before, recordState(t, pool, schema))
	_, err = pool.Exec(ctx, "SELECT "+s+".min_insync_replicas_set(1)")
	require.NoError(t, err)

	// Readable, writable, and topics come and go.
	var segs, granted int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE has_table_privilege($1, format('%I.%I', $2::text, relname), 'SELECT')) FROM "+s+".segment",
		reader, schema).Scan(&segs, &granted))
	require.Equal(t, segs, granted, "every segment readable by the role granted the record table")
	for _, name := range names {
		cl, err := client.Claim(ctx, name, "g", &pgmsg.ClaimOpts{MaxRecords: 100, Partition: new(int32)})
		require.NoError(t, err)
		require.NotEmpty(t, cl.Records)
		require.Equal(t, fmt.Sprintf("%s-%d", name, 2*cl.Records[0].Offset), string(cl.Records[0].Value))
		require.NoError(t, client.Commit(ctx, cl))
		publish(name, 40)
		recs, err := client.Fetch(ctx, name, 1, 30, 10)
		require.NoError(t, err)
		require.Len(t, recs, 10)
		require.Equal(t, fmt.Sprintf("%s-%d", name, 2*30+1-40), string(recs[0].Value))
	}
	create("e")
	publish("e", 10)
	require.NoError(t, client.DeleteTopic(ctx, "a"))
	tree = recordTree(t, pool, schema)
	require.Equal(t, "record_b2", tree["record_201"])
	require.NotContains(t, tree, "record_1")
}

// Topics created at once, across the first topic of a new block: the
// creators that find the block missing create it once between them, and
// every topic lands in its block.
func TestRecordBlocksConcurrentCreate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := newPool(t)
	schema := fmt.Sprintf("pgmsg_blc_%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { dropAll(t, pool, schema) })
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema}.Sanitize()+".topic ALTER COLUMN topic_id RESTART WITH 95")
	require.NoError(t, err)
	client, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: schema})
	require.NoError(t, err)
	defer client.Close()
	errs := make(chan error, 12)
	for i := range 12 {
		go func() {
			_, err := client.CreateTopic(ctx, fmt.Sprintf("t%d", i), pgmsg.TopicConfig{Partitions: 2})
			errs <- err
		}()
	}
	for range 12 {
		require.NoError(t, <-errs)
	}
	tree := recordTree(t, pool, schema)
	for id := 95; id < 107; id++ {
		require.Equal(t, fmt.Sprintf("record_b%d", id/100), tree[fmt.Sprintf("record_%d", id)], "topic %d", id)
	}
	require.Equal(t, "record", tree["record_b0"])
	require.Equal(t, "record", tree["record_b1"])
}
