package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// Timestamps outside the UTC years 0001..9999 were stored and
// then answered every consume with a 200 and an empty body.
func TestTimestampBoundsHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	for _, ts := range []string{"9999-12-31T23:59:59-23:59", "0000-01-01T00:00:00+23:59"} {
		res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin,
			fmt.Sprintf(`{"topic":"t","records":[{"value":1,"timestamp":%q}]}`, ts))
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", ts, res.body)
		require.Equal(t, "invalid_argument", res.errorCode(t))
		res = tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin,
			fmt.Sprintf(`{"queue":"q","jobs":[{"payload":1,"run_at":%q}]}`, ts))
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", ts, res.body)
		require.Equal(t, "invalid_argument", res.errorCode(t))
	}
	tb.requireNothingWritten(t, "t")
}

// A record that cannot be encoded (stored before the bounds, or by hand)
// makes consume a 500 with an error body, and auto_commit commits nothing.
func TestConsumeEncodingFailure(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, `{"topic":"t","records":[{"value":1},{"value":2},{"value":3}]}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	s := pgx.Identifier{tb.Schema}.Sanitize()
	_, err := tb.Pool.Exec(tb.ctx, `UPDATE `+s+`.record SET "timestamp" = '10000-01-01 00:00:00+00' WHERE "offset" = 1`)
	require.NoError(t, err)

	const consume = "/v1/pubsub/consume?topic=t&group=g&max_records=10&auto_commit=true"
	res = tb.do(t, http.MethodGet, consume, tb.admin, nil)
	require.Equal(t, http.StatusInternalServerError, res.status, string(res.body))
	require.Equal(t, "internal", res.errorCode(t))
	gs, err := tb.client.ListGroups(tb.ctx, "t", "g")
	require.NoError(t, err)
	require.Len(t, gs, 1)
	require.Equal(t, int64(3), gs[0].Lag, "nothing may be committed")

	// Once the record is repaired, the neighbours are all still there (the
	// claim was released, not left to expire).
	_, err = tb.Pool.Exec(tb.ctx, `UPDATE `+s+`.record SET "timestamp" = now() WHERE "offset" = 1`)
	require.NoError(t, err)
	res = tb.do(t, http.MethodGet, consume, tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var cr ConsumeResponse
	res.json(t, &cr)
	require.Len(t, cr.Records, 3)
}

func TestJobKindAndUniqueKeyHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	random := make([]byte, 1400)
	_, err := rand.Read(random)
	require.NoError(t, err)
	for _, job := range []string{
		fmt.Sprintf(`{"payload":1,"unique_key":%q}`, hex.EncodeToString(random)), // was a 500 (54000)
		fmt.Sprintf(`{"payload":1,"kind":%q}`, strings.Repeat("k", 201)),
	} {
		res := tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, `{"queue":"q","jobs":[`+job+`]}`)
		require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
		require.Equal(t, "invalid_argument", res.errorCode(t))
	}
}

// Queue settings were converted to 32 bits: 4294967297 became 1.
func TestQueueSettingsRangeHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.do(t, http.MethodPost, "/v1/queues", tb.admin, `{"name":"q","max_payload_bytes":4294967297}`)
	require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
	res = tb.do(t, http.MethodPost, "/v1/queues", tb.admin, `{"name":"q","max_attempts":4294967298}`)
	require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
	require.Equal(t, "invalid_max_attempts", res.errorCode(t))
	res = tb.do(t, http.MethodPost, "/v1/queues", tb.admin, `{"name":"q"}`)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	res = tb.do(t, http.MethodPatch, "/v1/queues/q", tb.admin, `{"max_payload_bytes":4294967297}`)
	require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
	res = tb.do(t, http.MethodPatch, "/v1/queues/q", tb.admin, `{"max_attempts":4294967298}`)
	require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
	qs, err := tb.client.ListQueues(tb.ctx)
	require.NoError(t, err)
	require.Equal(t, 25, qs[0].MaxAttempts)
	require.Equal(t, 1<<20, qs[0].MaxPayloadBytes)
}

// Input errors raised by PostgreSQL itself are 400s, never 500s.
func TestPostgresInputErrorsAre400(t *testing.T) {
	for _, code := range []string{"54000", "22001", "22003", "22P02", "22007", "22008"} {
		status, _, _ := errorFor(&pgconn.PgError{Code: code})
		require.Equal(t, http.StatusBadRequest, status, code)
	}
}

// Durations had no upper bound, so a lease (or backoff, or
// session timeout) could put an expiry past what JSON can carry. Over
// HTTP every one past 366 days is a 400 invalid_argument,
// and nothing is claimed, created or extended.
func TestDurationBoundsHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, `{"topic":"t","records":[{"value":1}]}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	res = tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, `{"queue":"q","jobs":[{"payload":1}]}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))

	bad := func(method, path, body string) {
		t.Helper()
		res := tb.do(t, method, path, tb.admin, body)
		require.Equal(t, http.StatusBadRequest, res.status, "%s %s %s: %s", method, path, body, res.body)
		require.Equal(t, "invalid_argument", res.errorCode(t), "%s %s", method, path)
	}
	for _, long := range []string{"2562047h", "8785h", "31708800"} { // 292 years, 366 days + 1h, 367 days in seconds
		bad(http.MethodGet, "/v1/pubsub/consume?topic=t&group=g&lease="+long, "")
		bad(http.MethodGet, "/v1/queue/claim?queue=q&lease="+long, "")
		bad(http.MethodPost, "/v1/queues", fmt.Sprintf(`{"name":"q2","lease":%q}`, long))
		bad(http.MethodPost, "/v1/queues", fmt.Sprintf(`{"name":"q2","retry_backoff_max":%q}`, long))
		bad(http.MethodPatch, "/v1/queues/q", fmt.Sprintf(`{"lease":%q}`, long))
	}
	// Nothing was claimed or created: the record and the job are still there.
	res = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var claim struct {
		Claim struct {
			Partition int32 `json:"partition"`
			Epoch     int64 `json:"epoch"`
		} `json:"claim"`
	}
	require.NoError(t, json.Unmarshal(res.body, &claim))
	res = tb.do(t, http.MethodGet, "/v1/queue/claim?queue=q", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var jobs struct {
		Jobs []struct {
			ID         int64 `json:"id"`
			LeaseToken int64 `json:"lease_token"`
		} `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal(res.body, &jobs))
	require.Len(t, jobs.Jobs, 1)
	res = tb.do(t, http.MethodGet, "/v1/queues/q2", tb.admin, nil)
	require.Equal(t, http.StatusNotFound, res.status, string(res.body))

	// Extending a held claim or job past the bound.
	bad(http.MethodPost, "/v1/pubsub/extend", fmt.Sprintf(`{"topic":"t","group":"g","partition":0,"epoch":%d,"lease":"8785h"}`, claim.Claim.Epoch))
	bad(http.MethodPost, "/v1/queue/extend", fmt.Sprintf(`{"queue":"q","id":%d,"lease_token":%d,"lease":"8785h"}`, jobs.Jobs[0].ID, jobs.Jobs[0].LeaseToken))
	res = tb.do(t, http.MethodPost, "/v1/pubsub/extend", tb.admin,
		fmt.Sprintf(`{"topic":"t","group":"g","partition":0,"epoch":%d,"lease":"8784h"}`, claim.Claim.Epoch))
	require.Equal(t, http.StatusOK, res.status, "366 days is accepted: %s", res.body)
}

// Times were answered in the server process's zone, as pgx returns them:
// east of Greenwich a valid record timestamp of 9999-12-31T23:59:59Z is in
// the year 10000 there, so every consume of it failed to encode (500; seen
// in CI as "Time.MarshalJSON: year outside of range [0,9999]" from
// TestHTTPProperty). The process's zone is read once, from TZ, so the
// checks run in a child test process with TZ=Asia/Tokyo.
func TestAnswersInUTC(t *testing.T) {
	if os.Getenv("PGMSG_TEST_TZ_CHILD") == "" {
		t.Parallel()
		if _, err := time.LoadLocation("Asia/Tokyo"); err != nil {
			t.Skipf("no zone database: %v", err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestAnswersInUTC$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TZ=Asia/Tokyo", "PGMSG_TEST_TZ_CHILD=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "child test with TZ=Asia/Tokyo:\n%s", out)
		return
	}
	require.NotEqual(t, "UTC", time.Now().Location().String())
	_, off := time.Now().Zone()
	require.Positive(t, off, "the child runs east of Greenwich")
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	res := tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, `{"topic":"t","records":[{"value":1,"timestamp":"9999-12-31T23:59:59Z"}]}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	res = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var got struct {
		Claim struct {
			ExpiresAt string `json:"expires_at"`
		} `json:"claim"`
		Records []struct {
			Timestamp string `json:"timestamp"`
		} `json:"records"`
	}
	require.NoError(t, json.Unmarshal(res.body, &got))
	require.Len(t, got.Records, 1)
	require.Equal(t, "9999-12-31T23:59:59Z", got.Records[0].Timestamp)
	require.True(t, strings.HasSuffix(got.Claim.ExpiresAt, "Z"), got.Claim.ExpiresAt)

	res = tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, `{"queue":"q","jobs":[{"payload":1}]}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	res = tb.do(t, http.MethodGet, "/v1/queue/claim?queue=q", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var jobs struct {
		Jobs []map[string]any `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal(res.body, &jobs))
	require.Len(t, jobs.Jobs, 1)
	for _, k := range []string{"enqueued_at", "run_at", "lease_expires_at"} {
		v, _ := jobs.Jobs[0][k].(string)
		require.True(t, strings.HasSuffix(v, "Z"), "%s: %q", k, v)
	}
}
