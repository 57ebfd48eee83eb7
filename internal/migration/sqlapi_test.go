package migration_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// Whole cycles through the SQL API alone, as an application in another
// language makes them: publish, claim, commit; enqueue, claim, complete.

// sqlAPI renders a statement for the test's schema: {s} is the schema.
func (tb *testBundle) sqlAPI(q string) string {
	return strings.ReplaceAll(q, "{s}", pgx.Identifier{tb.Schema}.Sanitize())
}

// storedRecords is how many records the topic's partitions hold.
func storedRecords(t *testing.T, tb *testBundle, topic string) int64 {
	t.Helper()
	info, err := tb.client.DescribeTopic(tb.ctx, topic)
	require.NoError(t, err)
	var n int64
	for _, p := range info.PartitionInfo {
		n += p.NextOffset
	}
	return n
}

// The whole cycle in plain SQL on a separate connection, without the Go
// library: create a topic, publish, claim (records returned in the same
// round trip), commit, and see the lag drop to zero.
func TestPlainSQLCycle(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	conn, err := pgx.Connect(tb.ctx, tb.URL)
	require.NoError(t, err)
	defer conn.Close(tb.ctx)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	q := func(sql string) string { return fmt.Sprintf(sql, s) }
	_, err = conn.Exec(tb.ctx, q(`SELECT %s.topic_create('plain', 2)`), pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	var part int32
	var base int64
	require.NoError(t, conn.QueryRow(tb.ctx, q(`SELECT partition, base_offset FROM %s.publish('plain', ARRAY['one','two','three']::bytea[], p_partition => 1)`),
		pgx.QueryExecModeSimpleProtocol).Scan(&part, &base))
	require.Equal(t, int32(1), part)
	require.Equal(t, int64(0), base)

	rows, err := conn.Query(tb.ctx, q(`SELECT partition, claim_epoch, "offset", convert_from(value, 'UTF8') FROM %s.claim('plain', 'sqlgroup', 10)`),
		pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	var epoch int64
	var values []string
	for rows.Next() {
		var off int64
		var v string
		require.NoError(t, rows.Scan(&part, &epoch, &off, &v))
		values = append(values, v)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"one", "two", "three"}, values)
	var next int64
	require.NoError(t, conn.QueryRow(tb.ctx, fmt.Sprintf(q(`SELECT %s.commit('plain', 'sqlgroup', %%d, %%d)`), part, epoch),
		pgx.QueryExecModeSimpleProtocol).Scan(&next))
	require.Equal(t, int64(3), next)
	var lag int64
	require.NoError(t, conn.QueryRow(tb.ctx, q(`SELECT sum(lag) FROM %s.group_list('plain', 'sqlgroup')`), pgx.QueryExecModeSimpleProtocol).Scan(&lag))
	require.Zero(t, lag)
}

// claim_range from plain SQL: the claim names the segment that holds it, a
// commit can ride on the next claim (one row version when it is the same
// partition), and a riding commit of a claim no longer held rolls the whole
// call back with PM009.
func TestClaimRangeSQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	q := func(sql string) string { return fmt.Sprintf(sql, s) }
	_, err := tb.Pool.Exec(tb.ctx, q(`SELECT %s.topic_create('cr', 1)`))
	require.NoError(t, err)
	_, err = tb.Pool.Exec(tb.ctx, q(`SELECT %s.publish('cr', ARRAY['a','b','c','d','e']::bytea[], p_partition => 0)`))
	require.NoError(t, err)

	type claimRow struct {
		part        int32
		epoch       int64
		first, last int64
		topicID     int32
		rel         *string
	}
	claim := func(max int, commitEpoch *int64) (*claimRow, error) {
		var r claimRow
		err := tb.Pool.QueryRow(tb.ctx, q(`SELECT partition, claim_epoch, first_offset, last_offset, topic_id, relname
			FROM %s.claim_range('cr', 'g', $1, p_commit_partition => 0, p_commit_epoch => $2)`), max, commitEpoch).
			Scan(&r.part, &r.epoch, &r.first, &r.last, &r.topicID, &r.rel)
		if err == pgx.ErrNoRows {
			return nil, nil
		}
		return &r, err
	}
	c1, err := claim(2, nil)
	require.NoError(t, err)
	require.Equal(t, int64(0), c1.first)
	require.Equal(t, int64(1), c1.last)
	require.NotNil(t, c1.rel)
	var values []string
	rows, err := tb.Pool.Query(tb.ctx, fmt.Sprintf(`SELECT convert_from(value, 'UTF8') FROM %s.%s
		WHERE topic_id = $1 AND partition = $2 AND "offset" BETWEEN $3 AND $4 ORDER BY "offset"`, s, pgx.Identifier{*c1.rel}.Sanitize()),
		c1.topicID, c1.part, c1.first, c1.last)
	require.NoError(t, err)
	values, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, values)

	// Commit c1 and claim the next two in one call.
	c2, err := claim(2, &c1.epoch)
	require.NoError(t, err)
	require.Equal(t, int64(2), c2.first)
	require.Equal(t, int64(3), c2.last)
	require.NotEqual(t, c1.epoch, c2.epoch)

	// c1 is committed: riding it again fails with PM009 and claims nothing.
	_, err = claim(2, &c1.epoch)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "PM009", pgErr.Code)
	// The live claim's epoch is its fencing token: never in an error.
	require.NotContains(t, pgErr.Message, fmt.Sprint(c2.epoch))
	err = tb.client.Commit(tb.ctx, &pgmsg.Claim{Topic: "cr", Group: "g", Partition: 0, Epoch: c1.epoch})
	require.ErrorIs(t, err, pgmsg.ErrClaimNotHeld)
	require.NotContains(t, err.Error(), fmt.Sprint(c2.epoch))
	gs, err := tb.client.ListGroups(tb.ctx, "cr", "g")
	require.NoError(t, err)
	require.Equal(t, int64(2), gs[0].NextOffset)
	require.Equal(t, c2.epoch, gs[0].ClaimEpoch)

	// Commit c2 with the last record left: the claim goes on from 4.
	c3, err := claim(10, &c2.epoch)
	require.NoError(t, err)
	require.Equal(t, int64(4), c3.first)
	require.Equal(t, int64(4), c3.last)
	// Commit c3 with nothing left to read: committed, no claim.
	c4, err := claim(10, &c3.epoch)
	require.NoError(t, err)
	require.Nil(t, c4)
	gs, err = tb.client.ListGroups(tb.ctx, "cr", "g")
	require.NoError(t, err)
	require.Equal(t, int64(5), gs[0].NextOffset)
	require.Zero(t, gs[0].Lag)
	require.Empty(t, gs[0].ClaimOwner)
}

// Through the SQL API: a call of which only some partitions' batches are
// stored is refused whole; publish_idempotent numbers records by partition
// and keeps every partition's last batch; expired producer states are
// forgotten.
func TestPublishIdempotentSQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "idem-sql", 2)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	// Two keys that land on partitions 0 and 1.
	var k0, k1 []byte
	for i := 0; k0 == nil || k1 == nil; i++ {
		k := fmt.Appendf(nil, "key-%d", i)
		if pgmsg.PartitionForKey(k, 2) == 0 && k0 == nil {
			k0 = k
		} else if pgmsg.PartitionForKey(k, 2) == 1 && k1 == nil {
			k1 = k
		}
	}
	publish := func(seq int64, keys ...[]byte) ([][]any, error) {
		vals := make([][]byte, len(keys))
		for i := range vals {
			vals[i] = []byte("v")
		}
		rows, err := tb.Pool.Query(tb.ctx, `SELECT partition, base_offset, record_count, duplicate
			FROM `+s+`.publish_idempotent('idem-sql', 'sqlp', $1, $2, $3)`, seq, vals, keys)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	}
	got, err := publish(0, k0, k0) // partition 0: sequences 0..1
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, false, got[0][3])

	// The same first two records plus one for partition 1: partition 0's
	// batch (0..1) is stored, partition 1's (2) is not: refused whole.
	_, err = publish(0, k0, k0, k1)
	requireState(t, err, "PM015")
	require.Equal(t, int64(2), storedRecords(t, tb, "idem-sql"))

	got, err = publish(2, k1, k0) // partition 0: 2; partition 1: 3
	require.NoError(t, err)
	require.Len(t, got, 2)
	got, err = publish(2, k1, k0) // the retry: both duplicates
	require.NoError(t, err)
	require.Len(t, got, 2)
	for _, r := range got {
		require.Equal(t, true, r[3])
	}
	require.Equal(t, int64(4), storedRecords(t, tb, "idem-sql"))

	// A partition out of range is publish()'s PM005, nothing written.
	_, err = tb.Pool.Exec(tb.ctx, `SELECT * FROM `+s+`.publish_idempotent('idem-sql', 'sqlp', 100, '{v}', p_partition => 5)`)
	requireState(t, err, "PM005")
	require.Equal(t, int64(4), storedRecords(t, tb, "idem-sql"))

	var n int64
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT `+s+`.producer_state_expire(interval '1 hour')`).Scan(&n))
	require.Zero(t, n, "nothing idle for an hour")
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT `+s+`.producer_state_expire(interval '0')`).Scan(&n))
	require.Equal(t, int64(2), n, "one state per partition")
	got, err = publish(2, k1, k0) // forgotten: stored again
	require.NoError(t, err)
	require.Equal(t, false, got[0][3])
	require.Equal(t, int64(6), storedRecords(t, tb, "idem-sql"))
}

// TestQueueSQLAPI drives a job's whole life with SQL only, as psql would.
func TestQueueSQLAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := b.ctx
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := b.Pool.Exec(ctx, b.sqlAPI(sql), args...)
		require.NoError(t, err, sql)
	}
	exec(`SELECT * FROM {s}.queue_create('emails', p_max_attempts => 2, p_retry_backoff => '10 milliseconds')`)
	var id int64
	var dup bool
	require.NoError(t, b.Pool.QueryRow(ctx, b.sqlAPI(
		`SELECT id, duplicate FROM {s}.enqueue('emails', '{"to":"ada@example.com"}', p_kind => 'welcome')`)).Scan(&id, &dup))
	require.False(t, dup)

	var cid, token int64
	var payload []byte
	var attempt int
	require.NoError(t, b.Pool.QueryRow(ctx, b.sqlAPI(
		`SELECT id, lease_token, payload, attempt FROM {s}.job_claim('emails', 10, '1 minute', 'psql')`)).Scan(&cid, &token, &payload, &attempt))
	require.Equal(t, id, cid)
	require.JSONEq(t, `{"to":"ada@example.com"}`, string(payload))
	require.Equal(t, 1, attempt)

	var state string
	require.NoError(t, b.Pool.QueryRow(ctx, b.sqlAPI(`SELECT state FROM {s}.job_fail($1, $2, 'smtp down')`), id, token).Scan(&state))
	require.Equal(t, "retrying", state)
	_, err := b.Pool.Exec(ctx, b.sqlAPI(`SELECT {s}.job_complete($1, $2)`), id, token)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr))
	require.Equal(t, "PM106", pgErr.Code)

	deadline := time.Now().Add(5 * time.Second)
	for {
		err := b.Pool.QueryRow(ctx, b.sqlAPI(`SELECT id, lease_token, attempt FROM {s}.job_claim('emails')`)).Scan(&cid, &token, &attempt)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
		require.True(t, time.Now().Before(deadline))
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, 2, attempt)
	exec(`SELECT {s}.job_extend($1, $2, '5 minutes')`, id, token)
	exec(`SELECT {s}.job_complete($1, $2)`, id, token)
	require.NoError(t, b.Pool.QueryRow(ctx, b.sqlAPI(`SELECT state FROM {s}.job_get($1)`), id).Scan(&state))
	require.Equal(t, "completed", state)
	var archived int64
	require.NoError(t, b.Pool.QueryRow(ctx, b.sqlAPI(`SELECT archived FROM {s}.queue_stats('emails')`)).Scan(&archived))
	require.Equal(t, int64(1), archived)
}

// The SQL API: job_claim's trailing p_max_bytes, NULL for no cap; a cap
// below 1 is PM004.
func TestJobClaimMaxBytesSQL(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.queue(t, "q", pgmsg.QueueConfig{})
	_, err := b.Pool.Exec(b.ctx, b.sqlAPI(`SELECT {s}.enqueue_many('q', array_fill(repeat('x', 100)::bytea, ARRAY[4]))`))
	require.NoError(t, err)
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, b.sqlAPI(
		`SELECT count(*) FROM {s}.job_claim('q', 10, NULL, 'psql', 250)`)).Scan(&n))
	require.Equal(t, 2, n)
	require.NoError(t, b.Pool.QueryRow(b.ctx, b.sqlAPI(
		`SELECT count(*) FROM {s}.job_claim('q', 10, p_max_bytes => NULL)`)).Scan(&n))
	require.Equal(t, 2, n)
	_, err = b.Pool.Exec(b.ctx, b.sqlAPI(`SELECT * FROM {s}.job_claim('q', 1, NULL, NULL, 0)`))
	require.ErrorContains(t, err, "max_bytes must be at least 1")
}

// jobKeyCols are the columns of job_get and job_list that say what a job
// belongs to, as plain SQL reads them (NULL: none).
type jobKeyCols struct {
	SequenceKey, LimitKey *string
	BatchID, WorkflowID   *int64
	DependsOn             []int64
	DepsWaiting           *int32
}

// job_get and job_list return a job's sequence key, limit key and batch
// (migration 028), job_list with exactly job_get's columns, live and
// archived: the archive keeps the sequence key and the batch, not the
// limit key.
func TestJobColumnsSQL(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := b.ctx
	_, err := b.Pool.Exec(ctx, b.sqlAPI(`SELECT * FROM {s}.queue_create('kq', p_key_limit => 1)`))
	require.NoError(t, err)
	var plain int64
	require.NoError(t, b.Pool.QueryRow(ctx, b.sqlAPI(`SELECT id FROM {s}.enqueue('kq', 'x')`)).Scan(&plain))
	// j0 in sequence s1, j1 of limit key acme, j2 named root, j3 waiting for it.
	var batch int64
	var ids []int64
	rows, err := b.Pool.Query(ctx, b.sqlAPI(`SELECT batch_id, id FROM {s}.job_enqueue_batch('kq', ARRAY['a', 'b', 'c', 'd']::bytea[],
		p_sequence_keys => ARRAY['s1', NULL, NULL, NULL], p_limit_keys => ARRAY[NULL, 'acme', NULL, NULL],
		p_names => ARRAY[NULL, NULL, 'root', NULL], p_depends_on => ARRAY[NULL, NULL, NULL, '["root"]']::jsonb[])`))
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&batch, &id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, 4)

	cols := `sequence_key, limit_key, batch_id, workflow_id, depends_on, deps_waiting`
	get := func(id int64) jobKeyCols {
		t.Helper()
		var c jobKeyCols
		require.NoError(t, b.Pool.QueryRow(ctx, b.sqlAPI(`SELECT `+cols+` FROM {s}.job_get($1)`), id).Scan(
			&c.SequenceKey, &c.LimitKey, &c.BatchID, &c.WorkflowID, &c.DependsOn, &c.DepsWaiting))
		return c
	}
	list := func(order string) map[int64]jobKeyCols {
		t.Helper()
		rows, err := b.Pool.Query(ctx, b.sqlAPI(`SELECT id, `+cols+` FROM {s}.job_list('kq', p_order => $1)`), order)
		require.NoError(t, err)
		defer rows.Close()
		out := map[int64]jobKeyCols{}
		for rows.Next() {
			var id int64
			var c jobKeyCols
			require.NoError(t, rows.Scan(&id, &c.SequenceKey, &c.LimitKey, &c.BatchID, &c.WorkflowID, &c.DependsOn, &c.DepsWaiting))
			out[id] = c
		}
		require.NoError(t, rows.Err())
		return out
	}
	want := map[int64]jobKeyCols{
		plain:  {},
		ids[0]: {SequenceKey: ptr("s1"), BatchID: &batch},
		ids[1]: {LimitKey: ptr("acme"), BatchID: &batch},
		ids[2]: {BatchID: &batch, WorkflowID: &ids[2]},
		ids[3]: {BatchID: &batch, WorkflowID: &ids[2], DependsOn: []int64{ids[2]}, DepsWaiting: ptr(int32(1))},
	}
	check := func(what string) {
		t.Helper()
		for id, w := range want {
			require.Equal(t, w, get(id), "%s: job_get(%d)", what, id)
		}
		require.Equal(t, want, list("asc"), "%s: job_list asc", what)
		require.Equal(t, want, list("desc"), "%s: job_list desc", what)
	}
	check("live")

	// job_list has job_get's columns, in its order.
	names := func(sql string, args ...any) []string {
		t.Helper()
		rows, err := b.Pool.Query(ctx, b.sqlAPI(sql), args...)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for _, f := range rows.FieldDescriptions() {
			out = append(out, f.Name)
		}
		return out
	}
	getCols := names(`SELECT * FROM {s}.job_get($1)`, plain)
	require.Equal(t, []string{"sequence_key", "limit_key", "batch_id"}, getCols[len(getCols)-3:])
	require.Equal(t, getCols, names(`SELECT * FROM {s}.job_list('kq')`))

	// Archived: cancelled (j3, pending) then completed (the rest).
	var cancelled bool
	require.NoError(t, b.Pool.QueryRow(ctx, b.sqlAPI(`SELECT {s}.job_cancel($1)`), ids[3]).Scan(&cancelled))
	require.True(t, cancelled)
	for range 4 {
		var id, token int64
		require.NoError(t, b.Pool.QueryRow(ctx, b.sqlAPI(`SELECT id, lease_token FROM {s}.job_claim('kq', 1)`)).Scan(&id, &token))
		_, err := b.Pool.Exec(ctx, b.sqlAPI(`SELECT {s}.job_complete($1, $2)`), id, token)
		require.NoError(t, err)
	}
	var done int
	require.NoError(t, b.Pool.QueryRow(ctx, b.sqlAPI(`SELECT count(*) FROM {s}.job_list('kq', p_state => 'completed')`)).Scan(&done))
	require.Equal(t, 4, done)
	want[ids[1]] = jobKeyCols{BatchID: &batch}                                                  // no limit key in the archive
	want[ids[3]] = jobKeyCols{BatchID: &batch, WorkflowID: &ids[2], DependsOn: []int64{ids[2]}} // not pending
	check("archived")
}
