package migration_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// callCode calls the SQL API function fn of tb's schema directly (bypassing
// Go) with args and returns the SQLSTATE it fails with.
func callCode(t *testing.T, tb *testBundle, fn string, args ...any) string {
	t.Helper()
	ph := make([]string, len(args))
	for i := range args {
		ph[i] = "$" + strconv.Itoa(i+1)
	}
	_, err := tb.Pool.Exec(tb.ctx, "SELECT "+pgx.Identifier{tb.Schema, fn}.Sanitize()+"("+strings.Join(ph, ", ")+")", args...)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "%s%v", fn, args)
	return pgErr.Code
}

// The consumer-group calls leave bad names to the SQL API: it refuses them
// with PM003 (ErrInvalidName) before anything else, on an existing topic
// and on an unknown one alike; Go refuses only names it cannot send.
func TestGroupNamesRefusedBySQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "names", 1)
	ctx, c := tb.ctx, tb.client
	bad := []string{"bad name!", "null\x00byte", "\xff", strings.Repeat("b", 201), ""}
	for _, topic := range []string{"names", "missing"} {
		for _, name := range bad {
			_, err := c.CreateGroup(ctx, topic, name, "")
			require.ErrorIs(t, err, pgmsg.ErrInvalidName, "CreateGroup(%q, %q)", topic, name)
			_, err = c.Heartbeat(ctx, topic, name, "m", 0)
			require.ErrorIs(t, err, pgmsg.ErrInvalidName, "Heartbeat group %q", name)
			_, err = c.Heartbeat(ctx, topic, "g", name, 0)
			require.ErrorIs(t, err, pgmsg.ErrInvalidName, "Heartbeat member %q", name)
			_, err = c.LeaveGroup(ctx, topic, name, "m")
			require.ErrorIs(t, err, pgmsg.ErrInvalidName, "LeaveGroup group %q", name)
			_, err = c.LeaveGroup(ctx, topic, "g", name)
			require.ErrorIs(t, err, pgmsg.ErrInvalidName, "LeaveGroup member %q", name)
			_, err = c.Claim(ctx, topic, name, nil)
			require.ErrorIs(t, err, pgmsg.ErrInvalidName, "Claim group %q", name)
			_, err = c.Heartbeat(ctx, name, "g", "m", 0)
			require.ErrorIs(t, err, pgmsg.ErrInvalidName, "Heartbeat topic %q", name)
			_, err = c.OffsetForTime(ctx, name, 0, time.Now())
			require.ErrorIs(t, err, pgmsg.ErrInvalidName, "OffsetForTime topic %q", name)
			_, err = c.OffsetsForTime(ctx, name, time.Now())
			require.ErrorIs(t, err, pgmsg.ErrInvalidName, "OffsetsForTime topic %q", name)
		}
		_, err := c.Claim(ctx, topic, "bad!", &pgmsg.ClaimOpts{Partition: ptr(int32(9))})
		require.ErrorIs(t, err, pgmsg.ErrInvalidName, "Claim of a partition out of range")
		// A bad session timeout is PM004 on an unknown topic too.
		_, err = c.Heartbeat(ctx, topic, "g", "m", -time.Second)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
		_, err = c.Heartbeat(ctx, topic, "g", "m", 367*24*time.Hour)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)

		// The same through the SQL API.
		require.Equal(t, "PM003", callCode(t, tb, "claim_range", topic, "bad!"))
		require.Equal(t, "PM003", callCode(t, tb, "group_create", topic, "bad!"))
		require.Equal(t, "PM003", callCode(t, tb, "group_heartbeat", topic, "bad!", "m"))
		require.Equal(t, "PM003", callCode(t, tb, "group_heartbeat", topic, "g", "bad!"))
		require.Equal(t, "PM003", callCode(t, tb, "group_heartbeat", "bad!", "g", "m"))
		require.Equal(t, "PM004", callCode(t, tb, "group_heartbeat", topic, "g", "m", "0s"))
		require.Equal(t, "PM003", callCode(t, tb, "group_leave", topic, "bad!", "m"))
		require.Equal(t, "PM003", callCode(t, tb, "group_leave", topic, "g", "bad!"))
		require.Equal(t, "PM003", callCode(t, tb, "group_leave", "bad!", "g", "m"))
	}
	// Nothing was created.
	groups, err := c.ListGroups(ctx, "", "")
	require.NoError(t, err)
	require.Empty(t, groups)
	left, err := c.LeaveGroup(ctx, "names", "g", "m")
	require.NoError(t, err)
	require.False(t, left)
}

// A name no queue can have is PM003 (ErrInvalidName) from every function
// that looks a queue up, as for topics; an unknown valid name stays PM101.
func TestQueueNamesRefusedBySQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx, c := tb.ctx, tb.client
	_, err := c.CreateQueue(ctx, "names", pgmsg.QueueConfig{})
	require.NoError(t, err)
	bad := []string{"bad name!", "null\x00byte", "\xff", strings.Repeat("b", 201)}
	for _, queue := range []string{"names", "missing"} {
		for _, name := range bad {
			require.ErrorIs(t, c.RemovePeriodicJob(ctx, queue, name), pgmsg.ErrInvalidName, "RemovePeriodicJob(%q, %q)", queue, name)
			require.ErrorIs(t, c.RemovePeriodicJob(ctx, name, "p"), pgmsg.ErrInvalidName, "RemovePeriodicJob queue %q", name)
			_, err := c.ListPeriodicJobs(ctx, name)
			require.ErrorIs(t, err, pgmsg.ErrInvalidName, "ListPeriodicJobs(%q)", name)
		}
		require.Equal(t, "PM003", callCode(t, tb, "periodic_remove", queue, "bad!"))
	}
	require.ErrorIs(t, c.RemovePeriodicJob(ctx, "missing", "p"), pgmsg.ErrUnknownQueue)
	require.ErrorIs(t, c.RemovePeriodicJob(ctx, "names", "p"), pgmsg.ErrUnknownPeriodicJob)
	_, err = c.ListPeriodicJobs(ctx, "missing")
	require.ErrorIs(t, err, pgmsg.ErrUnknownQueue)
	jobs, err := c.ListPeriodicJobs(ctx, "")
	require.NoError(t, err)
	require.Empty(t, jobs)

	// The SQL API: _queue() refuses the name before it says unknown.
	for _, fn := range []string{"periodic_list", "job_list", "periodic_remove"} {
		args := []any{"bad!"}
		if fn == "periodic_remove" {
			args = append(args, "p")
		}
		require.Equal(t, "PM003", callCode(t, tb, fn, args...), fn)
		args[0] = "missing"
		require.Equal(t, "PM101", callCode(t, tb, fn, args...), fn)
	}
}

// CreateToken leaves names and scopes to token_create(): PM003 for a bad
// name first, then PM004 for no scope or a bad one.
func TestCreateTokenRefusedBySQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx, c := tb.ctx, tb.client
	for _, name := range []string{"bad name", "null\x00byte", "\xff", strings.Repeat("t", 201), ""} {
		_, _, err := c.CreateToken(ctx, name, nil, nil)
		require.ErrorIs(t, err, pgmsg.ErrInvalidName, "name %q", name)
	}
	for _, scopes := range [][]string{nil, {}, {"root"}, {"admin", "publish:"}, {"consume:x/group:"}, {"publish:a b"}, {"claim:x\x00"}} {
		_, _, err := c.CreateToken(ctx, "t", scopes, nil)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "scopes %q", scopes)
	}
	_, _, err := c.CreateToken(ctx, "t", []string{"admin", "read", "publish:o.*", "consume:*/group:g-1"}, nil)
	require.NoError(t, err)
	toks, err := c.ListTokens(ctx)
	require.NoError(t, err)
	require.Len(t, toks, 1)
}

// A claim's options are claim_range()'s to refuse (PM004), after bad names
// (PM003) and before an unknown topic (PM001), as when Go checked them;
// the direct statements leave them to it.
func TestClaimOptionsRefusedBySQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "opts", 1)
	ctx, c := tb.ctx, tb.client
	_, err := c.Heartbeat(ctx, "opts", "g", "m", 0)
	require.NoError(t, err)
	bad := []*pgmsg.ClaimOpts{
		{MaxRecords: -1}, {MaxRecords: -1 << 40}, {Lease: -time.Second}, {Lease: time.Nanosecond},
		{Lease: 367 * 24 * time.Hour}, {MaxBytes: -1},
		// What Consumer.Run claims with (the direct statements' case).
		{MaxRecords: -5, Partition: ptr(int32(0)), Member: "m", RequireOwner: true},
	}
	for _, o := range bad {
		for _, topic := range []string{"opts", "missing"} {
			_, err := c.Claim(ctx, topic, "g", o)
			requireCode(t, err, pgmsg.ErrInvalidArgument, "PM004")
		}
		_, err := c.Claim(ctx, "bad topic!", "g", o)
		require.ErrorIs(t, err, pgmsg.ErrInvalidName, "%+v", o)
		_, err = c.Claim(ctx, "opts", "bad group!", o)
		require.ErrorIs(t, err, pgmsg.ErrInvalidName, "%+v", o)
	}
	// A huge MaxRecords is capped, not wrapped.
	_, err = c.Claim(ctx, "opts", "g", &pgmsg.ClaimOpts{MaxRecords: 1<<32 + 1})
	require.NoError(t, err)
	require.Equal(t, "PM004", callCode(t, tb, "claim_range", "opts", "g", 10, "30s", nil, "earliest", nil, false, false, nil, nil, int64(-1)))
	require.Equal(t, "PM003", callCode(t, tb, "claim_range", "opts", "bad!", 0))
}

// Partition counts out of 1..1024 are topic_create()'s and
// topic_add_partitions()'s to refuse (PM004), before a bad name or an
// unknown topic for the latter, as when Go checked them.
func TestPartitionCountsRefusedBySQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "parts", 2)
	ctx, c := tb.ctx, tb.client
	for _, n := range []int{-1, 1025, 1<<32 + 2, -1 << 40} {
		_, err := c.CreateTopic(ctx, "new", pgmsg.TopicConfig{Partitions: n})
		requireCode(t, err, pgmsg.ErrInvalidArgument, "PM004")
		for _, topic := range []string{"parts", "missing", "bad name!"} {
			_, err = c.AddPartitions(ctx, topic, n)
			requireCode(t, err, pgmsg.ErrInvalidArgument, "PM004")
		}
	}
	_, err := c.AddPartitions(ctx, "parts", 0)
	requireCode(t, err, pgmsg.ErrInvalidArgument, "PM004")
	_, err = c.AddPartitions(ctx, "missing", 5)
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic)
	_, err = c.AddPartitions(ctx, "parts", 2) // not more than the current count
	requireCode(t, err, pgmsg.ErrInvalidArgument, "PM004")
	require.Equal(t, "PM004", callCode(t, tb, "topic_add_partitions", "missing", 0))
	require.Equal(t, "PM004", callCode(t, tb, "topic_add_partitions", "missing", 1025))
	require.Equal(t, "PM001", callCode(t, tb, "topic_add_partitions", "missing", 3))
	topics, err := c.ListTopics(ctx)
	require.NoError(t, err)
	require.Len(t, topics, 1)
	require.Equal(t, 2, topics[0].Partitions)
}

// Extend's lease is extend()'s to refuse (PM004), before it looks the
// claim up, as when Go checked it.
func TestExtendLeaseRefusedBySQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "ext", 1)
	ctx, c := tb.ctx, tb.client
	require.NoError(t, c.Publish(ctx, []*pgmsg.Record{{Topic: "ext", Value: []byte("v")}}, nil))
	cl, err := c.Claim(ctx, "ext", "g", nil)
	require.NoError(t, err)
	lost := &pgmsg.Claim{Topic: "ext", Group: "g", Partition: 0, Epoch: cl.Epoch + 1}
	gone := &pgmsg.Claim{Topic: "missing", Group: "g", Partition: 0, Epoch: 1}
	for _, lease := range []time.Duration{0, -time.Second, time.Nanosecond, 367 * 24 * time.Hour} {
		for _, claim := range []*pgmsg.Claim{cl, lost, gone} {
			requireCode(t, c.Extend(ctx, claim, lease), pgmsg.ErrInvalidArgument, "PM004")
		}
	}
	require.ErrorIs(t, c.Extend(ctx, lost, time.Minute), pgmsg.ErrClaimNotHeld)
	require.ErrorIs(t, c.Extend(ctx, gone, time.Minute), pgmsg.ErrUnknownTopic)
	require.NoError(t, c.Extend(ctx, cl, time.Minute))
	require.Equal(t, "PM004", callCode(t, tb, "extend", "missing", "g", 0, int64(1), "0s"))
}

// ExtendJob's lease is job_extend()'s to refuse (PM004), before it looks
// the job up.
func TestExtendJobLeaseRefusedBySQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx, c := tb.ctx, tb.client
	_, err := c.Enqueue(ctx, "q", pgmsg.EnqueueParams{Payload: []byte("1")}, nil)
	require.NoError(t, err)
	jobs, err := c.ClaimJobs(ctx, "q", &pgmsg.ClaimJobsOpts{Max: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	lost := *jobs[0]
	lost.LeaseToken++
	for _, lease := range []time.Duration{-time.Second, -time.Nanosecond, 367 * 24 * time.Hour} {
		for _, j := range []*pgmsg.Job{jobs[0], &lost} {
			requireCode(t, c.ExtendJob(ctx, j, lease), pgmsg.ErrInvalidArgument, "PM004")
		}
	}
	require.ErrorIs(t, c.ExtendJob(ctx, &lost, time.Minute), pgmsg.ErrJobNotHeld)
	require.NoError(t, c.ExtendJob(ctx, jobs[0], 0)) // the queue's lease
	require.NoError(t, c.ExtendJob(ctx, jobs[0], time.Minute))
}

// PreviewSchedule's count is periodic_preview()'s to refuse (PM004), before
// the schedule and time zone, as when Go checked it; a huge count is sent
// capped, not wrapped.
func TestPreviewCountRefusedBySQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx, c := tb.ctx, tb.client
	for _, n := range []int{0, -1, 1001, 1 << 32, -1 << 40} {
		for _, schedule := range []string{"@hourly", "@often"} {
			_, err := c.PreviewSchedule(ctx, schedule, "", time.Now(), n)
			requireCode(t, err, pgmsg.ErrInvalidArgument, "PM004")
		}
		_, err := c.PreviewSchedule(ctx, "@hourly", "Mars/Olympus", time.Now(), n)
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "count %d", n)
	}
	ticks, err := c.PreviewSchedule(ctx, "@hourly", "", time.Now(), 1000)
	require.NoError(t, err)
	require.Len(t, ticks, 1000)
	require.Equal(t, "PM004", callCode(t, tb, "periodic_preview", "@hourly", "UTC", time.Now(), 0))
	require.Equal(t, "PM004", callCode(t, tb, "periodic_preview", "@often", "UTC", time.Now(), 1001))
}

// PruneArchive's older than is archive_prune()'s to refuse (PM004), before
// the queue is looked up; Go keeps one under 1µs (sent as 0: prune
// everything) and a negative batch size.
func TestPruneArchiveRefusedBySQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx, c := tb.ctx, tb.client
	tb.queue(t, "prune", pgmsg.QueueConfig{})
	_, err := c.Enqueue(ctx, "prune", pgmsg.EnqueueParams{Payload: []byte("x")}, nil)
	require.NoError(t, err)
	jobs, err := c.ClaimJobs(ctx, "prune", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, c.Complete(ctx, jobs[0]))
	for _, queue := range []string{"", "prune", "missing", "bad name!"} {
		for _, o := range []*pgmsg.PruneArchiveOpts{{OlderThan: -time.Second}, {OlderThan: -time.Nanosecond}, {BatchSize: -1},
			{OlderThan: -time.Hour, BatchSize: -1}} {
			n, err := c.PruneArchive(ctx, queue, o)
			requireCode(t, err, pgmsg.ErrInvalidArgument, "PM004")
			require.Zero(t, n)
		}
	}
	require.Equal(t, int64(1), tb.stats(t, "prune").Archived, "nothing pruned")
	require.Equal(t, "PM004", callCode(t, tb, "archive_prune", nil, "-1 second"))
	require.Equal(t, "PM004", callCode(t, tb, "archive_prune", "missing", "-1 second"))
}

// ClaimJobs' options are job_claim()'s to refuse (PM004), before it looks
// the queue up (a bad or unknown name) or finds it paused or limited, as
// when Go checked them; the direct statement leaves them to it.
func TestClaimJobsOptionsRefusedBySQL(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx, c := tb.ctx, tb.client
	tb.queue(t, "opts", pgmsg.QueueConfig{})
	tb.queue(t, "paused", pgmsg.QueueConfig{})
	require.NoError(t, c.PauseQueue(ctx, "paused"))
	tb.queue(t, "limited", pgmsg.QueueConfig{MaxRunning: 1})
	for _, q := range []string{"opts", "paused", "limited"} {
		_, err := c.Enqueue(ctx, q, pgmsg.EnqueueParams{Payload: []byte("x")}, nil)
		require.NoError(t, err)
	}
	bad := []*pgmsg.ClaimJobsOpts{
		{Max: -1}, {Max: -1 << 40}, {Max: -1<<32 + 5}, {Lease: -time.Second}, {Lease: -time.Nanosecond},
		{Lease: time.Nanosecond}, {Lease: 367 * 24 * time.Hour}, {MaxBytes: -1}, {Max: -1, MaxBytes: 10},
	}
	for _, o := range bad {
		for _, q := range []string{"opts", "paused", "limited", "missing", "bad name!"} {
			_, err := c.ClaimJobs(ctx, q, o)
			requireCode(t, err, pgmsg.ErrInvalidArgument, "PM004")
			err = pgx.BeginFunc(ctx, tb.Pool, func(tx pgx.Tx) error {
				_, err := c.ClaimJobsTx(ctx, tx, q, o)
				return err
			})
			requireCode(t, err, pgmsg.ErrInvalidArgument, "PM004")
		}
	}
	// Nothing was claimed; a huge Max is capped, not wrapped.
	for _, q := range []string{"opts", "limited"} {
		jobs, err := c.ClaimJobs(ctx, q, &pgmsg.ClaimJobsOpts{Max: 1<<32 + 1})
		require.NoError(t, err)
		require.Len(t, jobs, 1, q)
	}
	for _, args := range [][]any{{"opts", 0}, {"paused", 1, "-1 second"}, {"missing", 1, nil, nil, int64(0)}, {"bad!", 1, "367 days"}} {
		require.Equal(t, "PM004", callCode(t, tb, "job_claim", args...), "job_claim%v", args)
	}
	require.Equal(t, "PM003", callCode(t, tb, "job_claim", "bad!", 1))
	require.Equal(t, "PM101", callCode(t, tb, "job_claim", "missing", 1))
}

// A negative limit (and purge's negative older-than) is refused by the
// dead-job calls, in SQL and through Go, before anything is listed,
// requeued or purged: Go read it as "not set" (a purge of every dead job)
// and SQL as 0, and a limit below -2^31 wrapped to a positive int32 on its
// way to SQL.
func TestDeadJobLimitsRefuseNegative(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx, c := tb.ctx, tb.client
	_, err := c.CreateQueue(ctx, "dq", pgmsg.QueueConfig{MaxAttempts: 1})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := c.Enqueue(ctx, "dq", pgmsg.EnqueueParams{Payload: []byte("p")}, nil)
		require.NoError(t, err)
	}
	jobs, err := c.ClaimJobs(ctx, "dq", &pgmsg.ClaimJobsOpts{Max: 3})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	for _, j := range jobs {
		_, err := c.Fail(ctx, j, errors.New("boom"), nil)
		require.NoError(t, err)
	}

	for _, limit := range []int{-1, math.MinInt32 - 5, math.MinInt64} {
		_, err := c.ListDeadJobs(ctx, "dq", &pgmsg.DeadJobsOpts{Limit: limit})
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "ListDeadJobs limit %d", limit)
		_, err = c.RequeueDeadJobs(ctx, "dq", &pgmsg.DeadJobsOpts{Limit: limit})
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "RequeueDeadJobs limit %d", limit)
		_, err = c.PurgeDeadJobs(ctx, "dq", &pgmsg.DeadJobsOpts{Limit: limit})
		require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "PurgeDeadJobs limit %d", limit)
	}
	_, err = c.PurgeDeadJobs(ctx, "dq", &pgmsg.DeadJobsOpts{OlderThan: -time.Hour})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument, "PurgeDeadJobs older than -1h")

	require.Equal(t, "PM004", callCode(t, tb, "dead_list", "dq", nil, -1, 0))
	require.Equal(t, "PM004", callCode(t, tb, "dead_requeue", "dq", nil, nil, -1))
	require.Equal(t, "PM004", callCode(t, tb, "dead_purge", "dq", nil, nil, nil, -1))
	require.Equal(t, "PM004", callCode(t, tb, "dead_purge", "dq", nil, nil, "-1 hour", 10))

	dead, err := c.ListDeadJobs(ctx, "dq", nil)
	require.NoError(t, err)
	require.Len(t, dead, 3, "a refused call requeued or purged dead jobs")
	// Zero is still the default, and a limit still caps.
	n, err := c.RequeueDeadJobs(ctx, "dq", &pgmsg.DeadJobsOpts{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = c.PurgeDeadJobs(ctx, "dq", nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
}
