package pgmsg_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// fairJobs enqueues n jobs of tenant into queue in one batch, with the
// tenant's name as payload.
func (tb *testBundle) fairJobs(t *testing.T, queue, tenant string, n int) {
	t.Helper()
	ps := make([]pgmsg.EnqueueParams, n)
	for i := range ps {
		ps[i] = pgmsg.EnqueueParams{Payload: []byte(tenant), Tenant: tenant}
	}
	_, err := tb.client.EnqueueMany(tb.ctx, queue, ps, nil)
	require.NoError(t, err)
}

// claimOrder claims n jobs of queue one at a time, through the worker's
// direct claim or job_claim() (sqlFn), and returns their payloads.
func (tb *testBundle) claimOrder(t *testing.T, queue string, n int, sqlFn bool) []string {
	t.Helper()
	var out []string
	for range n {
		if sqlFn {
			var p string
			err := tb.Pool.QueryRow(tb.ctx, `SELECT convert_from(payload, 'UTF8') FROM `+
				pgx.Identifier{tb.Schema}.Sanitize()+`.job_claim($1)`, queue).Scan(&p)
			require.NoError(t, err)
			out = append(out, p)
			continue
		}
		jobs, err := tb.client.ClaimJobs(tb.ctx, queue, nil)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		out = append(out, string(jobs[0].Payload))
	}
	return out
}

// A tenant that enqueues after another's backlog is served at once, in
// turn with it, not after it: its jobs' virtual start tags are the queue's
// virtual time, the backlog's run on ahead. Both claim paths agree.
func TestFairShareBacklogDoesNotStarve(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for _, sqlFn := range []bool{false, true} {
		q := "fair-direct"
		if sqlFn {
			q = "fair-sql"
		}
		tb.fairJobs(t, q, "big", 100)
		tb.fairJobs(t, q, "small", 3)
		require.Equal(t, []string{"big", "small", "big", "small", "big", "small", "big", "big"},
			tb.claimOrder(t, q, 8, sqlFn), "sql %v", sqlFn)
	}
	ts, err := tb.client.ListTenants(tb.ctx, "fair-direct", nil)
	require.NoError(t, err)
	require.Len(t, ts, 2)
	require.Equal(t, "big", ts[0].Tenant)
	require.Equal(t, int64(100), ts[0].Enqueued)
	require.Equal(t, int64(95), ts[0].Waiting)
	require.Equal(t, 1.0, ts[0].Weight)
	require.Equal(t, 100.0, ts[0].FinishTag)
	require.Equal(t, "small", ts[1].Tenant)
	require.Equal(t, int64(0), ts[1].Waiting)
	require.Equal(t, 5.0, ts[1].VirtualTime, "the first waiting tag after the running ones: big's sixth job")
	page, err := tb.client.ListTenants(tb.ctx, "fair-direct", &pgmsg.ListTenantsOpts{Limit: 1, AfterTenant: "big"})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, "small", page[0].Tenant)
}

// Weights share the claims: weight 2 gets two jobs for one of weight 1.
// A job without a tenant in a fair queue is the default tenant's.
func TestFairShareWeights(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "fw", pgmsg.QueueConfig{})
	require.NoError(t, tb.client.SetTenantWeight(tb.ctx, "fw", "a", 2))
	ps := make([]pgmsg.EnqueueParams, 0, 20)
	for range 10 {
		ps = append(ps, pgmsg.EnqueueParams{Payload: []byte("a"), Tenant: "a"}, pgmsg.EnqueueParams{Payload: []byte("b"), Tenant: "b"})
	}
	_, err := tb.client.EnqueueMany(tb.ctx, "fw", ps, nil)
	require.NoError(t, err)
	got := tb.claimOrder(t, "fw", 9, false)
	require.Equal(t, 6, strings.Count(strings.Join(got, ""), "a"), "%v", got)
	_, err = tb.client.Enqueue(tb.ctx, "fw", pgmsg.EnqueueParams{Payload: []byte("none")}, nil)
	require.NoError(t, err)
	ts, err := tb.client.ListTenants(tb.ctx, "fw", nil)
	require.NoError(t, err)
	require.Equal(t, []string{"", "a", "b"}, []string{ts[0].Tenant, ts[1].Tenant, ts[2].Tenant})
	require.Equal(t, 2.0, ts[1].Weight)
}

// A queue becomes fair with its first job naming a tenant: the jobs
// already waiting are the default tenant's, at the head. A queue whose
// jobs never name one is not fair and claims as before.
func TestFairShareQueueBecomesFair(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.enqueueN(t, "plain", 3, func(int) pgmsg.EnqueueParams { return pgmsg.EnqueueParams{Payload: []byte("old")} })
	var fair bool
	s := pgx.Identifier{tb.Schema}.Sanitize()
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT fair FROM `+s+`.queue WHERE name = 'plain'`).Scan(&fair))
	require.False(t, fair)
	tb.fairJobs(t, "plain", "t1", 3)
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT fair FROM `+s+`.queue WHERE name = 'plain'`).Scan(&fair))
	require.True(t, fair)
	require.Equal(t, []string{"old", "old", "old", "t1", "t1", "t1"}, tb.claimOrder(t, "plain", 6, false))
}

// Sequences, per-key limits and retries keep working in a fair queue: a
// sequence's jobs run one at a time in order, and a retried job keeps its
// tag, at or before the queue's virtual time, so it is claimed next.
func TestFairShareWithSequencesAndRetries(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.EnqueueMany(tb.ctx, "fs", []pgmsg.EnqueueParams{
		{Payload: []byte("s1"), Tenant: "a", SequenceKey: "k"},
		{Payload: []byte("s2"), Tenant: "a", SequenceKey: "k"},
		{Payload: []byte("b1"), Tenant: "b"},
	}, nil)
	require.NoError(t, err)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "fs", &pgmsg.ClaimJobsOpts{Max: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 2, "s2 waits for s1")
	require.Equal(t, "s1", string(jobs[0].Payload))
	_, err = tb.client.Fail(tb.ctx, jobs[0], errors.New("boom"), nil)
	require.NoError(t, err)
	_, err = tb.Pool.Exec(tb.ctx, `UPDATE `+pgx.Identifier{tb.Schema}.Sanitize()+`.job SET run_at = now() WHERE id = $1`, jobs[0].ID)
	require.NoError(t, err)
	tb.fairJobs(t, "fs", "c", 2)
	require.Equal(t, []string{"s1", "c", "c"}, tb.claimOrder(t, "fs", 3, false))
}

// Bad tenants and weights are refused with their codes on every path,
// and nothing is stored.
func TestFairShareBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.queue(t, "fb", pgmsg.QueueConfig{})
	for _, tenant := range []string{strings.Repeat("t", pgmsg.TenantMaxBytes+1), "a b", "é", "x\n"} {
		_, err := tb.client.EnqueueMany(tb.ctx, "fb", []pgmsg.EnqueueParams{{Tenant: "ok"}, {Tenant: tenant}}, nil)
		require.ErrorIs(t, err, pgmsg.ErrInvalidTenant, "%q", tenant)
		require.ErrorIs(t, tb.client.SetTenantWeight(tb.ctx, "fb", tenant, 1), pgmsg.ErrInvalidTenant)
	}
	require.ErrorIs(t, tb.client.SetTenantWeight(tb.ctx, "fb", "", 1), pgmsg.ErrInvalidTenant)
	for _, w := range []float64{0, -1, math.NaN(), math.Inf(1), 0.0009, 1e7} {
		require.ErrorIs(t, tb.client.SetTenantWeight(tb.ctx, "fb", "a", w), pgmsg.ErrInvalidTenantWeight, "%v", w)
	}
	require.ErrorIs(t, tb.client.SetTenantWeight(tb.ctx, "nope", "a", 1), pgmsg.ErrUnknownQueue)
	_, err := tb.client.ListTenants(tb.ctx, "fb", &pgmsg.ListTenantsOpts{Limit: 10001})
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	for q, code := range map[string]string{
		`SELECT * FROM ` + s + `.enqueue('fb', 'x', p_tenant => '')`:                                           "PM118",
		`SELECT * FROM ` + s + `.enqueue('fb', 'x', p_tenant => repeat('t', 201))`:                             "PM118",
		`SELECT * FROM ` + s + `.enqueue_many('fb', ARRAY['x','y']::bytea[], p_tenants => ARRAY['ok', 'a b'])`: "PM118",
		`SELECT * FROM ` + s + `.enqueue_many('fb', ARRAY['x']::bytea[], p_tenants => ARRAY['a', 'b'])`:        "PM004",
		`SELECT ` + s + `.tenant_weight_set('fb', 'a', 0)`:                                                     "PM119",
		`SELECT ` + s + `.tenant_weight_set('fb', 'a', 'NaN')`:                                                 "PM119",
		`SELECT ` + s + `.tenant_weight_set('fb', 'a', 'Infinity')`:                                            "PM119",
		`SELECT ` + s + `.tenant_weight_set('fb', NULL, 1)`:                                                    "PM118",
		`SELECT ` + s + `.tenant_weight_set('nope', 'a', 1)`:                                                   "PM101",
		`SELECT * FROM ` + s + `.tenant_list('fb', p_limit => 0)`:                                              "PM004",
	} {
		_, err := tb.Pool.Exec(tb.ctx, q)
		require.Equal(t, code, sqlState(err), q)
	}
	ts, err := tb.client.ListTenants(tb.ctx, "fb", nil)
	require.NoError(t, err)
	require.Empty(t, ts)
	st, err := tb.client.QueueStats(tb.ctx, "fb")
	require.NoError(t, err)
	require.Zero(t, st.Available, "a refused batch writes nothing")
}

// job_claim() starts a session's positioned reads of a fair queue where
// the Go client's direct claims do (internal/queue, claimFairLag and
// claimFairDeepLag): at the largest tag claimed one to two 100 ms steps
// ago, and once per 100 ms at the one of one to two 1 s steps ago (a deep
// read), so that a job whose enqueue committed after the claims moved
// past its tag (a straggler) is found before the next read of the whole
// index. _fair_claim_from is that rule, on explicit times.
func TestFairClaimFromLags(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	fn := pgx.Identifier{tb.Schema}.Sanitize() + `._fair_claim_from($1, $2, $3)`
	var state *string
	from := func(nowMS int64, cur float64) *float64 {
		t.Helper()
		var pos *float64
		require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT state, pos FROM `+fn, state, nowMS, cur).Scan(&state, &pos))
		return pos
	}
	// The 100 ms steps alone: no deep read due (its last far ahead).
	far := "||||||9999999999999"
	state = &far
	require.Nil(t, from(0, 10), "no position a step old yet: the whole index")
	require.Nil(t, from(50, 20))
	require.Equal(t, 10.0, *from(100, 30), "a step: the position of the step before, not 30")
	require.Equal(t, 10.0, *from(150, 40), "between steps the old position holds")
	require.Equal(t, 30.0, *from(200, 40), "the position one step ago")

	// The deep read: a 1 s step behind, one claim per 100 ms.
	state = nil
	require.Nil(t, from(0, 5))
	require.Nil(t, from(100, 50), "no position a deep step old yet: a deep read reads the whole index")
	require.Equal(t, 5.0, *from(1000, 500), "a deep step (old 5) and a deep read due")
	require.Equal(t, 50.0, *from(1050, 600), "not a deep read: the next is due 100 ms after the last")
	require.Equal(t, 5.0, *from(1100, 600), "a deep read")
	require.Equal(t, 500.0, *from(1150, 700), "the lagged position between deep reads")
}
