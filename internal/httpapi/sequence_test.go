package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// sequence_key on POST /v1/queue/enqueue, the sequences listing and resume.
func TestSequencesHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	var res struct {
		Jobs []struct {
			ID    int64  `json:"id"`
			State string `json:"state"`
		} `json:"jobs"`
	}
	tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, map[string]any{"queue": "sq", "jobs": []map[string]any{
		{"payload": 1, "sequence_key": "acct-1"}, {"payload": 2, "sequence_key": "acct-1"},
	}}).json(t, &res)
	require.Len(t, res.Jobs, 2)
	require.Equal(t, "available", res.Jobs[0].State)
	require.Equal(t, "pending", res.Jobs[1].State)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "sq", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	_, err = tb.client.Fail(tb.ctx, jobs[0], errors.New("no"), &pgmsg.FailOpts{Dead: true})
	require.NoError(t, err)

	var list struct {
		Sequences []pgmsg.Sequence `json:"sequences"`
	}
	tb.do(t, http.MethodGet, "/v1/queues/sq/sequences?held=true", tb.admin, nil).json(t, &list)
	require.Len(t, list.Sequences, 1)
	require.Equal(t, "acct-1", list.Sequences[0].Key)
	require.Equal(t, res.Jobs[0].ID, list.Sequences[0].HeldJobID)
	require.Equal(t, "dead", list.Sequences[0].HeldReason)
	var resumed struct {
		Resumed bool `json:"resumed"`
	}
	tb.do(t, http.MethodPost, "/v1/queues/sq/sequences/acct-1/resume", tb.admin, nil).json(t, &resumed)
	require.True(t, resumed.Resumed)
	j, err := tb.client.GetJob(tb.ctx, res.Jobs[1].ID)
	require.NoError(t, err)
	require.Equal(t, pgmsg.JobStateAvailable, j.State)
	tb.do(t, http.MethodPost, "/v1/queues/sq/sequences/acct-1/resume", tb.admin, nil).json(t, &resumed)
	require.False(t, resumed.Resumed)

	// A job's sequence key, alone and in the list.
	var one struct {
		SequenceKey string  `json:"sequence_key"`
		LimitKey    *string `json:"limit_key"`
	}
	tb.do(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%d", res.Jobs[1].ID), tb.admin, nil).json(t, &one)
	require.Equal(t, "acct-1", one.SequenceKey)
	require.Nil(t, one.LimitKey, "absent: none")
	var listed struct {
		Jobs []struct {
			ID          int64  `json:"id"`
			SequenceKey string `json:"sequence_key"`
		} `json:"jobs"`
	}
	tb.do(t, http.MethodGet, "/v1/queues/sq/jobs", tb.admin, nil).json(t, &listed)
	require.Len(t, listed.Jobs, 2)
	for _, j := range listed.Jobs {
		require.Equal(t, "acct-1", j.SequenceKey, "job %d", j.ID)
	}

	// Bad input: 400, nothing written.
	for _, j := range []map[string]any{
		{"payload": 1, "sequence_key": ""},
		{"payload": 1, "sequence_key": strings.Repeat("k", 201)},
		{"payload": 1, "sequence_continue": true},
	} {
		r := tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, map[string]any{"queue": "sq", "jobs": []map[string]any{{"payload": 0}, j}})
		require.Equal(t, http.StatusBadRequest, r.status, "%v: %s", j, r.body)
	}
	r := tb.do(t, http.MethodPost, "/v1/queues/sq/sequences/"+strings.Repeat("k", 201)+"/resume", tb.admin, nil)
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	r = tb.do(t, http.MethodGet, "/v1/queues/sq/sequences?limit=0", tb.admin, nil)
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	r = tb.do(t, http.MethodGet, "/v1/queues/nope/sequences", tb.admin, nil)
	require.Equal(t, http.StatusNotFound, r.status, string(r.body))
	st, err := tb.client.QueueStats(tb.ctx, "sq")
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Available, "only the resumed job waits")
}
