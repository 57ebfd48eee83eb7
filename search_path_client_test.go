package pgmsg_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// hijackPlants are overloads a login with CREATE on a schema of the
// victims' search_path (public, on PostgreSQL 14 and older) can plant to
// beat pg_catalog's polymorphic or differently typed functions for the
// arguments pgmsg's own statements pass. Each
// records that it ran, then does what the built-in does.
var hijackPlants = []string{
	"cardinality(a bytea[]) RETURNS integer AS $$ INSERT INTO %[1]s.hits VALUES ('cardinality(bytea[])'); SELECT pg_catalog.cardinality(a) $$",
	"unnest(a bytea[]) RETURNS SETOF bytea AS $$ INSERT INTO %[1]s.hits VALUES ('unnest(bytea[])'); SELECT pg_catalog.unnest(a) $$",
	"unnest(a text[]) RETURNS SETOF text AS $$ INSERT INTO %[1]s.hits VALUES ('unnest(text[])'); SELECT pg_catalog.unnest(a) $$",
	"unnest(a integer[]) RETURNS SETOF integer AS $$ INSERT INTO %[1]s.hits VALUES ('unnest(integer[])'); SELECT pg_catalog.unnest(a) $$",
	"unnest(a bigint[]) RETURNS SETOF bigint AS $$ INSERT INTO %[1]s.hits VALUES ('unnest(bigint[])'); SELECT pg_catalog.unnest(a) $$",
	"unnest(a jsonb[]) RETURNS SETOF jsonb AS $$ INSERT INTO %[1]s.hits VALUES ('unnest(jsonb[])'); SELECT pg_catalog.unnest(a) $$",
	"unnest(a timestamptz[]) RETURNS SETOF timestamptz AS $$ INSERT INTO %[1]s.hits VALUES ('unnest(timestamptz[])'); SELECT pg_catalog.unnest(a) $$",
	"unnest(a interval[]) RETURNS SETOF interval AS $$ INSERT INTO %[1]s.hits VALUES ('unnest(interval[])'); SELECT pg_catalog.unnest(a) $$",
	"array_replace(a text[], b text, c text) RETURNS text[] AS $$ INSERT INTO %[1]s.hits VALUES ('array_replace(text[])'); SELECT pg_catalog.array_replace(a, b, c) $$",
	"array_replace(a integer[], b integer, c integer) RETURNS integer[] AS $$ INSERT INTO %[1]s.hits VALUES ('array_replace(integer[])'); SELECT pg_catalog.array_replace(a, b, c) $$",
	// A string literal prefers text to regclass: nextval('seq') finds this.
	"nextval(a text) RETURNS bigint AS $$ INSERT INTO %[1]s.hits VALUES ('nextval(text)'); SELECT pg_catalog.nextval(a::regclass) $$",
}

// No statement the Go client sends, as any of the roles or as the owner,
// runs a function planted on its search_path: publishing (direct, COPY,
// idempotent, pipelined), the wake-ups after commit, claiming and
// committing records, enqueueing, claiming and completing jobs
// (TestSearchPathHijack covers the SQL functions).
func TestClientStatementsIgnorePlantedOverloads(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := tb.ctx
	evil := tb.Schema + "_evil"
	ev := pgx.Identifier{evil}.Sanitize()
	attacker := pgx.Identifier{tb.Schema + "_attacker"}.Sanitize()
	// The attacker: a login with no pgmsg role, owning a schema on the
	// victims' search_path.
	_, err := tb.Pool.Exec(ctx, fmt.Sprintf(`CREATE ROLE %[2]s NOLOGIN; CREATE SCHEMA %[1]s AUTHORIZATION %[2]s;
		GRANT USAGE ON SCHEMA %[1]s TO PUBLIC`, ev, attacker))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = tb.Pool.Exec(context.Background(), fmt.Sprintf("DROP SCHEMA IF EXISTS %s CASCADE; DROP ROLE IF EXISTS %s", ev, attacker))
	})
	plant, err := tb.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = plant.Exec(ctx, "SET LOCAL ROLE "+attacker)
	require.NoError(t, err)
	_, err = plant.Exec(ctx, fmt.Sprintf("CREATE TABLE %[1]s.hits (f text); GRANT INSERT ON %[1]s.hits TO PUBLIC", ev))
	require.NoError(t, err)
	for _, p := range hijackPlants {
		_, err = plant.Exec(ctx, fmt.Sprintf("CREATE FUNCTION %[1]s."+p+" LANGUAGE sql", ev))
		require.NoError(t, err, p)
	}
	require.NoError(t, plant.Commit(ctx))

	// Clients whose sessions have the attacker's schema first, as the
	// owner and as each role.
	client := func(role string) (*pgmsg.Client, *pgxpool.Pool) {
		cfg, err := pgxpool.ParseConfig(tb.URL)
		require.NoError(t, err)
		cfg.MaxConns = 6
		cfg.ConnConfig.RuntimeParams["search_path"] = evil + ", " + tb.Schema + ", public"
		if role != "" {
			name := pgx.Identifier{tb.Schema + "_" + role}.Sanitize()
			cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
				_, err := conn.Exec(ctx, "SET ROLE "+name)
				return err
			}
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		c, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: tb.Schema, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c, pool
	}
	owner, ownerPool := client("")
	hits := func() []string {
		rows, err := tb.Pool.Query(ctx, "SELECT f FROM "+ev+".hits ORDER BY f")
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	// The plants are reachable from these sessions.
	_, err = ownerPool.Exec(ctx, "SELECT cardinality(ARRAY['x'::bytea]), (SELECT count(*) FROM unnest(ARRAY['x'::bytea]))")
	require.NoError(t, err)
	require.Equal(t, []string{"cardinality(bytea[])", "unnest(bytea[])"}, hits())
	_, err = tb.Pool.Exec(ctx, "TRUNCATE "+ev+".hits")
	require.NoError(t, err)

	_, err = owner.CreateTopic(ctx, "t", pgmsg.TopicConfig{Partitions: 2, SegmentRecords: 64})
	require.NoError(t, err)
	_, err = owner.CreateQueue(ctx, "q", pgmsg.QueueConfig{})
	require.NoError(t, err)
	batch := func(n int) []*pgmsg.Record {
		recs := make([]*pgmsg.Record, n)
		for i := range recs {
			recs[i] = &pgmsg.Record{Topic: "t", Key: []byte(fmt.Sprint(i)), Value: []byte("v"),
				Headers: map[string][]byte{"h": []byte("x")}}
		}
		return recs
	}
	producer, _ := client("producer")
	consumer, _ := client("consumer")
	worker, _ := client("worker")
	published := 0
	for _, c := range []*pgmsg.Client{owner, producer} {
		require.NoError(t, c.Publish(ctx, batch(3), nil))   // direct, both partitions
		require.NoError(t, c.Publish(ctx, batch(40), nil))  // COPY (the owner) or direct
		require.NoError(t, c.Publish(ctx, batch(300), nil)) // past the segments: publish()
		_, err = c.PublishIdempotent(ctx, "p-"+fmt.Sprint(published), 0, batch(2), nil)
		require.NoError(t, err)
		tx, err := c.Pool().Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, c.PublishTx(ctx, tx, batch(5), nil))
		require.NoError(t, tx.Commit(ctx))
		published += 3 + 40 + 300 + 2 + 5
	}
	// Consumers: one group alone, two gathered in one process.
	var got atomic.Int64
	handler := func(_ context.Context, cl *pgmsg.Claim) error { got.Add(int64(len(cl.Records))); return nil }
	var members []*member
	for _, g := range []string{"g1", "g2", "g3"} {
		members = append(members, startMember(t, consumer, "t", g, pgmsg.ConsumerOpts{MemberID: "m-" + g}, handler))
	}
	require.Eventually(t, func() bool { return got.Load() == int64(3*published) }, 60*time.Second, 20*time.Millisecond)
	for _, m := range members {
		m.stop(t)
	}

	// Jobs: enqueue (direct, many, unique), claim, complete.
	for _, c := range []*pgmsg.Client{owner, worker} {
		_, err = c.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("a")}, nil)
		require.NoError(t, err)
		_, err = c.EnqueueMany(ctx, "q", []pgmsg.EnqueueParams{{Payload: []byte("b"), Kind: "k"}, {Payload: []byte("c"), Delay: time.Millisecond, MaxAttempts: 3}}, nil)
		require.NoError(t, err)
		_, err = c.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("d"), UniqueKey: "u" + fmt.Sprint(c == worker)}, nil)
		require.NoError(t, err)
	}
	var done atomic.Int32
	w, err := worker.NewWorker("q", func(context.Context, *pgmsg.Job) error { done.Add(1); return nil },
		&pgmsg.WorkerOpts{PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	require.Eventually(t, func() bool { return done.Load() == 8 }, 60*time.Second, 20*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-wdone, context.Canceled)

	require.Empty(t, hits(), "planted functions that pgmsg's statements ran")
}
