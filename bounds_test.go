package pgmsg_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// Timestamps outside the UTC years 0001..9999 cannot be encoded back to
// JSON (RFC 3339); they are refused on every surface.
var outOfRangeTimes = []time.Time{
	time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", -(23*3600+59*60))), // year 10000 UTC
	time.Date(0, 1, 1, 0, 0, 0, 0, time.FixedZone("", 23*3600+59*60)),            // year 0 UTC
	time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
}

func sqlCode(t *testing.T, err error) string {
	t.Helper()
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "not a database error: %v", err)
	return pe.Code
}

func TestTimestampBounds(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "ts", 1)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	for _, ts := range outOfRangeTimes {
		// Go: Publish, the Producer, Enqueue.
		err := tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "ts", Value: []byte("1"), Timestamp: ts}}, nil)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "publish %s", ts)
		p, err := tb.client.NewProducer(nil)
		require.NoError(t, err)
		require.ErrorIs(t, p.ProduceSync(tb.ctx, &pgmsg.Record{Topic: "ts", Value: []byte("1"), Timestamp: ts}), pgmsg.ErrInvalidArgument)
		require.NoError(t, p.Close(tb.ctx))
		_, err = tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Payload: []byte("1"), RunAt: ts}, nil)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "enqueue %s", ts)

		// SQL: the same values sent by another language's client.
		_, err = tb.Pool.Exec(tb.ctx, "SELECT * FROM "+s+".publish('ts', ARRAY['1'::bytea], p_timestamps => ARRAY[$1::timestamptz])", ts)
		require.Equal(t, "PM004", sqlCode(t, err), "publish %s", ts)
		_, err = tb.Pool.Exec(tb.ctx, "SELECT * FROM "+s+".enqueue_many('q', ARRAY['1'::bytea], p_run_ats => ARRAY[$1::timestamptz])", ts)
		require.Equal(t, "PM004", sqlCode(t, err), "enqueue %s", ts)
		_, err = tb.Pool.Exec(tb.ctx, "SELECT * FROM "+s+".token_create('tk', sha256('x'), 'p', ARRAY['admin'], $1)", ts)
		require.Equal(t, "PM004", sqlCode(t, err), "token %s", ts)
	}
	// A delay that would run the job after 9999 (SQL only: Go's durations
	// stop at 292 years).
	_, err := tb.Pool.Exec(tb.ctx, "SELECT * FROM "+s+".enqueue_many('q', ARRAY['1'::bytea], p_delays => ARRAY['9000 years'::interval])")
	require.Equal(t, "PM104", sqlCode(t, err))
	var n int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, "SELECT count(*) FROM "+s+".record").Scan(&n))
	require.Zero(t, n)
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, "SELECT count(*) FROM "+s+".job").Scan(&n))
	require.Zero(t, n)

	// The edges of the range are accepted (0001-01-01T00:00:00Z is the
	// zero time: "unset").
	// A time within the last microsecond of 9999 is stored truncated to
	// 23:59:59.999999, within the range (it was refused).
	lo, hi := time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	recs := []*pgmsg.Record{{Topic: "ts", Value: []byte("1"), Timestamp: lo}, {Topic: "ts", Value: []byte("2"), Timestamp: hi},
		{Topic: "ts", Value: []byte("3"), Timestamp: hi.Add(999 * time.Nanosecond)}}
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))
	got, err := tb.client.Fetch(tb.ctx, "ts", 0, 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.True(t, got[0].Timestamp.Equal(lo) && got[1].Timestamp.Equal(hi) && got[2].Timestamp.Equal(hi), "%v %v %v", got[0].Timestamp, got[1].Timestamp, got[2].Timestamp)
	_, err = tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Payload: []byte("1"), RunAt: hi}, nil)
	require.NoError(t, err)

	// Snooze and retry delays that would run the job after 9999 (SQL).
	_, err = tb.client.Enqueue(tb.ctx, "q2", pgmsg.EnqueueParams{Payload: []byte("1")}, nil)
	require.NoError(t, err)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "q2", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	_, err = tb.Pool.Exec(tb.ctx, "SELECT "+s+".job_snooze($1, $2, '9000 years')", jobs[0].ID, jobs[0].LeaseToken)
	require.Equal(t, "PM104", sqlCode(t, err))
	_, err = tb.Pool.Exec(tb.ctx, "SELECT * FROM "+s+".job_fail($1, $2, 'x', '9000 years')", jobs[0].ID, jobs[0].LeaseToken)
	require.Equal(t, "PM104", sqlCode(t, err))
}

// A timestamp finer than PostgreSQL's microseconds is stored truncated;
// Publish reported the nanoseconds it was given, so the HTTP publish
// answer named a timestamp that no read returns (found by the HTTP
// property test).
func TestPublishReportsStoredTimestamp(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "ts", 3)
	fine := []time.Time{
		time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 999999999, time.FixedZone("", 5*3600)), // rounding would change the second
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),                              // truncates to the zero time
		time.Date(1969, 12, 31, 23, 59, 59, 999999500, time.UTC),              // before the Unix epoch
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),              // stored as the last microsecond of 9999
	}
	for _, manual := range []bool{false, true} {
		// One partition (one statement) and three (a pipelined batch).
		var recs []*pgmsg.Record
		for i, ts := range fine {
			recs = append(recs, &pgmsg.Record{Topic: "ts", Value: []byte("1"), Timestamp: ts, Partition: int32(i % 3)})
		}
		require.NoError(t, tb.client.Publish(tb.ctx, recs, &pgmsg.PublishOpts{ManualPartition: manual}))
		for i, r := range recs {
			require.True(t, r.Timestamp.Equal(fine[i].Truncate(time.Microsecond)), "record %d: reported %s for %s", i, r.Timestamp, fine[i])
			got, err := tb.client.Fetch(tb.ctx, "ts", r.Partition, r.Offset, 1)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.True(t, got[0].Timestamp.Equal(r.Timestamp), "record %d: stored %s, reported %s", i, got[0].Timestamp, r.Timestamp)
		}
	}
}

func TestJobKindAndUniqueKeyBounds(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	long := func(n int) string { return strings.Repeat("k", n) }

	_, err := tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Kind: long(pgmsg.JobKindMaxBytes + 1)}, nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{UniqueKey: long(pgmsg.JobUniqueKeyMaxBytes + 1)}, nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Kind: long(pgmsg.JobKindMaxBytes), UniqueKey: long(pgmsg.JobUniqueKeyMaxBytes)}, nil)
	require.NoError(t, err)

	// SQL: a 5 MB kind was stored; a 2.7k random unique key failed with
	// 54000 (index row too big).
	_, err = tb.Pool.Exec(tb.ctx, "SELECT * FROM "+s+".enqueue_many('q', ARRAY['1'::bytea], p_kinds => ARRAY[repeat('k', 5000000)])")
	require.Equal(t, "PM004", sqlCode(t, err))
	_, err = tb.Pool.Exec(tb.ctx, "SELECT * FROM "+s+".enqueue_many('q', ARRAY['1'::bytea], p_unique_keys => ARRAY[(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 90))])")
	require.Equal(t, "PM004", sqlCode(t, err))
	var n int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, "SELECT count(*) FROM "+s+".job").Scan(&n))
	require.Equal(t, 1, n)
}

// Queue settings were converted to 32 bits: 4294967297 became 1.
func TestQueueSettingsNotTruncated(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{MaxPayloadBytes: 1<<32 + 1})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{MaxAttempts: 1<<32 + 2})
	require.ErrorIs(t, err, pgmsg.ErrInvalidMaxAttempts)
	_, err = tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{MaxAttempts: math.MaxInt32, MaxPayloadBytes: math.MaxInt32})
	require.NoError(t, err)
	_, err = tb.client.UpdateQueue(tb.ctx, "q", pgmsg.QueueConfig{MaxPayloadBytes: 1<<32 + 1})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.UpdateQueue(tb.ctx, "q", pgmsg.QueueConfig{MaxAttempts: 1<<32 + 2})
	require.ErrorIs(t, err, pgmsg.ErrInvalidMaxAttempts)
	qs, err := tb.client.ListQueues(tb.ctx)
	require.NoError(t, err)
	q := qs[0]
	require.Equal(t, math.MaxInt32, q.MaxAttempts)
	require.Equal(t, math.MaxInt32, q.MaxPayloadBytes)

	// AddPartitions: 1<<32 + 2 was sent as 2.
	tb.topic(t, "t", 1)
	_, err = tb.client.AddPartitions(tb.ctx, "t", 1<<32+2)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	topics, err := tb.client.ListTopics(tb.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, topics[0].Partitions)
}

// Durations once had no upper bound. A lease of '9000 years' made a
// claim's or a job's expiry a year past 9999, which no HTTP answer could
// encode (a 500), and a queue setting past 292 years did not fit a Go
// duration. Leases, session timeouts, backoffs and waits are at most 366
// days, archive retention at most 36525 days: PM004,
// nothing written, on every function that takes one; Go callers get
// ErrInvalidArgument.
func TestDurationBounds(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "d", 1)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "d", Value: []byte("1")}}, nil))
	_, err := tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Payload: []byte("1")}, nil)
	require.NoError(t, err)

	exec := func(sql string, args ...any) error {
		_, err := tb.Pool.Exec(tb.ctx, strings.ReplaceAll(sql, "$s", s), args...)
		return err
	}
	for _, long := range []string{"9000 years", "367 days", "8785 hours"} {
		for _, sql := range []string{
			`SELECT * FROM $s.claim('d', 'g', 10, $1::interval)`,
			`SELECT * FROM $s.claim_range('d', 'g', 10, $1::interval)`,
			`SELECT * FROM $s.job_claim('q', 1, $1::interval)`,
			`SELECT * FROM $s.group_heartbeat('d', 'g2', 'm', $1::interval)`,
			`SELECT * FROM $s.queue_create('q2', p_lease => $1::interval)`,
			`SELECT * FROM $s.queue_create('q2', p_retry_backoff => $1::interval)`,
			`SELECT * FROM $s.queue_create('q2', p_retry_backoff_max => $1::interval)`,
			`SELECT * FROM $s.queue_create('q2', p_backpressure_timeout => $1::interval)`,
			`SELECT * FROM $s.queue_update('q', p_lease => $1::interval)`,
		} {
			require.Equal(t, "PM004", sqlCode(t, exec(sql, long)), "%s with %s", sql, long)
		}
	}
	require.Equal(t, "PM004", sqlCode(t, exec(`SELECT * FROM $s.queue_create('q2', p_archive_retention => '36526 days')`)))
	require.Equal(t, "PM004", sqlCode(t, exec(`SELECT * FROM $s.topic_create('d2', 1, '{"backpressure_timeout_ms": 31622400001}')`)))
	require.Equal(t, "PM004", sqlCode(t, exec(`SELECT * FROM $s.topic_configure('d', '{"backpressure_timeout_ms": 9223372036854775807}')`)))

	// Extending a held claim or job.
	cl, err := tb.client.Claim(tb.ctx, "d", "g", nil)
	require.NoError(t, err)
	require.NotNil(t, cl)
	require.Equal(t, "PM004", sqlCode(t, exec(`SELECT $s.extend('d', 'g', 0, $1, '9000 years')`, cl.Epoch)))
	require.Equal(t, "PM004", sqlCode(t, exec(`SELECT $s.extend('d', 'g', 0, $1, '100000000 years')`, cl.Epoch)), "not 22008")
	jobs, err := tb.client.ClaimJobs(tb.ctx, "q", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, "PM004", sqlCode(t, exec(`SELECT $s.job_extend($1, $2, '9000 years')`, jobs[0].ID, jobs[0].LeaseToken)))
	var exp time.Time
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT lease_expires_at FROM `+s+`.job WHERE id = $1`, jobs[0].ID).Scan(&exp))
	require.True(t, exp.Equal(*jobs[0].LeaseExpiresAt), "a refused extend changed the lease")

	// Nothing was created or written.
	var n int
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM `+s+`.queue WHERE name = 'q2'`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM `+s+`.topic WHERE name = 'd2'`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT count(*) FROM `+s+`.group_member`).Scan(&n))
	require.Zero(t, n)

	// The bounds themselves are accepted, from SQL and from Go.
	require.NoError(t, exec(`SELECT * FROM $s.queue_create('q3', p_lease => '366 days', p_retry_backoff => '366 days',
		p_retry_backoff_max => '8784 hours', p_backpressure_timeout => '366 days', p_archive_retention => '36525 days')`))
	require.NoError(t, tb.client.Extend(tb.ctx, cl, 366*24*time.Hour))
	require.NoError(t, tb.client.ExtendJob(tb.ctx, jobs[0], 366*24*time.Hour))

	// Go: the same refusals as ErrInvalidArgument, the direct claim path
	// included (a member's own partition).
	const tooLong = 367 * 24 * time.Hour
	require.ErrorIs(t, tb.client.Extend(tb.ctx, cl, tooLong), pgmsg.ErrInvalidArgument)
	require.ErrorIs(t, tb.client.ExtendJob(tb.ctx, jobs[0], tooLong), pgmsg.ErrInvalidArgument)
	_, err = tb.client.ClaimJobs(tb.ctx, "q", &pgmsg.ClaimJobsOpts{Lease: tooLong})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.CreateQueue(tb.ctx, "q4", pgmsg.QueueConfig{Lease: tooLong})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	_, err = tb.client.Claim(tb.ctx, "d", "g3", &pgmsg.ClaimOpts{Lease: tooLong})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	require.NoError(t, exec(`SELECT * FROM $s.group_heartbeat('d', 'g4', 'm')`))
	p0 := int32(0)
	_, err = tb.client.Claim(tb.ctx, "d", "g4", &pgmsg.ClaimOpts{Lease: tooLong, Partition: &p0, Member: "m", RequireOwner: true})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	var claimed bool
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT claim_expires_at IS NOT NULL FROM `+s+`.group_cursor WHERE group_name = 'g4'`).Scan(&claimed))
	require.False(t, claimed, "the direct claim statement took the lease")
}
