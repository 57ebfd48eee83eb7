package migration_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// Forgeries of what owner-run code trusts (maintenance_event among them): logged in
// as each documented role, none writes what owner-run code trusts, nor
// anything outside its job.
func TestRolesCannotWriteWhatOwnerTrusts(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := tb.ctx
	s := pgx.Identifier{tb.Schema}.Sanitize()
	q := func(table string) string { return pgx.Identifier{tb.Schema, table}.Sanitize() }
	_, err := tb.client.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 1, SegmentRecords: 64})
	require.NoError(t, err)
	// The owner publishes with COPY: partition 0 gets its offset sequence.
	recs := make([]*pgmsg.Record, 40)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: "t", Value: []byte("v")}
	}
	require.NoError(t, tb.client.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	var seq string
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT offset_seq::regclass::text FROM "+q("topic_partition")).Scan(&seq))
	_, err = tb.client.CreateQueue(ctx, "q", pgmsg.QueueConfig{})
	require.NoError(t, err)
	_, err = tb.client.AddPeriodicJob(ctx, pgmsg.PeriodicJob{Queue: "q", Name: "p", Schedule: "@hourly", Payload: []byte("e")})
	require.NoError(t, err)

	_, producer := roleClient(t, tb, "producer")
	_, consumer := roleClient(t, tb, "consumer")
	_, worker := roleClient(t, tb, "worker")
	_, admin := roleClient(t, tb, "admin")

	// Finding 3: the producer appends through pgmsg's rules only.
	denied(t, producer, "UPDATE "+q("topic_partition")+" SET next_offset = 1000000000000")
	denied(t, producer, "UPDATE "+q("topic_partition")+" SET next_offset = 0")
	denied(t, producer, "UPDATE "+q("topic_partition")+" SET offset_seq = 0")
	denied(t, producer, "INSERT INTO "+q("record")+` (topic_id, partition, "offset", "timestamp") VALUES (1, 0, 50, now())`)
	denied(t, producer, "SELECT "+s+"._segment_ensure(1, 0, 192, 64, 0)")
	denied(t, producer, "SELECT "+s+"._segment_create(1, 0, 192, 256)")
	denied(t, producer, "SELECT "+s+"._offset_seq_create(1, 0)")
	denied(t, producer, "SELECT pg_catalog.setval('"+seq+"', 5)")
	denied(t, producer, "SELECT pg_catalog.nextval('"+seq+"')")
	denied(t, producer, "INSERT INTO "+q("producer_state")+" (producer_id, topic_id, partition, last_sequence, base_offset, record_count) VALUES ('x', 1, 0, 0, 0, 1)")
	// Nor past the checks of the functions it may call: _publish_direct()
	// stores nothing that publish() would refuse (more keys than values
	// would have been stored past the offsets reserved).
	for _, call := range []string{
		"_publish_direct('t', 0, ARRAY['v']::bytea[], ARRAY['k1', 'k2', 'k3']::bytea[], NULL, NULL)",
		"_publish_direct('t', 0, ARRAY['v']::bytea[], NULL, ARRAY['{}', '{}']::jsonb[], NULL)",
		"_publish_direct('t', 0, ARRAY['v']::bytea[], NULL, NULL, ARRAY[now(), now()])",
		"_publish_direct('t', 0, ARRAY['v']::bytea[], NULL, NULL, ARRAY['10000-01-01 00:00:00+00'::timestamptz])",
		"_publish_direct('t', 0, ARRAY[]::bytea[], NULL, NULL, NULL)",
		"_publish_direct('t', 7, ARRAY['v']::bytea[], NULL, NULL, NULL)",
	} {
		var n int
		require.NoError(t, producer.QueryRow(ctx, "SELECT count(*) FROM "+s+"."+call).Scan(&n), call)
		require.Zero(t, n, call)
	}
	var stored int64
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT count(*) FROM "+q("record")).Scan(&stored))
	require.Equal(t, int64(40), stored, "records stored")

	// Finding 5 (and the same for the log's other tables): the admin
	// writes none of the log's tables, which owner-run code reads.
	denied(t, admin, "UPDATE "+q("segment")+" SET relname = 'pgmsg_migration'")
	denied(t, admin, "UPDATE "+q("topic_partition")+" SET next_offset = 1000000000000")
	denied(t, admin, "UPDATE "+q("topic_partition")+" SET offset_seq = 0")
	denied(t, admin, "INSERT INTO "+q("record")+` (topic_id, partition, "offset", "timestamp") VALUES (1, 0, 50, now())`)
	denied(t, admin, "UPDATE "+q("topic")+" SET segment_records = 1")
	denied(t, admin, "SELECT "+s+"._segment_ensure(1, 0, 192, 64, 0)")
	// Finding 4: the worker may not redefine periodic jobs.
	denied(t, worker, "UPDATE "+q("periodic_job")+" SET payload = 'evil', kind = 'evil', schedule = '* * * * *'")
	denied(t, worker, "INSERT INTO "+q("periodic_job")+" (queue_id, name, schedule, payload) SELECT queue_id, 'x', '@hourly', 'x' FROM "+q("queue"))
	// Only owner-run code writes maintenance events.
	ev := "INSERT INTO " + q("maintenance_event") + " (kind, detail) VALUES ('retention_drop', '{}')"
	denied(t, producer, ev)
	denied(t, consumer, ev)
	denied(t, worker, ev)
	denied(t, admin, ev)

	// What they may do still works: the producer publishes (through the
	// definer functions), the worker enqueues the due tick.
	pc, _ := roleClient(t, tb, "producer")
	require.NoError(t, pc.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	var next int64
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT next_offset FROM "+q("topic_partition")).Scan(&next))
	require.Equal(t, int64(80), next)
}

// Finding 3 (c): _roles_grant grants nothing on a sequence named by a
// column (topic_partition.offset_seq, forged here by the owner).
func TestRolesGrantNoNamedSequence(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := tb.ctx
	s := pgx.Identifier{tb.Schema}.Sanitize()
	q := func(table string) string { return pgx.Identifier{tb.Schema, table}.Sanitize() }
	victimSeq := pgx.Identifier{tb.Schema + "_victim_seq"}.Sanitize()
	_, err := tb.Pool.Exec(ctx, "CREATE SEQUENCE "+s+"."+victimSeq)
	require.NoError(t, err)
	_, err = tb.client.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 1, SegmentRecords: 64})
	require.NoError(t, err)
	_, err = tb.Pool.Exec(ctx, "UPDATE "+q("topic_partition")+" SET offset_seq = $1::regclass::oid", tb.Schema+"."+tb.Schema+"_victim_seq")
	require.NoError(t, err)
	_, err = tb.Pool.Exec(ctx, "SELECT "+s+"._roles_grant()")
	require.NoError(t, err)
	var ok bool
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT pg_catalog.has_sequence_privilege($1, $2, 'UPDATE')",
		tb.Schema+"_producer", tb.Schema+"."+tb.Schema+"_victim_seq").Scan(&ok))
	require.False(t, ok, "the producer was granted the sequence topic_partition names")
}

// Finding 5: retention drops the table named from the segment's numbers,
// never the one a segment row names, even when the row was forged (here
// by the owner, since no role may write it any more).
func TestRetentionDropsOnlySegmentTables(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := tb.ctx
	s := pgx.Identifier{tb.Schema}.Sanitize()
	q := func(table string) string { return pgx.Identifier{tb.Schema, table}.Sanitize() }
	_, err := tb.Pool.Exec(ctx, "CREATE TABLE "+s+".victim (x int)")
	require.NoError(t, err)
	_, err = tb.client.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 1, SegmentRecords: 64,
		Settings: map[string]any{"hard_limit_records": 64}})
	require.NoError(t, err)

	recs := make([]*pgmsg.Record, 150)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: "t", Value: []byte("v")}
	}
	require.NoError(t, tb.client.Publish(ctx, recs, &pgmsg.PublishOpts{ManualPartition: true}))
	_, err = tb.Pool.Exec(ctx, "UPDATE "+q("segment")+" SET relname = 'victim' WHERE start_offset = 0")
	require.NoError(t, err)
	_, err = tb.Pool.Exec(ctx, "UPDATE "+q("segment")+" SET relname = 'pgmsg_migration' WHERE start_offset = 64")
	require.NoError(t, err)
	_, err = tb.client.MaintainOnce(ctx, nil)
	require.NoError(t, err)
	for _, rel := range []string{"victim", "pgmsg_migration"} {
		var exists bool
		require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", tb.Schema+"."+rel).Scan(&exists))
		require.True(t, exists, "retention dropped %s", rel)
	}
	// The segments themselves went, by their own names.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_class WHERE relnamespace = $1::regnamespace AND relname LIKE 'record\\_%\\_p0\\_0'", s).Scan(&n))
		return n == 0
	}, 10*time.Second, 50*time.Millisecond, "segment 0 dropped")
}
