package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// queue create/config --job-timeout and queue enqueue --timeout.
func TestJobTimeoutCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	var q pgmsg.Queue
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "create", "jq", "--job-timeout", "45s", "-o", "json")), &q))
	require.Equal(t, 45*time.Second, q.JobTimeout)
	require.Contains(t, s.ok("", "queue", "list"), "45s")
	var qs []pgmsg.Queue
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "list", "-o", "json")), &qs), "one queue: still a list")
	require.Len(t, qs, 1)

	out := s.ok("", "queue", "enqueue", "jq", `{"n":1}`, "--timeout", "2m", "-o", "json")
	var res []struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &res), out)
	c, err := pgmsg.NewClient(s.b.Pool, &pgmsg.Config{Schema: s.b.Schema})
	require.NoError(t, err)
	defer c.Close()
	j, err := c.GetJob(context.Background(), res[0].ID)
	require.NoError(t, err)
	require.Equal(t, 2*time.Minute, j.Timeout)

	q = pgmsg.Queue{}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "config", "jq", "--job-timeout", "0", "-o", "json")), &q))
	require.Zero(t, q.JobTimeout)
	require.Contains(t, s.fail("", "queue", "enqueue", "jq", `{}`, "--timeout", "-1s"), "timeout must be")
	require.Contains(t, s.fail("", "queue", "config", "jq", "--job-timeout", "9000h"), "job timeout must be")
}

// queue create/config --dead-retention.
func TestDeadRetentionCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	require.Contains(t, s.ok("", "queue", "create", "dq", "--dead-retention", "720h", "-o", "wide"), "720h")
	var q pgmsg.Queue
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "config", "dq", "--dead-retention", "0", "-o", "json")), &q))
	require.Zero(t, q.DeadRetention)
	require.Contains(t, s.ok("", "queue", "list", "-o", "wide"), "until acted on")
	require.Contains(t, s.fail("", "queue", "config", "dq", "--dead-retention", "-5s"), "dead retention must be")
}

// queue job ID shows one job, live then archived.
func TestQueueJobCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	out := s.ok("", "queue", "enqueue", "jq", `{"n":1}`, "--kind", "report", "--timeout", "90s", "-o", "json")
	var res []struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	id := strconv.FormatInt(res[0].ID, 10)
	text := s.ok("", "queue", "job", id)
	for _, want := range []string{"available", "report", "0/25", "1m30s", `{"n":1} (json)`} {
		require.Contains(t, text, want)
	}
	require.NotRegexp(t, `(?m)^batch`, text, "a job of no batch has no batch row")
	var j struct {
		State   string          `json:"state"`
		Payload json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "job", id, "-o", "json", "--encoding", "base64")), &j))
	require.Equal(t, "available", j.State)
	require.Equal(t, `"eyJuIjoxfQ=="`, string(j.Payload))

	// Progress while it runs, then the result it was completed with.
	c, err := pgmsg.NewClient(s.b.Pool, &pgmsg.Config{Schema: s.b.Schema})
	require.NoError(t, err)
	defer c.Close()
	jobs, err := c.ClaimJobs(context.Background(), "jq", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, c.SetJobProgress(context.Background(), jobs[0], map[string]int{"pages": 3}))
	require.Regexp(t, `progress\s+\{"pages": 3\}`, s.ok("", "queue", "job", id))
	require.NoError(t, jobs[0].SetResult("done"))
	require.NoError(t, c.Complete(context.Background(), jobs[0]))
	text = s.ok("", "queue", "job", id)
	require.Regexp(t, `result\s+"done"`, text)
	require.Contains(t, text, "completed")
	var done struct {
		Progress json.RawMessage `json:"progress"`
		Result   json.RawMessage `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "job", id, "-o", "json")), &done))
	require.JSONEq(t, `{"pages": 3}`, string(done.Progress))
	require.JSONEq(t, `"done"`, string(done.Result))
	require.Contains(t, s.fail("", "queue", "job", "999999"), "unknown job")
	require.Contains(t, s.fail("", "queue", "job", "x"), "positive integer")

	// A job's sequence key, and a limit key taken from the payload.
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "enqueue", "jq", `{}`, "--sequence-key", "acct-7", "-o", "json")), &res))
	require.Regexp(t, `sequence key\s+acct-7\n`, s.ok("", "queue", "job", strconv.FormatInt(res[0].ID, 10)))
	s.ok("", "queue", "create", "jl", "--key-limit", "1", "--key-field", "tenant")
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "enqueue", "jl", `{"tenant":"acme"}`, "-o", "json")), &res))
	text = s.ok("", "queue", "job", strconv.FormatInt(res[0].ID, 10))
	require.Regexp(t, `limit key\s+acme\n`, text)
	require.Regexp(t, `sequence key\s+-\n`, text)
	var keyed struct {
		LimitKey string `json:"limit_key"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "job", strconv.FormatInt(res[0].ID, 10), "-o", "json")), &keyed))
	require.Equal(t, "acme", keyed.LimitKey)
	// queue jobs -o json lists both keys (job_list's sequence_key and
	// limit_key).
	var listed []struct {
		SequenceKey string `json:"sequence_key"`
		LimitKey    string `json:"limit_key"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "jobs", "jq", "--order", "desc", "--limit", "1", "-o", "json")), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, "acct-7", listed[0].SequenceKey)
	listed = nil
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "jobs", "jl", "-o", "json")), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, "acme", listed[0].LimitKey)
}

// queue jobs QUEUE lists jobs by id with filters and pages.
func TestQueueJobsCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	out := s.ok("", "queue", "enqueue", "jl", `{"n":1}`, "--kind", "a", "-o", "json")
	var first []struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &first), out)
	s.ok("", "queue", "enqueue", "jl", `{"n":2}`, "--kind", "b")
	s.ok("", "queue", "enqueue", "jl", `{"n":3}`, "--kind", "b")
	text := s.ok("", "queue", "jobs", "jl")
	require.Equal(t, 3, strings.Count(text, "available"), text)
	var jobs []struct {
		ID   int64  `json:"id"`
		Kind string `json:"kind"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "jobs", "jl", "--kind", "b", "-o", "json")), &jobs))
	require.Len(t, jobs, 2)
	require.Equal(t, "b", jobs[0].Kind)
	text = s.ok("", "queue", "jobs", "jl", "--limit", "1", "--after", strconv.FormatInt(first[0].ID, 10))
	require.Contains(t, text, "more may follow")
	// Newest first: the last enqueued on top, paged downwards.
	var desc []struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "jobs", "jl", "--order", "desc", "-o", "json")), &desc))
	require.Len(t, desc, 3)
	require.Greater(t, desc[0].ID, desc[1].ID)
	require.Greater(t, desc[1].ID, desc[2].ID)
	require.Equal(t, first[0].ID, desc[2].ID)
	text = s.ok("", "queue", "jobs", "jl", "--order", "desc", "--limit", "1")
	require.Contains(t, text, fmt.Sprintf("(more may follow: --order desc --after %d)", desc[0].ID))
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "jobs", "jl", "--order", "desc", "--after", strconv.FormatInt(desc[0].ID, 10), "-o", "json")), &desc))
	require.Len(t, desc, 2)
	require.Equal(t, first[0].ID, desc[1].ID)
	require.Contains(t, s.fail("", "queue", "jobs", "jl", "--order", "newest"), "--order must be asc or desc")
	require.Contains(t, s.ok("", "queue", "jobs", "jl", "--state", "completed"), "(no jobs)")
	require.Contains(t, s.fail("", "queue", "jobs", "jl", "--state", "finished"), "unknown job state")
	require.Contains(t, s.fail("", "queue", "jobs", "jl", "--since", "yesterday"), "RFC 3339")
	require.Contains(t, s.fail("", "queue", "jobs", "jl", "--limit", "5000"), "between 1 and 1000")
	require.Contains(t, s.fail("", "queue", "jobs", "nope"), "unknown queue")

	// Tags and metadata: set on enqueue, shown, searched.
	out = s.ok("", "queue", "enqueue", "jl", `{"n":4}`, "--tag", "eu", "--tag", "customer:42", "--metadata", `{"by":"ann"}`, "-o", "json")
	var tagged []struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &tagged), out)
	text = s.ok("", "queue", "job", strconv.FormatInt(tagged[0].ID, 10))
	require.Regexp(t, `tags\s+customer:42, eu`, text)
	require.Regexp(t, `metadata\s+\{"by": "ann"\}`, text)
	var found []struct {
		ID   int64    `json:"id"`
		Tags []string `json:"tags"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "jobs", "jl", "--tag", "eu", "-o", "json")), &found))
	require.Len(t, found, 1)
	require.Equal(t, tagged[0].ID, found[0].ID)
	require.Contains(t, s.fail("", "queue", "enqueue", "jl", "x", "--tag", "has space"), "a tag is")
	require.Contains(t, s.fail("", "queue", "enqueue", "jl", "x", "--metadata", "[1]"), "JSON object")
}

// queue job ID --logs shows the job's steps and its attempts' logs.
func TestQueueJobLogsCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	c, err := pgmsg.NewClient(s.b.Pool, &pgmsg.Config{Schema: s.b.Schema})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	res, err := c.Enqueue(ctx, "lq", pgmsg.EnqueueParams{Payload: []byte(`{}`)}, nil)
	require.NoError(t, err)
	id := strconv.FormatInt(res.ID, 10)
	require.Contains(t, s.ok("", "queue", "job", id, "--logs"), "no logs")
	jobs, err := c.ClaimJobs(ctx, "lq", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	sch := pgx.Identifier{s.b.Schema}.Sanitize()
	_, err = s.b.Pool.Exec(ctx, fmt.Sprintf("SELECT %s.job_step_save($1, $2, 'charge', '{\"id\": 7}')", sch), res.ID, jobs[0].LeaseToken)
	require.NoError(t, err)
	_, err = s.b.Pool.Exec(ctx, fmt.Sprintf("SELECT * FROM %s.job_fail($1, $2, 'boom', p_log => 'first line\nsecond line')", sch),
		res.ID, jobs[0].LeaseToken)
	require.NoError(t, err)
	text := s.ok("", "queue", "job", id, "--logs")
	require.Regexp(t, `step charge, attempt 1\s+\S+ \{"id": 7\}`, text)
	require.Contains(t, text, "--- log, attempt 1 (retrying)")
	require.Contains(t, text, "first line\nsecond line\n")
	require.NotContains(t, s.ok("", "queue", "job", id), "first line", "logs only with --logs")
	var j struct {
		State string          `json:"state"`
		Logs  []pgmsg.JobLog  `json:"logs"`
		Steps []pgmsg.JobStep `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "job", id, "--logs", "-o", "json")), &j))
	require.Equal(t, "retrying", j.State)
	require.Len(t, j.Logs, 1)
	require.Equal(t, "retrying", j.Logs[0].Outcome)
	require.Len(t, j.Steps, 1)
	require.JSONEq(t, `{"id": 7}`, string(j.Steps[0].Output))
}

// queue batch enqueue reads a batch from stdin; queue batch show shows its
// progress and, once its job completed, the callback enqueued.
func TestQueueBatchCLI(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	out := s.ok(`{"jobs": [{"payload": {"n": 1}, "kind": "img"}], "on_complete": {"kind": "report", "args": {"album": 7}}}`,
		"queue", "batch", "enqueue", "bq", "-o", "json")
	var res struct {
		ID   int64 `json:"batch_id"`
		Jobs []struct {
			ID int64 `json:"id"`
		} `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Len(t, res.Jobs, 1)
	id := strconv.FormatInt(res.ID, 10)
	// queue job shows the job's batch, live and (below) archived.
	jobID := strconv.FormatInt(res.Jobs[0].ID, 10)
	batchRow := `(?m)^batch\s+` + id + ` \(pgmsg queue batch show ` + id + `\)$`
	require.Regexp(t, batchRow, s.ok("", "queue", "job", jobID))
	var one struct {
		BatchID int64 `json:"batch_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "job", jobID, "-o", "json")), &one))
	require.Equal(t, res.ID, one.BatchID)
	// queue jobs -o json lists the job with its batch (job_list's
	// batch_id), live and (below) archived.
	listed := func() map[int64]int64 {
		t.Helper()
		var jobs []struct {
			ID      int64 `json:"id"`
			BatchID int64 `json:"batch_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "jobs", "bq", "-o", "json")), &jobs))
		out := map[int64]int64{}
		for _, j := range jobs {
			out[j.ID] = j.BatchID
		}
		return out
	}
	require.Equal(t, map[int64]int64{res.Jobs[0].ID: res.ID}, listed())
	text := s.ok("", "queue", "batch", "show", id)
	require.Regexp(t, `available 1`, text)
	require.Contains(t, text, "not enqueued")

	c, err := pgmsg.NewClient(s.b.Pool, &pgmsg.Config{Schema: s.b.Schema})
	require.NoError(t, err)
	defer c.Close()
	jobs, err := c.ClaimJobs(context.Background(), "bq", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, c.Complete(context.Background(), jobs[0]))
	require.Regexp(t, batchRow, s.ok("", "queue", "job", jobID), "the archive keeps the batch")
	var b pgmsg.Batch
	require.NoError(t, json.Unmarshal([]byte(s.ok("", "queue", "batch", "show", id, "-o", "json")), &b))
	require.EqualValues(t, 1, b.Completed)
	require.NotZero(t, b.CompleteJobID)
	require.Equal(t, map[int64]int64{res.Jobs[0].ID: res.ID, b.CompleteJobID: 0}, listed(),
		"the archived job keeps its batch in the list; the callback job (enqueued in bq) is of none")
	require.Contains(t, s.ok("", "queue", "batch", "show", id), "job "+strconv.FormatInt(b.CompleteJobID, 10))

	require.Contains(t, s.fail(`{"jobs": [{}], "on_discard": {"queue": "x"}}`, "queue", "batch", "enqueue", "bq"), "invalid batch callback")
	require.Contains(t, s.fail(`{"jobs": []}`, "queue", "batch", "enqueue", "bq"), "empty batch")
	require.Contains(t, s.fail(`{"jobs": [], "x": 1}`, "queue", "batch", "enqueue", "bq"), "not a batch")
	require.Contains(t, s.fail("", "queue", "batch", "show", "999999"), "unknown batch")
}
