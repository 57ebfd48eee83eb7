package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

func publishBody(topic string, values ...string) map[string]any {
	recs := []map[string]any{}
	for _, v := range values {
		recs = append(recs, map[string]any{"value": v})
	}
	return map[string]any{"topic": topic, "encoding": "text", "records": recs}
}

func TestAuthRejects(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{TokenCacheTTL: -1})
	tb.topic(t, "orders.eu", 1)
	tb.topic(t, "payments", 1)
	pub := tb.token(t, "pub", "publish:orders.*")

	t.Run("Missing", func(t *testing.T) {
		res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", "", publishBody("orders.eu", "x"))
		require.Equal(t, http.StatusUnauthorized, res.status)
		require.Equal(t, "unauthorized", res.errorCode(t))
		require.Contains(t, res.header.Get("WWW-Authenticate"), "Bearer")
	})
	t.Run("Malformed", func(t *testing.T) {
		req, err := http.NewRequestWithContext(tb.ctx, http.MethodGet, tb.ts.URL+"/v1/topics", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Basic dXNlcjpwYXNz")
		res, err := tb.ts.Client().Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	})
	t.Run("Wrong", func(t *testing.T) {
		for _, tok := range []string{"pgm_notarealtokennotarealtokennotarealtoken", "garbage", pub + "x"} {
			res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", tok, publishBody("orders.eu", "x"))
			require.Equal(t, http.StatusUnauthorized, res.status, tok)
			require.Equal(t, "invalid_token", res.errorCode(t))
		}
	})
	t.Run("Revoked", func(t *testing.T) {
		secret, tok, err := tb.client.CreateToken(tb.ctx, "to-revoke", []string{pgmsg.ScopeAdmin}, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, tb.do(t, http.MethodGet, "/v1/topics", secret, nil).status)
		require.NoError(t, tb.client.RevokeToken(tb.ctx, tok.ID))
		res := tb.do(t, http.MethodGet, "/v1/topics", secret, nil)
		require.Equal(t, http.StatusUnauthorized, res.status)
		require.Equal(t, "invalid_token", res.errorCode(t))
		require.ErrorIs(t, tb.client.RevokeToken(tb.ctx, tok.ID), pgmsg.ErrUnknownToken)
	})
	t.Run("Expired", func(t *testing.T) {
		secret, tok, err := tb.client.CreateToken(tb.ctx, "to-expire", []string{pgmsg.ScopeAdmin}, nil)
		require.NoError(t, err)
		_, err = tb.Pool.Exec(tb.ctx, `UPDATE "`+tb.Schema+`".token SET expires_at = now() - interval '1 second' WHERE token_id = $1`, tok.ID)
		require.NoError(t, err)
		res := tb.do(t, http.MethodGet, "/v1/topics", secret, nil)
		require.Equal(t, http.StatusUnauthorized, res.status)
	})
	t.Run("OutOfScope", func(t *testing.T) {
		res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", pub, publishBody("payments", "x"))
		require.Equal(t, http.StatusForbidden, res.status)
		require.Equal(t, "forbidden", res.errorCode(t))
		res = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=orders.eu&group=g", pub, nil)
		require.Equal(t, http.StatusForbidden, res.status, "publish does not grant consume")
		res = tb.do(t, http.MethodGet, "/v1/topics", pub, nil)
		require.Equal(t, http.StatusForbidden, res.status, "admin endpoints need admin")
		res = tb.do(t, http.MethodPost, "/v1/queue/enqueue", pub, map[string]any{"queue": "orders.eu", "jobs": []any{map[string]any{"payload": 1}}})
		require.Equal(t, http.StatusForbidden, res.status, "publish does not grant enqueue")
		// Nothing was written by the refused requests.
		d, err := tb.client.DescribeTopic(tb.ctx, "payments")
		require.NoError(t, err)
		require.Zero(t, d.PartitionInfo[0].NextOffset)
		gs, err := tb.client.ListGroups(tb.ctx, "orders.eu", "")
		require.NoError(t, err)
		require.Empty(t, gs)
		// In scope: allowed.
		res = tb.do(t, http.MethodPost, "/v1/pubsub/publish", pub, publishBody("orders.eu", "x"))
		require.Equal(t, http.StatusOK, res.status, string(res.body))
	})
	t.Run("JobOfAnotherQueue", func(t *testing.T) {
		worker := tb.token(t, "worker-a", "claim:a")
		_, err := tb.client.Enqueue(tb.ctx, "b", pgmsg.EnqueueParams{Payload: []byte("x")}, nil)
		require.NoError(t, err)
		jobs, err := tb.client.ClaimJobs(tb.ctx, "b", nil)
		require.NoError(t, err)
		// A job of another queue is answered as one that does not exist:
		// the token learns nothing of other queues' job ids.
		res := tb.do(t, http.MethodPost, "/v1/queue/ack", worker, map[string]any{"queue": "a", "id": jobs[0].ID, "lease_token": jobs[0].LeaseToken})
		missing := tb.do(t, http.MethodPost, "/v1/queue/ack", worker, map[string]any{"queue": "a", "id": jobs[0].ID + 1000, "lease_token": 1})
		require.Equal(t, http.StatusNotFound, res.status, "%s", res.body)
		require.Equal(t, missing.status, res.status)
		require.Equal(t, missing.errorCode(t), res.errorCode(t))
		require.Equal(t, strings.ReplaceAll(string(missing.body), strconv.FormatInt(jobs[0].ID+1000, 10), "ID"),
			strings.ReplaceAll(string(res.body), strconv.FormatInt(jobs[0].ID, 10), "ID"))
		res = tb.do(t, http.MethodPost, "/v1/queue/ack", worker, map[string]any{"queue": "b", "id": jobs[0].ID, "lease_token": jobs[0].LeaseToken})
		require.Equal(t, http.StatusForbidden, res.status)
		j, err := tb.client.GetJob(tb.ctx, jobs[0].ID)
		require.NoError(t, err)
		require.Equal(t, pgmsg.JobStateRunning, j.State)
	})
	t.Run("PublicEndpoints", func(t *testing.T) {
		require.Equal(t, http.StatusOK, tb.do(t, http.MethodGet, "/healthz", "", nil).status)
		require.Equal(t, http.StatusOK, tb.do(t, http.MethodGet, "/readyz", "", nil).status)
		require.Equal(t, http.StatusOK, tb.do(t, http.MethodGet, "/metrics", "", nil).status)
	})
}

func TestTokenScopes(t *testing.T) {
	t.Parallel()
	tok := &pgmsg.Token{Scopes: []string{"publish:orders.*", "consume:audit", "claim:*"}}
	require.True(t, tok.Allows(pgmsg.ScopePublish, "orders.eu"))
	require.True(t, tok.Allows(pgmsg.ScopePublish, "orders."))
	require.False(t, tok.Allows(pgmsg.ScopePublish, "orders"))
	require.False(t, tok.Allows(pgmsg.ScopeConsume, "orders.eu"))
	require.True(t, tok.Allows(pgmsg.ScopeConsume, "audit"))
	require.False(t, tok.Allows(pgmsg.ScopeConsume, "audit2"))
	require.True(t, tok.Allows(pgmsg.ScopeClaim, "anything"))
	require.False(t, tok.Allows(pgmsg.ScopeAdmin, ""))
	require.True(t, (&pgmsg.Token{Scopes: []string{"admin"}}).Allows(pgmsg.ScopeEnqueue, "x"))
	for _, bad := range []string{"", "publish", "publish:", "write:x", "publish:a b", "admin:x"} {
		require.ErrorIs(t, pgmsg.ValidateScope(bad), pgmsg.ErrInvalidArgument, bad)
	}
	require.True(t, pgmsg.MatchPattern("a*b*c", "axxbyyc"))
	require.False(t, pgmsg.MatchPattern("a*b*c", "axxbyy"))
}

func TestTokenAPI(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	secret, tok, err := tb.client.CreateToken(tb.ctx, "svc", []string{"publish:x", "consume:*"}, nil)
	require.NoError(t, err)
	require.Contains(t, secret, "pgm_")
	require.Equal(t, secret[:len(tok.Prefix)], tok.Prefix)
	_, _, err = tb.client.CreateToken(tb.ctx, "svc", []string{"admin"}, nil)
	require.ErrorIs(t, err, pgmsg.ErrTokenExists)
	_, _, err = tb.client.CreateToken(tb.ctx, "bad name", []string{"admin"}, nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidName)
	_, _, err = tb.client.CreateToken(tb.ctx, "x", []string{"root"}, nil)
	require.ErrorIs(t, err, pgmsg.ErrInvalidArgument)
	got, err := tb.client.VerifyToken(tb.ctx, secret)
	require.NoError(t, err)
	require.Equal(t, tok.ID, got.ID)
	require.NotNil(t, got.LastUsedAt)
	var stored []byte
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT token_hash FROM "`+tb.Schema+`".token WHERE token_id = $1`, tok.ID).Scan(&stored))
	require.Equal(t, pgmsg.HashToken(secret), stored)
	require.NotContains(t, string(stored), secret, "only the hash is stored")
	ts, err := tb.client.ListTokens(tb.ctx)
	require.NoError(t, err)
	require.Len(t, ts, 2) // admin from setup, svc
	require.NoError(t, tb.client.RevokeToken(tb.ctx, tok.ID))
	_, err = tb.client.VerifyToken(tb.ctx, secret)
	require.ErrorIs(t, err, pgmsg.ErrInvalidToken)
	// A revoked token's name may be reused.
	_, _, err = tb.client.CreateToken(tb.ctx, "svc", []string{"admin"}, nil)
	require.NoError(t, err)
}

// TestRevocationWithCache: with the token cache on, a revoked token is
// refused once the cache entry ages out (within TokenCacheTTL).
func TestRevocationWithCache(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{TokenCacheTTL: 200 * time.Millisecond})
	secret, tok, err := tb.client.CreateToken(tb.ctx, "cached", []string{pgmsg.ScopeAdmin}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodGet, "/v1/topics", secret, nil).status)
	require.NoError(t, tb.client.RevokeToken(tb.ctx, tok.ID))
	require.Eventually(t, func() bool {
		return tb.do(t, http.MethodGet, "/v1/topics", secret, nil).status == http.StatusUnauthorized
	}, 10*time.Second, 50*time.Millisecond)
}

// A consume scope can name the groups it may use: such a token consumes,
// commits and releases as a matching group only, and the SQL API stores
// the scope (its own shape check accepts it).
func TestGroupScopes(t *testing.T) {
	t.Parallel()
	tok := &pgmsg.Token{Scopes: []string{"consume:orders/group:billing", "consume:audit.*/group:team-*"}}
	require.True(t, tok.AllowsGroup("orders", "billing"))
	require.False(t, tok.AllowsGroup("orders", "audit"))
	require.True(t, tok.AllowsGroup("audit.eu", "team-a"))
	require.False(t, tok.AllowsGroup("audit.eu", "ops"))
	require.False(t, tok.Allows(pgmsg.ScopeConsume, "orders"), "a group-scoped consume does not allow every group")
	require.True(t, (&pgmsg.Token{Scopes: []string{"consume:orders"}}).AllowsGroup("orders", "anyone"))
	require.True(t, (&pgmsg.Token{Scopes: []string{"admin"}}).AllowsGroup("orders", "anyone"))
	require.False(t, (&pgmsg.Token{Scopes: []string{"publish:orders"}}).AllowsGroup("orders", "anyone"))
	for _, ok := range []string{"consume:orders/group:billing", "consume:*/group:*"} {
		require.NoError(t, pgmsg.ValidateScope(ok), ok)
	}
	for _, bad := range []string{"publish:orders/group:x", "consume:orders/group:", "consume:/group:x", "consume:orders/group:a b", "consume:orders/groups:x"} {
		require.ErrorIs(t, pgmsg.ValidateScope(bad), pgmsg.ErrInvalidArgument, bad)
	}

	tb := setup(t, &Config{TokenCacheTTL: -1})
	tb.topic(t, "orders", 1)
	billing := tb.token(t, "billing", "consume:orders/group:billing")
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "orders", Value: []byte("1")}}, nil))
	consume := func(group string) response {
		return tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=orders&group="+group+"&wait=1s", billing, nil)
	}
	res := consume("audit")
	require.Equal(t, http.StatusForbidden, res.status)
	require.Equal(t, "forbidden", res.errorCode(t))
	res = consume("billing")
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var got ConsumeResponse
	res.json(t, &got)
	require.NotNil(t, got.Claim)
	claim := map[string]any{"topic": "orders", "group": "audit", "partition": got.Claim.Partition, "epoch": got.Claim.Epoch}
	require.Equal(t, http.StatusForbidden, tb.do(t, http.MethodPost, "/v1/pubsub/commit", billing, claim).status)
	claim["group"] = "billing"
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodPost, "/v1/pubsub/commit", billing, claim).status)

	// The SQL API checks the shape too (a client that skips ValidateScope).
	_, err := tb.Pool.Exec(tb.ctx, "SELECT "+pgx.Identifier{tb.Schema}.Sanitize()+".token_create('raw', sha256('x'), 'pgm_raw', ARRAY['consume:orders/group:'], NULL)")
	require.ErrorIs(t, pgmsg.MapError(err), pgmsg.ErrInvalidArgument)
}
