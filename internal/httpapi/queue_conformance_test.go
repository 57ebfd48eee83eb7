package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// queueScenarios are the conformance scenarios of the job queue:
//
//   - EnqueueClaimAck: jobs come out by priority, each to one claimer;
//     acked jobs are archived and a second ack is job_not_held.
//   - FailToDeadAndRequeue: a job out of attempts goes dead with its error;
//     requeued, it is claimable again.
//   - UniqueKeyDeduplicates: a second enqueue with a live job's unique key
//     reports the existing job.
//   - DelayedJobWaits: a delayed job is scheduled, not claimable.
//   - ClaimWaitsForEnqueue: a waiting claim returns a job enqueued meanwhile.
//   - QueueErrorsAgree: unknown queue, empty batch, bad priority.
var queueScenarios = []struct {
	name string
	run  func(t *testing.T, tb *testBundle, d driver)
}{
	{"EnqueueClaimAck", scenarioEnqueueClaimAck},
	{"FailToDeadAndRequeue", scenarioFailToDead},
	{"UniqueKeyDeduplicates", scenarioUniqueKey},
	{"DelayedJobWaits", scenarioDelayed},
	{"ClaimWaitsForEnqueue", scenarioClaimWaits},
	{"QueueErrorsAgree", scenarioQueueErrors},
}

// cjob is a job as the scenarios see it.
type cjob struct {
	ID         int64
	Queue      string
	Payload    string
	Priority   int
	Attempt    int
	LeaseToken int64
	Duplicate  bool
}

type queueDriver interface {
	enqueue(queue string, jobs []pgmsg.EnqueueParams) ([]cjob, string)
	claimJobs(queue string, max int, wait time.Duration) ([]cjob, string)
	ack(j cjob) string
	fail(j cjob, msg string) (pgmsg.JobState, string)
	requeueDead(queue string) (int64, string)
}

func (d libDriver) enqueue(queue string, jobs []pgmsg.EnqueueParams) ([]cjob, string) {
	res, err := d.c.EnqueueMany(d.ctx, queue, jobs, nil)
	if err != nil {
		return nil, codeOf(err)
	}
	out := make([]cjob, len(res))
	for i, r := range res {
		out[i] = cjob{ID: r.ID, Queue: queue, Duplicate: r.Duplicate}
	}
	return out, ""
}

func (d libDriver) claimJobs(queue string, max int, wait time.Duration) ([]cjob, string) {
	deadline := time.Now().Add(wait)
	for {
		jobs, err := d.c.ClaimJobs(d.ctx, queue, &pgmsg.ClaimJobsOpts{Max: max})
		if err != nil {
			return nil, codeOf(err)
		}
		if len(jobs) > 0 || time.Now().After(deadline) {
			out := make([]cjob, len(jobs))
			for i, j := range jobs {
				out[i] = cjob{ID: j.ID, Queue: j.Queue, Payload: string(j.Payload), Priority: j.Priority, Attempt: j.Attempt, LeaseToken: j.LeaseToken}
			}
			return out, ""
		}
		select {
		case <-d.ctx.Done():
			return nil, codeOf(d.ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (d libDriver) job(j cjob) *pgmsg.Job {
	return &pgmsg.Job{ID: j.ID, Queue: j.Queue, LeaseToken: j.LeaseToken}
}

func (d libDriver) ack(j cjob) string { return codeOf(d.c.Complete(d.ctx, d.job(j))) }

func (d libDriver) fail(j cjob, msg string) (pgmsg.JobState, string) {
	res, err := d.c.Fail(d.ctx, d.job(j), errors.New(msg), nil)
	if err != nil {
		return "", codeOf(err)
	}
	return res.State, ""
}

func (d libDriver) requeueDead(queue string) (int64, string) {
	n, err := d.c.RequeueDeadJobs(d.ctx, queue, nil)
	return n, codeOf(err)
}

func (d httpDriver) enqueue(queue string, jobs []pgmsg.EnqueueParams) ([]cjob, string) {
	req := EnqueueRequest{Queue: queue, Encoding: wire.EncodingText}
	for _, j := range jobs {
		ej := EnqueueJob{Payload: []byte(strconv.Quote(string(j.Payload))), Kind: j.Kind, Priority: j.Priority,
			MaxAttempts: j.MaxAttempts, UniqueKey: j.UniqueKey}
		if j.Delay != 0 {
			dd := Duration(j.Delay)
			ej.Delay = &dd
		}
		req.Jobs = append(req.Jobs, ej)
	}
	res := d.tb.do(d.t, http.MethodPost, "/v1/queue/enqueue", d.token, req)
	if code := d.errCode(res); code != "" {
		return nil, code
	}
	var body struct {
		Jobs []pgmsg.EnqueueResult `json:"jobs"`
	}
	res.json(d.t, &body)
	out := make([]cjob, len(body.Jobs))
	for i, r := range body.Jobs {
		out[i] = cjob{ID: r.ID, Queue: queue, Duplicate: r.Duplicate}
	}
	return out, ""
}

func (d httpDriver) claimJobs(queue string, max int, wait time.Duration) ([]cjob, string) {
	q := url.Values{"queue": {queue}, "max": {strconv.Itoa(max)}, "encoding": {wire.EncodingText}}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	res := d.tb.do(d.t, http.MethodGet, "/v1/queue/claim?"+q.Encode(), d.token, nil)
	if code := d.errCode(res); code != "" {
		return nil, code
	}
	var body struct {
		Jobs []wire.JobJSON `json:"jobs"`
	}
	res.json(d.t, &body)
	out := make([]cjob, len(body.Jobs))
	for i, j := range body.Jobs {
		p, err := strconv.Unquote(string(j.Payload))
		require.NoError(d.t, err)
		out[i] = cjob{ID: j.ID, Queue: j.Queue, Payload: p, Priority: j.Priority, Attempt: j.Attempt, LeaseToken: j.LeaseToken}
	}
	return out, ""
}

func (d httpDriver) jobBody(j cjob) JobRequest {
	id, lt := j.ID, j.LeaseToken
	return JobRequest{Queue: j.Queue, ID: &id, LeaseToken: &lt}
}

func (d httpDriver) ack(j cjob) string {
	return d.errCode(d.tb.do(d.t, http.MethodPost, "/v1/queue/ack", d.token, d.jobBody(j)))
}

func (d httpDriver) fail(j cjob, msg string) (pgmsg.JobState, string) {
	body := d.jobBody(j)
	body.Error = msg
	res := d.tb.do(d.t, http.MethodPost, "/v1/queue/fail", d.token, body)
	if code := d.errCode(res); code != "" {
		return "", code
	}
	var out struct {
		State pgmsg.JobState `json:"state"`
	}
	res.json(d.t, &out)
	return out.State, ""
}

func (d httpDriver) requeueDead(queue string) (int64, string) {
	res := d.tb.do(d.t, http.MethodPost, "/v1/queues/"+queue+"/dead/requeue", d.token, DeadJobsRequest{})
	if code := d.errCode(res); code != "" {
		return 0, code
	}
	var out struct {
		Requeued int64 `json:"requeued"`
	}
	res.json(d.t, &out)
	return out.Requeued, ""
}

func qd(t *testing.T, d driver) queueDriver {
	t.Helper()
	q, ok := d.(queueDriver)
	require.True(t, ok)
	return q
}

func scenarioEnqueueClaimAck(t *testing.T, tb *testBundle, d driver) {
	q := qd(t, d)
	enq, code := q.enqueue("emails", []pgmsg.EnqueueParams{
		{Payload: []byte("low"), Priority: -1}, {Payload: []byte("high"), Priority: 5}, {Payload: []byte("mid")},
	})
	require.Empty(t, code)
	require.Len(t, enq, 3)
	first, code := q.claimJobs("emails", 2, 0)
	require.Empty(t, code)
	require.Len(t, first, 2)
	require.Equal(t, "high", first[0].Payload)
	require.Equal(t, "mid", first[1].Payload)
	require.Equal(t, 1, first[0].Attempt)
	rest, _ := q.claimJobs("emails", 10, 0)
	require.Len(t, rest, 1, "claimed jobs are not handed out twice")
	require.Equal(t, "low", rest[0].Payload)
	for _, j := range append(first, rest...) {
		require.Empty(t, q.ack(j))
	}
	require.Equal(t, "job_not_held", q.ack(first[0]))
	none, _ := q.claimJobs("emails", 10, 0)
	require.Empty(t, none)
	st, err := tb.client.QueueStats(tb.ctx, "emails")
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Archived)
	require.Zero(t, st.Available+st.Running)
}

func scenarioFailToDead(t *testing.T, tb *testBundle, d driver) {
	q := qd(t, d)
	_, code := q.enqueue("q", []pgmsg.EnqueueParams{{Payload: []byte("x"), MaxAttempts: 1}})
	require.Empty(t, code)
	jobs, _ := q.claimJobs("q", 1, 0)
	require.Len(t, jobs, 1)
	state, code := q.fail(jobs[0], "smtp down")
	require.Empty(t, code)
	require.Equal(t, pgmsg.JobStateDead, state)
	dead, err := tb.client.ListDeadJobs(tb.ctx, "q", nil)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "smtp down", dead[0].Errors[0].Error)
	n, code := q.requeueDead("q")
	require.Empty(t, code)
	require.Equal(t, int64(1), n)
	again, _ := q.claimJobs("q", 1, 0)
	require.Len(t, again, 1)
	require.Equal(t, jobs[0].ID, again[0].ID)
}

func scenarioUniqueKey(t *testing.T, tb *testBundle, d driver) {
	q := qd(t, d)
	a, code := q.enqueue("q", []pgmsg.EnqueueParams{{Payload: []byte("1"), UniqueKey: "user-7"}})
	require.Empty(t, code)
	b, code := q.enqueue("q", []pgmsg.EnqueueParams{{Payload: []byte("2"), UniqueKey: "user-7"}})
	require.Empty(t, code)
	require.False(t, a[0].Duplicate)
	require.True(t, b[0].Duplicate)
	require.Equal(t, a[0].ID, b[0].ID)
}

func scenarioDelayed(t *testing.T, tb *testBundle, d driver) {
	q := qd(t, d)
	_, code := q.enqueue("q", []pgmsg.EnqueueParams{{Payload: []byte("later"), Delay: time.Hour}})
	require.Empty(t, code)
	jobs, _ := q.claimJobs("q", 1, 0)
	require.Empty(t, jobs)
	st, err := tb.client.QueueStats(tb.ctx, "q")
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Scheduled)
}

func scenarioClaimWaits(t *testing.T, tb *testBundle, d driver) {
	q := qd(t, d)
	_, err := tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{})
	require.NoError(t, err)
	type result struct {
		jobs []cjob
		code string
	}
	done := make(chan result, 1)
	go func() {
		jobs, code := q.claimJobs("q", 1, 20*time.Second)
		done <- result{jobs, code}
	}()
	_, code := q.enqueue("q", []pgmsg.EnqueueParams{{Payload: []byte("hello")}})
	require.Empty(t, code)
	select {
	case res := <-done:
		require.Empty(t, res.code)
		require.Len(t, res.jobs, 1)
		require.Equal(t, "hello", res.jobs[0].Payload)
	case <-tb.ctx.Done():
		t.Fatal("waiting claim did not return")
	}
}

func scenarioQueueErrors(t *testing.T, tb *testBundle, d driver) {
	q := qd(t, d)
	_, code := q.claimJobs("missing", 1, 0)
	require.Equal(t, "unknown_queue", code)
	_, code = q.enqueue("q", nil)
	require.Equal(t, "empty_batch", code)
	_, code = q.enqueue("q", []pgmsg.EnqueueParams{{Payload: []byte("x"), Priority: 40000}})
	require.Equal(t, "invalid_argument", code)
	_, code = q.enqueue("bad queue!", []pgmsg.EnqueueParams{{Payload: []byte("x")}})
	require.Equal(t, "invalid_name", code)
	_, code = q.requeueDead("missing")
	require.Equal(t, "unknown_queue", code)
}
