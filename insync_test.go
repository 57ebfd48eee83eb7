package pgmsg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// requireNotEnoughReplicas asserts that err is the guard's refusal.
func requireNotEnoughReplicas(t *testing.T, err error, what string) {
	t.Helper()
	require.ErrorIs(t, err, pgmsg.ErrNotEnoughReplicas, what)
	require.Equal(t, "PM124", pgmsg.ErrorCode(err), what)
	require.True(t, pgmsg.IsRetryable(err), what)
}

func insyncRecords(n int) []*pgmsg.Record {
	recs := make([]*pgmsg.Record, n)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: "t", Partition: 0, Value: fmt.Appendf(nil, "v%d", i)}
	}
	return recs
}

// With min_insync_replicas at 2 and no synchronous standby (the test
// server's synchronous_standby_names is empty, as on an old primary that
// pg_auto_failover put in wait_primary), every write a client is told is
// stored is refused with PM124 and nothing is stored; at 1 they pass.
func TestMinInsyncReplicasRefusesWritesWithoutStandby(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := tb.ctx
	sch := pgx.Identifier{tb.Schema}.Sanitize()
	tb.topic(t, "t", 1)

	// Before the guard: a record, a claim of it, a job held.
	require.NoError(t, tb.client.Publish(ctx, insyncRecords(1), &pgmsg.PublishOpts{ManualPartition: true}))
	cl, err := tb.client.Claim(ctx, "t", "g", nil)
	require.NoError(t, err)
	require.NotNil(t, cl)
	_, err = tb.client.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("a")}, nil)
	require.NoError(t, err)
	jobs, err := tb.client.ClaimJobs(ctx, "q", &pgmsg.ClaimJobsOpts{Max: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	_, err = tb.client.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("b")}, nil)
	require.NoError(t, err)

	n, err := tb.client.MinInsyncReplicas(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the default is no guard")
	require.ErrorIs(t, tb.client.SetMinInsyncReplicas(ctx, 3), pgmsg.ErrInvalidArgument)
	for _, bad := range []string{"0", "3", "NULL"} {
		_, err = tb.Pool.Exec(ctx, "SELECT "+sch+".min_insync_replicas_set("+bad+")")
		require.Equal(t, "PM004", pgmsg.ErrorCode(pgmsg.MapError(err)), bad)
	}
	require.NoError(t, tb.client.SetMinInsyncReplicas(ctx, 2))
	n, err = tb.client.MinInsyncReplicas(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	var triggers int
	require.NoError(t, tb.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_trigger
		WHERE tgname LIKE 'insync\_%' AND tgrelid IN (SELECT oid FROM pg_catalog.pg_class WHERE relnamespace = $1::regnamespace)`, sch).Scan(&triggers))
	require.Equal(t, 4, triggers)

	// Publishes: one record (INSERT), a batch that takes the COPY path,
	// the SQL API's publish(), PublishTx, PublishIdempotent.
	requireNotEnoughReplicas(t, tb.client.Publish(ctx, insyncRecords(1), &pgmsg.PublishOpts{ManualPartition: true}), "publish")
	requireNotEnoughReplicas(t, tb.client.Publish(ctx, insyncRecords(40), &pgmsg.PublishOpts{ManualPartition: true}), "COPY publish")
	_, err = tb.Pool.Exec(ctx, "SELECT * FROM "+sch+".publish('t', ARRAY['x'::bytea])")
	requireNotEnoughReplicas(t, pgmsg.MapError(err), "publish()")
	tx, err := tb.Pool.Begin(ctx)
	require.NoError(t, err)
	requireNotEnoughReplicas(t, tb.client.PublishTx(ctx, tx, insyncRecords(2), &pgmsg.PublishOpts{ManualPartition: true}), "PublishTx")
	require.NoError(t, tx.Rollback(ctx))
	_, err = tb.client.PublishIdempotent(ctx, "p1", 0, insyncRecords(1), &pgmsg.PublishOpts{ManualPartition: true})
	requireNotEnoughReplicas(t, err, "PublishIdempotent")
	// COPY into the record table itself, as the COPY path runs it: the
	// partitioned table's statement trigger fires for COPY too.
	var topicID int32
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT topic_id FROM "+sch+".topic WHERE name = 't'").Scan(&topicID))
	_, err = tb.Pool.CopyFrom(ctx, pgx.Identifier{tb.Schema, "record"}, []string{"topic_id", "partition", "offset", "timestamp", "value"},
		pgx.CopyFromRows([][]any{{topicID, int32(0), int64(10), time.Now(), []byte("x")}}))
	requireNotEnoughReplicas(t, pgmsg.MapError(err), "COPY into record")
	// A session that asks for a local commit is refused too.
	conn, err := tb.Pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SET synchronous_commit = local")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT * FROM "+sch+".publish('t', ARRAY['x'::bytea])")
	requireNotEnoughReplicas(t, pgmsg.MapError(err), "publish() with synchronous_commit local")
	_, err = conn.Exec(ctx, "RESET synchronous_commit")
	require.NoError(t, err)
	conn.Release()

	// Jobs: enqueue, completion, cancel; offset commit.
	_, err = tb.client.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("c")}, nil)
	requireNotEnoughReplicas(t, err, "enqueue")
	_, err = tb.client.EnqueueMany(ctx, "q", []pgmsg.EnqueueParams{{Payload: []byte("d")}, {Payload: []byte("e")}}, nil)
	requireNotEnoughReplicas(t, err, "enqueue many")
	requireNotEnoughReplicas(t, tb.client.Complete(ctx, jobs[0]), "complete")
	var waiting int64
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT id FROM "+sch+".job WHERE state = 'available'").Scan(&waiting))
	_, err = tb.client.CancelJob(ctx, waiting)
	requireNotEnoughReplicas(t, err, "cancel")
	requireNotEnoughReplicas(t, tb.client.Commit(ctx, cl), "commit")

	// Nothing was stored or changed.
	var records, jobRows, archived int
	var state string
	var next int64
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT count(*) FROM "+sch+".record").Scan(&records))
	require.Equal(t, 1, records)
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT count(*) FROM "+sch+".producer_state").Scan(&records))
	require.Zero(t, records)
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT count(*) FROM "+sch+".job").Scan(&jobRows))
	require.Equal(t, 2, jobRows)
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT count(*) FROM "+sch+".job_archive").Scan(&archived))
	require.Zero(t, archived)
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT state FROM "+sch+".job WHERE id = $1", jobs[0].ID).Scan(&state))
	require.Equal(t, "running", state)
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT next_offset FROM "+sch+".group_cursor WHERE group_name = 'g'").Scan(&next))
	require.Zero(t, next, "the commit moved no cursor")

	// The guard off: the same writes pass.
	require.NoError(t, tb.client.SetMinInsyncReplicas(ctx, 1))
	require.NoError(t, tb.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_trigger
		WHERE tgname LIKE 'insync\_%' AND tgrelid IN (SELECT oid FROM pg_catalog.pg_class WHERE relnamespace = $1::regnamespace)`, sch).Scan(&triggers))
	require.Zero(t, triggers)
	require.NoError(t, tb.client.Commit(ctx, cl))
	require.NoError(t, tb.client.Publish(ctx, insyncRecords(1), &pgmsg.PublishOpts{ManualPartition: true}))
	require.NoError(t, tb.client.Publish(ctx, insyncRecords(40), &pgmsg.PublishOpts{ManualPartition: true}))
	var copied bool
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT offset_seq IS NOT NULL FROM "+sch+".topic_partition WHERE partition = 0").Scan(&copied))
	require.True(t, copied, "the 40-record batch took the COPY path (its first COPY publish made the partition's offset sequence)")
	_, err = tb.client.PublishIdempotent(ctx, "p1", 0, insyncRecords(1), &pgmsg.PublishOpts{ManualPartition: true})
	require.NoError(t, err)
	_, err = tb.client.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("c")}, nil)
	require.NoError(t, err)
	require.NoError(t, tb.client.Complete(ctx, jobs[0]))
	ok, err := tb.client.CancelJob(ctx, waiting)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, tb.Pool.QueryRow(ctx, "SELECT count(*) FROM "+sch+".record").Scan(&records))
	require.Equal(t, 43, records)
}

// With a real synchronous standby the guarded writes pass; a session
// asking for a local commit is still refused, and once the primary stops
// naming a synchronous standby (what pg_auto_failover's wait_primary
// does: synchronous_standby_names = ” and a reload), writes are refused.
func TestMinInsyncReplicasWithSynchronousStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startReplicaPair(t, ctx)
	setStandbys := func(names string) {
		_, err := p.primaryPool.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+names+"'")
		require.NoError(t, err)
		_, err = p.primaryPool.Exec(ctx, "SELECT pg_reload_conf()")
		require.NoError(t, err)
		// A reload reaches each backend between its commands: wait until
		// every pooled connection says so.
		require.Eventually(t, func() bool {
			conns := make([]*pgxpool.Conn, 0, 4)
			defer func() {
				for _, c := range conns {
					c.Release()
				}
			}()
			for range p.primaryPool.Stat().TotalConns() {
				c, err := p.primaryPool.Acquire(ctx)
				if err != nil {
					return false
				}
				conns = append(conns, c)
				var v string
				if err := c.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&v); err != nil || v != names {
					return false
				}
			}
			return true
		}, time.Minute, 20*time.Millisecond)
	}
	setStandbys("*")
	require.Eventually(t, func() bool {
		var n int
		err := p.primaryPool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").Scan(&n)
		return err == nil && n == 1
	}, time.Minute, 20*time.Millisecond, "the standby did not become synchronous")

	_, err := p.client.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, p.client.SetMinInsyncReplicas(ctx, 2))
	require.NoError(t, p.client.Publish(ctx, insyncRecords(1), &pgmsg.PublishOpts{ManualPartition: true}))
	require.NoError(t, p.client.Publish(ctx, insyncRecords(40), &pgmsg.PublishOpts{ManualPartition: true}))
	_, err = p.client.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("a")}, nil)
	require.NoError(t, err)

	conn, err := p.primaryPool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SET synchronous_commit = local")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT * FROM pgmsg.publish('t', ARRAY['x'::bytea])")
	requireNotEnoughReplicas(t, pgmsg.MapError(err), "publish() with synchronous_commit local")
	_, err = conn.Exec(ctx, "SET synchronous_commit = remote_apply")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT * FROM pgmsg.publish('t', ARRAY['x'::bytea])")
	require.NoError(t, err)
	conn.Release()

	// The primary drops its synchronous standby, as in wait_primary.
	setStandbys("")
	requireNotEnoughReplicas(t, p.client.Publish(ctx, insyncRecords(1), &pgmsg.PublishOpts{ManualPartition: true}), "publish")
	_, err = p.client.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("b")}, nil)
	requireNotEnoughReplicas(t, err, "enqueue")
	var records int
	require.NoError(t, p.primaryPool.QueryRow(ctx, "SELECT count(*) FROM pgmsg.record").Scan(&records))
	require.Equal(t, 42, records)
}
