package pgmsg_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// stepRows counts the job_log and job_step rows of job id.
func stepRows(t *testing.T, tb *testBundle, id int64) (logs, steps int) {
	t.Helper()
	sch := pgx.Identifier{tb.Schema}.Sanitize()
	err := tb.Pool.QueryRow(tb.ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s.job_log WHERE job_id = $1),
		(SELECT count(*) FROM %[1]s.job_step WHERE job_id = $1)`, sch), id).Scan(&logs, &steps)
	require.NoError(t, err)
	return logs, steps
}

// A handler that fails after step 2 resumes at step 3 on its retry: steps
// 1 and 2 ran once, their outputs come back from their checkpoints, and
// each attempt's log is kept with its outcome.
func TestStepResumeAfterFailure(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "st", pgmsg.QueueConfig{RetryBackoff: 10 * time.Millisecond})
	res, err := tb.client.Enqueue(tb.ctx, "st", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	var ran [4]atomic.Int32
	var got3 atomic.Value
	done := make(chan struct{})
	tb.runWorker(t, "st", func(ctx context.Context, j *pgmsg.Job) error {
		pgmsg.Logf(ctx, "attempt %d starts", j.Attempt)
		a, err := pgmsg.Step(ctx, "charge", func(context.Context) (int, error) { ran[1].Add(1); return 42, nil })
		if err != nil {
			return err
		}
		b, err := pgmsg.Step(ctx, "ship/1", func(context.Context) (string, error) { ran[2].Add(1); return "box", nil })
		if err != nil {
			return err
		}
		if j.Attempt == 1 {
			pgmsg.Logger(ctx).Warn("failing after step 2", "a", a)
			return errors.New("crash after step 2")
		}
		c, err := pgmsg.Step(ctx, "email", func(context.Context) (string, error) {
			ran[3].Add(1)
			return fmt.Sprintf("%d-%s", a, b), nil
		})
		if err != nil {
			return err
		}
		got3.Store(c)
		close(done)
		return nil
	}, &pgmsg.WorkerOpts{PollInterval: 20 * time.Millisecond})
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("job not retried to completion")
	}
	waitFor(t, 10*time.Second, "job completed", func() bool { return wfState(t, tb, res.ID) == pgmsg.JobStateCompleted })
	require.Equal(t, []int32{1, 1, 1}, []int32{ran[1].Load(), ran[2].Load(), ran[3].Load()})
	require.Equal(t, "42-box", got3.Load(), "the retry got steps 1 and 2's stored outputs")

	steps, err := tb.client.JobSteps(tb.ctx, res.ID)
	require.NoError(t, err)
	require.Len(t, steps, 3)
	require.Equal(t, []string{"charge", "ship/1", "email"}, []string{steps[0].Name, steps[1].Name, steps[2].Name})
	require.Equal(t, []int{1, 1, 2}, []int{steps[0].Attempt, steps[1].Attempt, steps[2].Attempt})
	require.JSONEq(t, `42`, string(steps[0].Output))
	require.JSONEq(t, `"42-box"`, string(steps[2].Output))

	logs, err := tb.client.JobLogs(tb.ctx, res.ID)
	require.NoError(t, err)
	require.Len(t, logs, 2)
	require.Equal(t, 1, logs[0].Attempt)
	require.Equal(t, "retrying", logs[0].Outcome)
	require.Contains(t, logs[0].Log, "attempt 1 starts")
	require.Contains(t, logs[0].Log, "level=WARN msg=\"failing after step 2\" a=42")
	require.Equal(t, 2, logs[1].Attempt)
	require.Equal(t, "completed", logs[1].Outcome)
	require.Contains(t, logs[1].Log, "attempt 2 starts")
	require.NotContains(t, logs[1].Log, "attempt 1")

	_, err = tb.client.JobLogs(tb.ctx, res.ID+1000000)
	require.ErrorIs(t, err, pgmsg.ErrUnknownJob)
	_, err = tb.client.JobSteps(tb.ctx, res.ID+1000000)
	require.ErrorIs(t, err, pgmsg.ErrUnknownJob)
}

// A worker whose job was taken from it (cancelled here; a rescue is the
// same to the lease check) cannot record a step: Step returns
// ErrJobNotHeld and nothing is stored. The SQL API refuses a stale lease
// token the same way.
func TestStepStaleWorkerCannotRecord(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "st", pgmsg.QueueConfig{})
	res, err := tb.client.Enqueue(tb.ctx, "st", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	stepErr := make(chan error, 1)
	var ran atomic.Int32
	tb.runWorker(t, "st", func(ctx context.Context, j *pgmsg.Job) error {
		close(started)
		<-release
		_, err := pgmsg.Step(context.WithoutCancel(ctx), "late", func(context.Context) (int, error) { ran.Add(1); return 1, nil })
		stepErr <- err
		return err
	}, nil)
	<-started
	cancelled, err := tb.client.CancelJob(tb.ctx, res.ID)
	require.NoError(t, err)
	require.True(t, cancelled)
	close(release)
	err = <-stepErr
	require.ErrorIs(t, err, pgmsg.ErrJobNotHeld)
	require.Equal(t, "PM106", pgmsg.ErrorCode(err))
	require.Equal(t, int32(1), ran.Load(), "the step ran; its checkpoint was refused")
	_, n := stepRows(t, tb, res.ID)
	require.Zero(t, n)

	// SQL: a token from before a new claim is refused.
	res2, err := tb.client.Enqueue(tb.ctx, "st2", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	j := claimOne(t, tb, "st2")
	sch := pgx.Identifier{tb.Schema}.Sanitize()
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT %s.job_step_save($1, $2, 'a', '1')", sch), res2.ID, j.LeaseToken-1)
	require.ErrorContains(t, err, "PM106")
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT %s.job_step_save($1, $2, 'a', '1')", sch), res2.ID, j.LeaseToken)
	require.NoError(t, err)
	_, n = stepRows(t, tb, res2.ID)
	require.Equal(t, 1, n)
}

// Step names are checked before the step runs (PM122), outputs past
// StepOutputMaxBytes are refused (PM123), in Go and in SQL alike.
func TestStepBounds(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "st", pgmsg.QueueConfig{MaxAttempts: 1})
	res, err := tb.client.Enqueue(tb.ctx, "st", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	type outcome struct {
		badName, tooLarge error
		ranBad            bool
	}
	out := make(chan outcome, 1)
	tb.runWorker(t, "st", func(ctx context.Context, j *pgmsg.Job) error {
		var o outcome
		_, o.badName = pgmsg.Step(ctx, "bad name!", func(context.Context) (int, error) { o.ranBad = true; return 0, nil })
		_, o.tooLarge = pgmsg.Step(ctx, "big", func(context.Context) (string, error) {
			return strings.Repeat("x", pgmsg.StepOutputMaxBytes), nil
		})
		out <- o
		return nil
	}, nil)
	o := <-out
	require.ErrorIs(t, o.badName, pgmsg.ErrInvalidStepName)
	require.Equal(t, "PM122", pgmsg.ErrorCode(o.badName))
	require.False(t, o.ranBad)
	require.ErrorIs(t, o.tooLarge, pgmsg.ErrStepTooLarge)
	require.Equal(t, "PM123", pgmsg.ErrorCode(o.tooLarge))
	_, err = pgmsg.Step(tb.ctx, "", func(context.Context) (int, error) { return 0, nil })
	require.ErrorIs(t, err, pgmsg.ErrInvalidStepName, "outside a worker too")
	v, err := pgmsg.Step(tb.ctx, "outside", func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)
	require.Equal(t, 7, v, "outside a worker the step just runs")

	res2, err := tb.client.Enqueue(tb.ctx, "st2", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	j := claimOne(t, tb, "st2")
	sch := pgx.Identifier{tb.Schema}.Sanitize()
	for _, c := range []struct{ name, output, code string }{
		{"''", "'1'", "PM122"},
		{"NULL", "'1'", "PM122"},
		{"'a b'", "'1'", "PM122"},
		{"repeat('a', 201)", "'1'", "PM122"},
		{"'big'", "to_jsonb(repeat('x', 65536))", "PM123"},
	} {
		_, err := tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT %s.job_step_save($1, $2, %s, %s)", sch, c.name, c.output), res2.ID, j.LeaseToken)
		require.ErrorContains(t, err, c.code, c.name)
	}
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf(`SELECT %[1]s.job_step_save($1, $2, 's' || i, NULL) FROM generate_series(1, 1000) i`, sch),
		res2.ID, j.LeaseToken)
	require.NoError(t, err)
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT %s.job_step_save($1, $2, 's1001', NULL)", sch), res2.ID, j.LeaseToken)
	require.ErrorContains(t, err, "PM123")
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT %s.job_step_save($1, $2, 's1', '2')", sch), res2.ID, j.LeaseToken)
	require.NoError(t, err, "saving a step again replaces it")
	_, n := stepRows(t, tb, res2.ID)
	require.Equal(t, 1000, n)
	waitFor(t, 10*time.Second, "job completed", func() bool { return wfState(t, tb, res.ID) == pgmsg.JobStateCompleted })
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An attempt's log is cut at WorkerOpts.MaxLogBytes with a last line that
// says so; its lines also go to the client's logger; snoozed and dead
// attempts keep theirs; jobs that log nothing store nothing.
func TestJobLogsBoundAndOutcomes(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	tb := setup(t, &pgmsg.Config{Logger: slog.New(slog.NewTextHandler(&out, nil))})
	tb.queue(t, "lg", pgmsg.QueueConfig{MaxAttempts: 1})
	ids := tb.enqueueN(t, "lg", 3, func(i int) pgmsg.EnqueueParams { return pgmsg.EnqueueParams{Payload: []byte{byte('a' + i)}} })
	var mu sync.Mutex
	snoozed := map[int64]bool{}
	tb.runWorker(t, "lg", func(ctx context.Context, j *pgmsg.Job) error {
		switch j.Payload[0] {
		case 'a': // long: cut
			for i := 0; i < 100; i++ {
				pgmsg.Logger(ctx).Info("line", "i", i, "pad", strings.Repeat("é", 10))
			}
			return nil
		case 'b': // snoozed once, then dead
			mu.Lock()
			first := !snoozed[j.ID]
			snoozed[j.ID] = true
			mu.Unlock()
			if first {
				pgmsg.Logf(ctx, "snoozing")
				return pgmsg.JobSnooze(0)
			}
			pgmsg.Logf(ctx, "giving up")
			return errors.New("gave up")
		}
		return nil // 'c' logs nothing
	}, &pgmsg.WorkerOpts{MaxLogBytes: 1024, PollInterval: 20 * time.Millisecond})
	waitFor(t, 20*time.Second, "jobs finished", func() bool {
		return wfState(t, tb, ids[0]) == pgmsg.JobStateCompleted && wfState(t, tb, ids[1]) == pgmsg.JobStateDead &&
			wfState(t, tb, ids[2]) == pgmsg.JobStateCompleted
	})
	logs, err := tb.client.JobLogs(tb.ctx, ids[0])
	require.NoError(t, err)
	require.Len(t, logs, 1)
	require.LessOrEqual(t, len(logs[0].Log), 1024)
	require.True(t, strings.HasSuffix(logs[0].Log, "[pgmsg: log truncated at 1024 bytes]\n"), logs[0].Log)
	require.Contains(t, logs[0].Log, "msg=line i=0 ")
	require.NotContains(t, logs[0].Log, "i=99")
	require.Contains(t, out.String(), "attempt=1 i=99 pad=", "the client's logger got every line")
	require.Contains(t, out.String(), fmt.Sprintf("queue=lg job=%d attempt=1", ids[0]))

	logs, err = tb.client.JobLogs(tb.ctx, ids[1])
	require.NoError(t, err)
	require.Len(t, logs, 2)
	require.Equal(t, []string{"snoozed", "dead"}, []string{logs[0].Outcome, logs[1].Outcome})
	require.Equal(t, []int{1, 1}, []int{logs[0].Attempt, logs[1].Attempt}, "a snooze does not count the attempt")
	require.Contains(t, logs[0].Log, "msg=snoozing")
	require.Contains(t, logs[1].Log, "msg=\"giving up\"")

	logs, err = tb.client.JobLogs(tb.ctx, ids[2])
	require.NoError(t, err)
	require.Empty(t, logs)
	n, _ := stepRows(t, tb, ids[2])
	require.Zero(t, n)

	_, err = tb.client.NewWorker("lg", func(context.Context, *pgmsg.Job) error { return nil },
		&pgmsg.WorkerOpts{MaxLogBytes: pgmsg.WorkerLogBytesMax + 1})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)

	// The SQL API holds every client to 1 MiB.
	sch := pgx.Identifier{tb.Schema}.Sanitize()
	var clipped string
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, fmt.Sprintf("SELECT %s._job_log_clip(repeat('é', 600000))", sch)).Scan(&clipped))
	require.True(t, strings.HasSuffix(clipped, "[pgmsg: log truncated at 1048576 bytes]"))
	require.LessOrEqual(t, len(clipped)-len("\n[pgmsg: log truncated at 1048576 bytes]"), 1<<20)
}

// Logs and steps go with their job: archive pruning, dead purging and
// queue deletion leave no row behind.
func TestJobLogsStepsRetention(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for _, q := range []string{"ra", "rd", "rq"} {
		tb.queue(t, q, pgmsg.QueueConfig{MaxAttempts: 1})
	}
	sch := pgx.Identifier{tb.Schema}.Sanitize()
	// finish runs one job of queue through a held claim: a step and a log.
	finish := func(queue string, fail bool) int64 {
		res, err := tb.client.Enqueue(tb.ctx, queue, pgmsg.EnqueueParams{}, nil)
		require.NoError(t, err)
		j := claimOne(t, tb, queue)
		_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT %s.job_step_save($1, $2, 's', '1')", sch), j.ID, j.LeaseToken)
		require.NoError(t, err)
		if fail {
			_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT * FROM %s.job_fail($1, $2, 'x', p_log => 'bye')", sch), j.ID, j.LeaseToken)
		} else {
			_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT * FROM %s.job_complete_many(ARRAY[$1::bigint], ARRAY[$2::bigint], p_logs => ARRAY['hi'])", sch),
				j.ID, j.LeaseToken)
		}
		require.NoError(t, err)
		l, s := stepRows(t, tb, res.ID)
		require.Equal(t, []int{1, 1}, []int{l, s})
		return res.ID
	}
	archived, dead, inQueue := finish("ra", false), finish("rd", true), finish("rq", false)
	live, err := tb.client.Enqueue(tb.ctx, "rq", pgmsg.EnqueueParams{}, nil)
	require.NoError(t, err)
	j := claimOne(t, tb, "rq")
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT %s.job_step_save($1, $2, 's', '1')", sch), j.ID, j.LeaseToken)
	require.NoError(t, err)

	_, err = tb.client.PruneArchive(tb.ctx, "ra", &pgmsg.PruneArchiveOpts{OlderThan: time.Nanosecond})
	require.NoError(t, err)
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf("SELECT %s.dead_purge('rd')", sch))
	require.NoError(t, err)
	require.NoError(t, tb.client.DeleteQueue(tb.ctx, "rq", true))
	for _, id := range []int64{archived, dead, inQueue, live.ID} {
		l, s := stepRows(t, tb, id)
		require.Equal(t, []int{0, 0}, []int{l, s}, "job %d", id)
	}
}
