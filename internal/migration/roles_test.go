package migration_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// roleClient returns a client whose connections act as the schema's role
// (the roles pgmsg creates), and a pool for raw statements as that role.
func roleClient(t *testing.T, tb *testBundle, role string) (*pgmsg.Client, *pgxpool.Pool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(tb.URL)
	require.NoError(t, err)
	cfg.MaxConns = 8
	name := pgx.Identifier{tb.Schema + "_" + role}.Sanitize()
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SET ROLE "+name)
		return err
	}
	pool, err := pgxpool.NewWithConfig(tb.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var user string
	require.NoError(t, pool.QueryRow(tb.ctx, "SELECT current_user").Scan(&user))
	require.Equal(t, tb.Schema+"_"+role, user)
	c, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: tb.Schema, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c, pool
}

// denied asserts that sql fails for lack of privilege (42501).
func denied(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: want permission denied, got %v", sql, err)
	require.Equal(t, "42501", pgErr.Code, "%s: %v", sql, err)
}

func isDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// Each role pgmsg creates can do its job through the Go client, and
// nothing else: none but admin reads the token table, none writes a table
// outside its job.
func TestRolesLeastPrivilege(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := tb.ctx
	q := func(table string) string { return pgx.Identifier{tb.Schema, table}.Sanitize() }
	_, err := tb.client.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 2, SegmentRecords: 64})
	require.NoError(t, err)

	// admin: topics (DDL runs as the owner), tokens, maintenance.
	admin, adminPool := roleClient(t, tb, "admin")
	_, err = admin.CreateTopic(ctx, "t2", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, admin.DeleteTopic(ctx, "t2"))
	_, _, err = admin.CreateToken(ctx, "ops", []string{"admin"}, nil)
	require.NoError(t, err)
	_, err = admin.MaintainOnce(ctx, nil)
	require.NoError(t, err)
	denied(t, adminPool, "DELETE FROM "+q("pgmsg_migration"))

	// producer: publishes, across segments (created by the definer
	// functions); cannot read records, tokens or groups' progress.
	producer, producerPool := roleClient(t, tb, "producer")
	recs := make([]*pgmsg.Record, 300)
	for i := range recs {
		recs[i] = &pgmsg.Record{Topic: "t", Key: []byte(fmt.Sprint(i % 7)), Value: []byte(fmt.Sprint(i))}
	}
	for i := 0; i < len(recs); i += 30 {
		require.NoError(t, producer.Publish(ctx, recs[i:i+30], nil))
	}
	// Idempotently too (producer_state), a retry included.
	for range 2 {
		_, err = producer.PublishIdempotent(ctx, "role-p", 0, []*pgmsg.Record{{Topic: "t", Value: []byte("i")}}, nil)
		require.NoError(t, err)
	}
	_, err = producer.CreateTopic(ctx, "nope", pgmsg.TopicConfig{Partitions: 1})
	require.True(t, isDenied(err), "producer creates a topic: %v", err)
	_, err = producer.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("x")}, nil)
	require.True(t, isDenied(err), "producer enqueues: %v", err)
	denied(t, producerPool, "SELECT * FROM "+q("token"))
	denied(t, producerPool, "SELECT * FROM "+q("record"))
	denied(t, producerPool, "UPDATE "+q("group_cursor")+" SET next_offset = 0")
	denied(t, producerPool, "DELETE FROM "+q("job"))

	// consumer: a member of a group reads every record; cannot publish,
	// touch the queue or read tokens.
	consumer, consumerPool := roleClient(t, tb, "consumer")
	var got atomic.Int64
	cn, err := consumer.NewConsumer("t", "g", &pgmsg.ConsumerOpts{MemberID: "c1", HeartbeatInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- cn.Run(runCtx, func(_ context.Context, cl *pgmsg.Claim) error { got.Add(int64(len(cl.Records))); return nil })
	}()
	require.Eventually(t, func() bool { return got.Load() == int64(len(recs))+1 }, 30*time.Second, 20*time.Millisecond) // + the idempotent record
	stop()
	require.ErrorIs(t, <-ran, context.Canceled)
	cn.Close()
	err = consumer.Publish(ctx, []*pgmsg.Record{{Topic: "t", Value: []byte("x")}}, nil)
	require.True(t, isDenied(err), "consumer publishes: %v", err)
	denied(t, consumerPool, "SELECT * FROM "+q("token"))
	denied(t, consumerPool, "INSERT INTO "+q("record")+" (topic_id, partition, \"offset\", \"timestamp\") VALUES (1, 0, 999999, now())")
	denied(t, consumerPool, "UPDATE "+q("topic_partition")+" SET next_offset = 0")
	denied(t, consumerPool, "SELECT * FROM "+q("job"))

	// worker: enqueues (with and without unique keys) and works jobs;
	// cannot read the log or tokens.
	worker, workerPool := roleClient(t, tb, "worker")
	_, err = worker.EnqueueMany(ctx, "q", []pgmsg.EnqueueParams{{Payload: []byte("a")}, {Payload: []byte("b")}}, nil)
	require.NoError(t, err)
	_, err = worker.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("c"), UniqueKey: "k"}, nil)
	require.NoError(t, err)
	_, err = worker.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("d"), UniqueKey: "w", UniqueFor: time.Hour}, nil)
	require.NoError(t, err)
	// Periodic jobs: the admin defines them, a worker (leading
	// maintenance) enqueues their ticks.
	_, err = worker.AddPeriodicJob(ctx, pgmsg.PeriodicJob{Queue: "q", Name: "p", Schedule: "@hourly"})
	require.True(t, isDenied(err), "worker defines a periodic job: %v", err)
	_, err = tb.client.AddPeriodicJob(ctx, pgmsg.PeriodicJob{Queue: "q", Name: "p", Schedule: "@hourly", Payload: []byte("e"), RunOnStart: true})
	require.NoError(t, err)
	ticks, err := worker.EnqueueDuePeriodicJobs(ctx)
	require.NoError(t, err)
	require.Len(t, ticks, 1)
	require.Empty(t, ticks[0].Error)
	var done atomic.Int32
	w, err := worker.NewWorker("q", func(context.Context, *pgmsg.Job) error { done.Add(1); return nil },
		&pgmsg.WorkerOpts{PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	require.Eventually(t, func() bool { return done.Load() == 5 }, 30*time.Second, 20*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-wdone, context.Canceled, "Run returns its context's error")
	denied(t, workerPool, "SELECT * FROM "+q("token"))
	denied(t, workerPool, "SELECT * FROM "+q("record"))
	denied(t, workerPool, "UPDATE "+q("group_cursor")+" SET next_offset = 0")
	_, _, err = worker.CreateToken(ctx, "x", []string{"admin"}, nil)
	require.Error(t, err, "worker creates a token")
}
