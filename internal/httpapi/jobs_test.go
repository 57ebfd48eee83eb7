package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// A queue's job_timeout and a job's own timeout over HTTP: set on create,
// on enqueue, read back on claim; "0s" in a PATCH removes the queue's.
func TestJobTimeoutHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	var qs QueueSettings
	r := tb.do(t, http.MethodPost, "/v1/queues", tb.admin, map[string]any{"name": "tq", "job_timeout": "45s"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	r.json(t, &qs)
	require.Equal(t, 45*time.Second, time.Duration(*qs.JobTimeout))

	r = tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, map[string]any{"queue": "tq", "jobs": []map[string]any{
		{"payload": 1}, {"payload": 2, "timeout": "2m"}}})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var claimed struct {
		Jobs []struct {
			Timeout string `json:"timeout"`
		} `json:"jobs"`
	}
	r = tb.do(t, http.MethodGet, "/v1/queue/claim?queue=tq&max=2", tb.admin, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	r.json(t, &claimed)
	require.Len(t, claimed.Jobs, 2)
	require.ElementsMatch(t, []string{"45s", "2m0s"}, []string{claimed.Jobs[0].Timeout, claimed.Jobs[1].Timeout})

	r = tb.do(t, http.MethodPatch, "/v1/queues/tq", tb.admin, map[string]any{"job_timeout": "0s"})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	r.json(t, &qs)
	require.Zero(t, *qs.JobTimeout)

	for _, body := range []map[string]any{
		{"queue": "tq", "jobs": []map[string]any{{"payload": 1, "timeout": "0s"}}},
		{"queue": "tq", "jobs": []map[string]any{{"payload": 1, "timeout": "9000h"}}},
	} {
		r = tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, body)
		require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	}
	r = tb.do(t, http.MethodPatch, "/v1/queues/tq", tb.admin, map[string]any{"job_timeout": "9000h"})
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
}

// dead_retention over HTTP: set, read back, "0s" in a PATCH keeps dead
// jobs again, a negative one is refused.
func TestDeadRetentionHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	var qs QueueSettings
	r := tb.do(t, http.MethodPost, "/v1/queues", tb.admin, map[string]any{"name": "dq", "dead_retention": "720h"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	r.json(t, &qs)
	require.Equal(t, 720*time.Hour, time.Duration(*qs.DeadRetention))
	r = tb.do(t, http.MethodPatch, "/v1/queues/dq", tb.admin, map[string]any{"dead_retention": "0s"})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	r.json(t, &qs)
	require.Zero(t, *qs.DeadRetention)
	r = tb.do(t, http.MethodPatch, "/v1/queues/dq", tb.admin, map[string]any{"dead_retention": "-1h"})
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
}

// GET /v1/jobs/{id}: a live job and an archived one, with their payloads
// in the encoding asked for; unknown and bad ids; admin only.
func TestGetJobHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res, err := tb.client.Enqueue(tb.ctx, "gq", pgmsg.EnqueueParams{Payload: []byte(`{"n":1}`), Kind: "k", Timeout: time.Minute}, nil)
	require.NoError(t, err)
	var j struct {
		ID              int64           `json:"id"`
		State           string          `json:"state"`
		Kind            string          `json:"kind"`
		Payload         json.RawMessage `json:"payload"`
		PayloadEncoding string          `json:"payload_encoding"`
		Timeout         string          `json:"timeout"`
		AttemptedAt     *time.Time      `json:"attempted_at"`
		Worker          string          `json:"worker"`
	}
	r := tb.do(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%d", res.ID), tb.admin, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	r.json(t, &j)
	require.Equal(t, res.ID, j.ID)
	require.Equal(t, "available", j.State)
	require.Equal(t, "k", j.Kind)
	require.JSONEq(t, `{"n":1}`, string(j.Payload))
	require.Equal(t, "1m0s", j.Timeout)
	require.Nil(t, j.AttemptedAt, "never attempted")
	require.Empty(t, j.Worker)
	tb.do(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%d?encoding=base64", res.ID), tb.admin, nil).json(t, &j)
	require.Equal(t, "base64", j.PayloadEncoding)

	jobs, err := tb.client.ClaimJobs(tb.ctx, "gq", &pgmsg.ClaimJobsOpts{Worker: "w-7"})
	require.NoError(t, err)
	tb.do(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%d", res.ID), tb.admin, nil).json(t, &j)
	require.Equal(t, "running", j.State)
	require.NotNil(t, j.AttemptedAt, "the attempt's start")
	require.Equal(t, "w-7", j.Worker)
	require.NoError(t, tb.client.Complete(tb.ctx, jobs[0]))
	j.AttemptedAt, j.Worker = nil, ""
	tb.do(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%d", res.ID), tb.admin, nil).json(t, &j)
	require.Equal(t, "completed", j.State)
	require.NotNil(t, j.AttemptedAt, "an archived job keeps its last attempt's start")
	require.Empty(t, j.Worker, "the archive keeps no worker")

	require.Equal(t, "unknown_job", tb.do(t, http.MethodGet, "/v1/jobs/999999", tb.admin, nil).errorCode(t))
	require.Equal(t, http.StatusBadRequest, tb.do(t, http.MethodGet, "/v1/jobs/abc", tb.admin, nil).status)
	require.Equal(t, http.StatusBadRequest, tb.do(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%d?encoding=hex", res.ID), tb.admin, nil).status)
	claimer := tb.token(t, "claimer", "claim:gq")
	require.Equal(t, http.StatusForbidden, tb.do(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%d", res.ID), claimer, nil).status)
}

// A job's batch_id over HTTP: in GET /v1/jobs/{id} and the job list, live
// and archived; absent for a job of no batch.
func TestJobBatchIDHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	r := tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, map[string]any{"queue": "bh", "jobs": []map[string]any{{"payload": 0}}})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var plain struct {
		Jobs []struct {
			ID int64 `json:"id"`
		} `json:"jobs"`
	}
	r.json(t, &plain)
	require.Len(t, plain.Jobs, 1)
	r = tb.do(t, http.MethodPost, "/v1/queues/bh/batches", tb.admin, map[string]any{"jobs": []map[string]any{{"payload": 1}, {"payload": 2}}})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var batch struct {
		BatchID int64 `json:"batch_id"`
		Jobs    []struct {
			ID int64 `json:"id"`
		} `json:"jobs"`
	}
	r.json(t, &batch)
	require.NotZero(t, batch.BatchID)
	require.Len(t, batch.Jobs, 2)
	want := map[int64]int64{plain.Jobs[0].ID: 0, batch.Jobs[0].ID: batch.BatchID, batch.Jobs[1].ID: batch.BatchID}

	check := func(what string) {
		t.Helper()
		for id, b := range want {
			var one map[string]json.RawMessage
			tb.do(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%d", id), tb.admin, nil).json(t, &one)
			if b == 0 {
				require.NotContains(t, one, "batch_id", "%s: job %d of no batch", what, id)
				continue
			}
			require.JSONEq(t, fmt.Sprint(b), string(one["batch_id"]), "%s: job %d", what, id)
		}
		var list struct {
			Jobs []struct {
				ID      int64 `json:"id"`
				BatchID int64 `json:"batch_id"`
			} `json:"jobs"`
		}
		tb.do(t, http.MethodGet, "/v1/queues/bh/jobs", tb.admin, nil).json(t, &list)
		got := map[int64]int64{}
		for _, j := range list.Jobs {
			got[j.ID] = j.BatchID
		}
		require.Equal(t, want, got, "%s: the job list", what)
	}
	check("live")
	jobs, err := tb.client.ClaimJobs(tb.ctx, "bh", &pgmsg.ClaimJobsOpts{Max: 3})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	for _, j := range jobs {
		require.NoError(t, tb.client.Complete(tb.ctx, j))
	}
	check("archived")
}
