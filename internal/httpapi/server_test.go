package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.do(t, http.MethodPost, "/v1/topics", tb.admin, `{"name":"orders","partitions":2}`)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	res = tb.do(t, http.MethodPost, "/v1/topics", tb.admin, `{"name":"orders","partitions":2}`)
	require.Equal(t, http.StatusConflict, res.status)
	require.Equal(t, "topic_exists", res.errorCode(t))
	res = tb.do(t, http.MethodPost, "/v1/topics", tb.admin, `{"name":"x","partitions":5000}`)
	require.Equal(t, "invalid_argument", res.errorCode(t))

	res = tb.do(t, http.MethodGet, "/v1/topics", tb.admin, nil)
	var tl struct{ Topics []pgmsg.Topic }
	res.json(t, &tl)
	require.Len(t, tl.Topics, 1)
	require.Equal(t, 2, tl.Topics[0].Partitions)

	_, code := httpDriver{t: t, tb: tb, token: tb.admin}.publish("orders", keyed(5))
	require.Empty(t, code)
	res = tb.do(t, http.MethodGet, "/v1/topics/orders", tb.admin, nil)
	var desc pgmsg.TopicDescription
	res.json(t, &desc)
	require.Len(t, desc.PartitionInfo, 2)
	require.Equal(t, int64(5), desc.PartitionInfo[0].Records+desc.PartitionInfo[1].Records)
	require.Equal(t, "unknown_topic", tb.do(t, http.MethodGet, "/v1/topics/nope", tb.admin, nil).errorCode(t))

	// Groups: two groups, one consumes everything; lag shows the other.
	res = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=orders&group=fast&max_records=100&auto_commit=true", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status)
	res = tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=orders&group=fast&max_records=100&auto_commit=true", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status)
	_, err := tb.client.CreateGroup(tb.ctx, "orders", "slow", pgmsg.PositionEarliest)
	require.NoError(t, err)
	res = tb.do(t, http.MethodGet, "/v1/topics/orders/groups", tb.admin, nil)
	var gl struct{ Groups []pgmsg.GroupPartition }
	res.json(t, &gl)
	lag := map[string]int64{}
	for _, g := range gl.Groups {
		lag[g.Group] += g.Lag
	}
	require.Equal(t, map[string]int64{"fast": 0, "slow": 5}, lag)
	// GET /v1/groups: one row per group, its partitions summed; each
	// partition with ?partitions=true, as the topic's route answers
	// unless ?partitions=false.
	res = tb.do(t, http.MethodGet, "/v1/groups?group=slow", tb.admin, nil)
	var gsum struct{ Groups []pgmsg.GroupSummary }
	res.json(t, &gsum)
	require.Equal(t, []pgmsg.GroupSummary{{Topic: "orders", Group: "slow", Partitions: 2, NextOffset: 0, EndOffset: 5, Lag: 5}},
		gsum.Groups)
	res = tb.do(t, http.MethodGet, "/v1/groups", tb.admin, nil)
	res.json(t, &gsum)
	require.Len(t, gsum.Groups, 2)
	require.Equal(t, "fast", gsum.Groups[0].Group)
	require.EqualValues(t, 5, gsum.Groups[0].NextOffset)
	require.NotNil(t, gsum.Groups[0].CommittedAt)
	res = tb.do(t, http.MethodGet, "/v1/groups?group=slow&partitions=true", tb.admin, nil)
	res.json(t, &gl)
	require.Len(t, gl.Groups, 2)
	require.ElementsMatch(t, []int32{0, 1}, []int32{gl.Groups[0].Partition, gl.Groups[1].Partition})
	res = tb.do(t, http.MethodGet, "/v1/topics/orders/groups?partitions=false", tb.admin, nil)
	res.json(t, &gsum)
	require.Len(t, gsum.Groups, 2)
	require.Equal(t, int32(2), gsum.Groups[1].Partitions)
	require.Equal(t, "invalid_parameter", tb.do(t, http.MethodGet, "/v1/groups?partitions=some", tb.admin, nil).errorCode(t))

	res = tb.do(t, http.MethodGet, "/v1/topics/orders/groups/slow", tb.admin, nil)
	var gd pgmsg.GroupDescription
	res.json(t, &gd)
	require.Len(t, gd.Partitions, 2)
	require.Equal(t, "unknown_group", tb.do(t, http.MethodGet, "/v1/topics/orders/groups/nope", tb.admin, nil).errorCode(t))

	res = tb.do(t, http.MethodPost, "/v1/topics/orders/groups/fast/reset", tb.admin, ResetGroupRequest{To: "earliest"})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	gs, err := tb.client.ListGroups(tb.ctx, "orders", "fast")
	require.NoError(t, err)
	require.Equal(t, int64(5), gs[0].Lag+gs[1].Lag)
	require.Equal(t, "invalid_offset", tb.do(t, http.MethodPost, "/v1/topics/orders/groups/fast/reset", tb.admin, ResetGroupRequest{To: "not-a-time"}).errorCode(t))
	require.Equal(t, "invalid_parameter", tb.do(t, http.MethodPost, "/v1/topics/orders/groups/fast/reset", tb.admin, `{}`).errorCode(t))

	require.Equal(t, http.StatusNoContent, tb.do(t, http.MethodDelete, "/v1/topics/orders/groups/slow", tb.admin, nil).status)
	require.Equal(t, "unknown_group", tb.do(t, http.MethodDelete, "/v1/topics/orders/groups/slow", tb.admin, nil).errorCode(t))
	// orders has records and a group left: deleting them takes ?force=true.
	require.Equal(t, "topic_not_empty", tb.do(t, http.MethodDelete, "/v1/topics/orders", tb.admin, nil).errorCode(t))
	require.Equal(t, "invalid_parameter", tb.do(t, http.MethodDelete, "/v1/topics/orders?force=maybe", tb.admin, nil).errorCode(t))
	require.Equal(t, http.StatusNoContent, tb.do(t, http.MethodDelete, "/v1/topics/orders?force=true", tb.admin, nil).status)
	require.Equal(t, "unknown_topic", tb.do(t, http.MethodDelete, "/v1/topics/orders", tb.admin, nil).errorCode(t))

	// Queues: stats, dead list, purge.
	_, err = tb.client.Enqueue(tb.ctx, "emails", pgmsg.EnqueueParams{Payload: []byte(`{"to":"a@b"}`), MaxAttempts: 1}, nil)
	require.NoError(t, err)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "emails", nil)
	require.NoError(t, err)
	_, err = tb.client.Fail(tb.ctx, jobs[0], errors.New("boom"), nil)
	require.NoError(t, err)
	res = tb.do(t, http.MethodGet, "/v1/queues/emails", tb.admin, nil)
	var st pgmsg.QueueStats
	res.json(t, &st)
	require.Equal(t, int64(1), st.Dead)
	res = tb.do(t, http.MethodGet, "/v1/queues", tb.admin, nil)
	require.Contains(t, string(res.body), `"queue":"emails"`)
	res = tb.do(t, http.MethodGet, "/v1/queues/emails/dead", tb.admin, nil)
	var dl struct{ Jobs []wire.JobJSON }
	res.json(t, &dl)
	require.Len(t, dl.Jobs, 1)
	require.JSONEq(t, `{"to":"a@b"}`, string(dl.Jobs[0].Payload))
	require.Equal(t, "boom", dl.Jobs[0].Errors[0].Error)
	res = tb.do(t, http.MethodPost, "/v1/queues/emails/dead/purge", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.JSONEq(t, `1`, string(mustField(t, res.body, "purged")))
	require.Equal(t, "unknown_queue", tb.do(t, http.MethodGet, "/v1/queues/nope/dead", tb.admin, nil).errorCode(t))
}

func TestJobLifecycleHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.do(t, http.MethodPost, "/queue/enqueue", tb.admin, `{"queue":"q","jobs":[{"payload":{"n":1},"kind":"email"}]}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	res = tb.do(t, http.MethodGet, "/queue/claim?queue=q&lease=1m&worker=w1", tb.admin, nil)
	var body struct{ Jobs []wire.JobJSON }
	res.json(t, &body)
	require.Len(t, body.Jobs, 1)
	j := body.Jobs[0]
	require.Equal(t, "email", j.Kind)
	require.Equal(t, wire.EncodingJSON, j.PayloadEncoding)
	before := *j.LeaseExpiresAt
	res = tb.do(t, http.MethodPost, "/v1/queue/extend", tb.admin, map[string]any{"queue": "q", "id": j.ID, "lease_token": j.LeaseToken, "lease": "10m"})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var ext struct {
		LeaseExpiresAt time.Time `json:"lease_expires_at"`
	}
	res.json(t, &ext)
	require.True(t, ext.LeaseExpiresAt.After(before))
	res = tb.do(t, http.MethodPost, "/v1/queue/fail", tb.admin, map[string]any{"queue": "q", "id": j.ID, "lease_token": j.LeaseToken, "error": "later", "retry_in": 3600})
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Contains(t, string(res.body), `"state":"retrying"`)
	res = tb.do(t, http.MethodPost, "/v1/queue/ack", tb.admin, map[string]any{"queue": "q", "id": j.ID, "lease_token": j.LeaseToken})
	require.Equal(t, "job_not_held", res.errorCode(t))
	res = tb.do(t, http.MethodPost, "/v1/queue/ack", tb.admin, map[string]any{"queue": "q", "id": j.ID})
	require.Equal(t, "invalid_parameter", res.errorCode(t))
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodPost, "/v1/pubsub/publish", tb.admin, publishBody("t", "a", "b")).status)
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g&auto_commit=1", tb.admin, nil).status)
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, `{"queue":"q","jobs":[{"payload":1}]}`).status)
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodGet, "/v1/queue/claim?queue=q", tb.admin, nil).status)
	tb.do(t, http.MethodGet, "/v1/pubsub/consume?topic=t", tb.admin, nil)
	res := tb.do(t, http.MethodGet, "/metrics", "", nil)
	require.Equal(t, http.StatusOK, res.status)
	body := string(res.body)
	for _, want := range []string{
		`pgmsg_http_requests_total{method="POST",route="/v1/pubsub/publish",status="200"} 1`,
		`pgmsg_http_requests_total{method="GET",route="/v1/pubsub/consume",status="400"} 1`,
		`pgmsg_http_request_duration_seconds_count{method="GET",route="/v1/pubsub/consume",status="200"} 1`,
		`pgmsg_published_records_total{topic="t"} 2`,
		`pgmsg_consumed_records_total{group="g",topic="t"} 2`,
		`pgmsg_enqueued_jobs_total{queue="q"} 1`,
		`pgmsg_claimed_jobs_total{queue="q"} 1`,
		`pgmsg_group_lag_records_sum{group="g",topic="t"} 0`,
		`pgmsg_topic_end_offset{topic="t"} 2`,
	} {
		require.Contains(t, body, want)
	}
	// Per-partition series only with the option (--metrics-per-partition).
	require.NotContains(t, body, `pgmsg_partition_end_offset{`)
	require.NotContains(t, body, `pgmsg_group_lag_records{`)
}

func TestReadyzNotMigrated(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.Pool.Exec(tb.ctx, `DELETE FROM "`+tb.Schema+`".pgmsg_migration WHERE version = 3`)
	require.NoError(t, err)
	res := tb.do(t, http.MethodGet, "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, res.status)
	require.Equal(t, "unavailable", res.errorCode(t))
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodGet, "/healthz", "", nil).status)
}

func TestInsecureNoAuth(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{InsecureNoAuth: true})
	tb.topic(t, "t", 1)
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodPost, "/v1/pubsub/publish", "", publishBody("t", "a")).status)
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodGet, "/v1/topics", "", nil).status)
	require.True(t, IsLoopback("127.0.0.1:8080"))
	require.True(t, IsLoopback("[::1]:8080"))
	require.True(t, IsLoopback("localhost:0"))
	require.False(t, IsLoopback("0.0.0.0:8080"))
	require.False(t, IsLoopback(":8080"))
	require.False(t, IsLoopback("10.0.0.1:8080"))
}

// TestGracefulShutdown: when Run's context ends, a waiting long poll
// returns at once (empty), an in-flight request completes, and Run returns.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 1)
	srv, err := New(Config{Client: tb.client})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(tb.ctx)
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx, ln) }()
	url := "http://" + ln.Addr().String()

	type result struct {
		status int
		body   string
		err    error
	}
	polled := make(chan result, 1)
	go func() {
		req, _ := http.NewRequestWithContext(tb.ctx, http.MethodGet, url+"/v1/pubsub/consume?topic=t&group=g&wait=25s", nil)
		req.Header.Set("Authorization", "Bearer "+tb.admin)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			polled <- result{err: err}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		polled <- result{status: res.StatusCode, body: string(b)}
	}()
	// Wait until the poll is in flight: the group exists once its first
	// claim ran (the claim creates it).
	require.Eventually(t, func() bool {
		gs, err := tb.client.ListGroups(tb.ctx, "t", "g")
		return err == nil && len(gs) == 1
	}, 10*time.Second, 10*time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case res := <-polled:
		require.NoError(t, res.err)
		require.Equal(t, http.StatusOK, res.status)
		require.True(t, strings.Contains(res.body, `"claim":null`), res.body)
	case <-tb.ctx.Done():
		t.Fatal("long poll not ended by shutdown")
	}
	require.NoError(t, <-ran)
	require.Less(t, time.Since(start), 20*time.Second)
	http.DefaultClient.CloseIdleConnections()
}

// waitingServer returns a server with cfg whose long polls signal on the
// returned channel when they start to wait (after a try found nothing).
func waitingServer(t *testing.T, cfg Config) (*Server, <-chan struct{}) {
	t.Helper()
	srv, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Drain)
	waiting := make(chan struct{}, 1)
	srv.testHookWaiting = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	return srv, waiting
}

// listening waits until client's notification listener is connected (its
// first wake-up follows LISTEN), so that a wake-up seen later comes from a
// notification, not from the listener (re)connecting.
func listening(t *testing.T, wakeups func() (<-chan struct{}, func())) {
	t.Helper()
	ch, stop := wakeups()
	defer stop()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("notification listener not connected")
	}
}

// serveAsync serves one request on srv in the background.
func serveAsync(srv *Server, r *http.Request) <-chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		done <- w
	}()
	return done
}

// TestLongPollWokenByNotify: with polling effectively off (1h fallback), a
// consume waiting on a topic of many partitions answers when a record is
// published to one of them, so the wake-up came from LISTEN/NOTIFY and the
// claim found the record's partition.
func TestLongPollWokenByNotify(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.topic(t, "t", 8)
	srv, waiting := waitingServer(t, Config{Client: tb.client, PollInterval: time.Hour})
	listening(t, func() (<-chan struct{}, func()) { return tb.client.RecordWakeups("t") })

	done := serveAsync(srv, httpRequest(tb, http.MethodGet, "/v1/pubsub/consume?topic=t&group=g&wait=25s"))
	select {
	case <-waiting:
	case w := <-done:
		t.Fatalf("consume answered before anything was published: %d %s", w.Code, w.Body)
	}
	start := time.Now()
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{{Topic: "t", Partition: 5, Value: []byte(`"woken"`)}},
		&pgmsg.PublishOpts{ManualPartition: true}))
	select {
	case w := <-done:
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		var cr ConsumeResponse
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &cr))
		require.Len(t, cr.Records, 1)
		require.Equal(t, `"woken"`, string(cr.Records[0].Value))
		require.NotNil(t, cr.Claim)
		require.EqualValues(t, 5, cr.Claim.Partition)
		t.Logf("woken %s after the publish", time.Since(start))
	case <-time.After(20 * time.Second):
		t.Fatal("long poll not woken")
	}
}

// TestQueueClaimWokenByNotify: with polling effectively off (1h fallback),
// a waiting job claim answers when a job is enqueued: woken by the
// enqueue's notification, long before any fallback poll.
func TestQueueClaimWokenByNotify(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, err := tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{})
	require.NoError(t, err)
	srv, waiting := waitingServer(t, Config{Client: tb.client, PollInterval: time.Hour})
	listening(t, func() (<-chan struct{}, func()) { return tb.client.JobWakeups("q") })

	done := serveAsync(srv, httpRequest(tb, http.MethodGet, "/v1/queue/claim?queue=q&wait=25s"))
	select {
	case <-waiting:
	case w := <-done:
		t.Fatalf("claim answered before anything was enqueued: %d %s", w.Code, w.Body)
	}
	start := time.Now()
	_, err = tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Payload: []byte(`"woken"`)}, nil)
	require.NoError(t, err)
	select {
	case w := <-done:
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		var out struct {
			Jobs []wire.JobJSON `json:"jobs"`
		}
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
		require.Len(t, out.Jobs, 1)
		require.Equal(t, `"woken"`, string(out.Jobs[0].Payload))
		t.Logf("woken %s after the enqueue", time.Since(start))
	case <-time.After(20 * time.Second):
		t.Fatal("claim long poll not woken by the enqueue")
	}
}

// TestQueueClaimFallbackPoll: without notifications (DisableNotify), a
// waiting claim still finds an enqueued job by polling.
func TestQueueClaimFallbackPoll(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	quiet, err := pgmsg.NewClient(tb.Pool, &pgmsg.Config{Schema: tb.Schema, DisableNotify: true})
	require.NoError(t, err)
	t.Cleanup(quiet.Close)
	_, err = tb.client.CreateQueue(tb.ctx, "q", pgmsg.QueueConfig{})
	require.NoError(t, err)
	srv, waiting := waitingServer(t, Config{Client: quiet, PollInterval: 50 * time.Millisecond})

	done := serveAsync(srv, httpRequest(tb, http.MethodGet, "/v1/queue/claim?queue=q&wait=25s"))
	select {
	case <-waiting:
	case w := <-done:
		t.Fatalf("claim answered before anything was enqueued: %d %s", w.Code, w.Body)
	}
	_, err = tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Payload: []byte(`"polled"`)}, nil)
	require.NoError(t, err)
	select {
	case w := <-done:
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		var out struct {
			Jobs []wire.JobJSON `json:"jobs"`
		}
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
		require.Len(t, out.Jobs, 1)
	case <-time.After(20 * time.Second):
		t.Fatal("claim long poll never polled")
	}
}

func httpRequest(tb *testBundle, method, path string) *http.Request {
	r := httptest.NewRequestWithContext(tb.ctx, method, "http://x"+path, nil)
	r.Header.Set("Authorization", "Bearer "+tb.admin)
	return r
}

// PATCH /v1/topics/{topic} changes settings (null removes one); invalid
// values, an empty body and unknown topics get their error codes, and a
// token without the admin scope is refused.
func TestConfigureTopic(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.do(t, http.MethodPost, "/v1/topics", tb.admin, `{"name":"orders","partitions":1}`)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))

	res = tb.do(t, http.MethodPatch, "/v1/topics/orders", tb.admin, `{"settings":{"max_lag_records":100,"retention_ms":60000}}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var topic pgmsg.Topic
	res.json(t, &topic)
	require.Equal(t, map[string]any{"max_lag_records": 100.0, "retention_ms": 60000.0}, topic.Settings)

	res = tb.do(t, http.MethodPatch, "/v1/topics/orders", tb.admin, `{"settings":{"retention_ms":null}}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var after pgmsg.Topic // a fresh value: decoding into topic would merge its map
	res.json(t, &after)
	require.Equal(t, map[string]any{"max_lag_records": 100.0}, after.Settings)

	require.Equal(t, "invalid_argument", tb.do(t, http.MethodPatch, "/v1/topics/orders", tb.admin, `{"settings":{"max_lag_records":-1}}`).errorCode(t))
	require.Equal(t, "invalid_parameter", tb.do(t, http.MethodPatch, "/v1/topics/orders", tb.admin, `{}`).errorCode(t))
	require.Equal(t, "malformed_json", tb.do(t, http.MethodPatch, "/v1/topics/orders", tb.admin, `{"settings":[1]}`).errorCode(t))
	require.Equal(t, "unknown_topic", tb.do(t, http.MethodPatch, "/v1/topics/nope", tb.admin, `{"settings":{"max_lag_records":5}}`).errorCode(t))

	res = tb.do(t, http.MethodGet, "/v1/topics/orders", tb.admin, nil)
	var desc pgmsg.TopicDescription
	res.json(t, &desc)
	require.Equal(t, map[string]any{"max_lag_records": 100.0}, desc.Settings, "a refused change wrote nothing")
}

// POST /v1/queues creates a queue with settings, PATCH /v1/queues/{queue}
// changes them: the depth limit trips (429 queue_full) and is removed;
// bad values change nothing.
func TestQueueSettingsRoutes(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.do(t, http.MethodPost, "/v1/queues", tb.admin, `{"name":"mail","max_attempts":3,"lease":"1m","max_depth":1,"backpressure_timeout":0}`)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	var got map[string]any
	res.json(t, &got)
	require.Equal(t, "mail", got["name"])
	require.Equal(t, 3.0, got["max_attempts"])
	require.Equal(t, "1m0s", got["lease"])
	require.Equal(t, 1.0, got["max_depth"])
	require.Equal(t, "0s", got["backpressure_timeout"])
	require.Equal(t, "queue_exists", tb.do(t, http.MethodPost, "/v1/queues", tb.admin, `{"name":"mail"}`).errorCode(t))
	require.Equal(t, "invalid_parameter", tb.do(t, http.MethodPost, "/v1/queues", tb.admin, `{}`).errorCode(t))
	require.Equal(t, "invalid_name", tb.do(t, http.MethodPost, "/v1/queues", tb.admin, `{"name":"bad name"}`).errorCode(t))

	enqueue := func() response {
		return tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, `{"queue":"mail","jobs":[{"payload":{"n":1}}]}`)
	}
	require.Equal(t, http.StatusOK, enqueue().status)
	res = enqueue()
	require.Equal(t, http.StatusTooManyRequests, res.status)
	require.Equal(t, "queue_full", res.errorCode(t))

	res = tb.do(t, http.MethodPatch, "/v1/queues/mail", tb.admin, `{"max_depth":0}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	got = nil
	res.json(t, &got)
	require.Equal(t, 0.0, got["max_depth"], "0 removes the limit")
	require.Equal(t, 3.0, got["max_attempts"], "other settings unchanged")
	require.Equal(t, http.StatusOK, enqueue().status)

	require.Equal(t, "invalid_argument", tb.do(t, http.MethodPatch, "/v1/queues/mail", tb.admin, `{"max_depth":-5}`).errorCode(t))
	require.Equal(t, "invalid_parameter", tb.do(t, http.MethodPatch, "/v1/queues/mail", tb.admin, `{}`).errorCode(t))
	require.Equal(t, "invalid_parameter", tb.do(t, http.MethodPatch, "/v1/queues/mail", tb.admin, `{"name":"other","max_attempts":2}`).errorCode(t))
	require.Equal(t, "malformed_json", tb.do(t, http.MethodPatch, "/v1/queues/mail", tb.admin, `{"lease":"soon"}`).errorCode(t))
	require.Equal(t, "unknown_queue", tb.do(t, http.MethodPatch, "/v1/queues/nope", tb.admin, `{"max_attempts":2}`).errorCode(t))

	qs, err := tb.client.ListQueues(tb.ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)
	require.Equal(t, 3, qs[0].MaxAttempts, "refused changes wrote nothing")
	require.Equal(t, time.Minute, qs[0].Lease)
}

// Progress and results over HTTP (item 4): POST
// /v1/queue/progress on a held job shows in GET /v1/jobs/{id}; ack's
// result is archived with the job; what cannot be stored is a 400 that
// writes nothing.
func TestJobProgressAndResultHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, `{"queue":"q","jobs":[{"payload":{"n":1}}]}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	res = tb.do(t, http.MethodGet, "/v1/queue/claim?queue=q", tb.admin, nil)
	var body struct{ Jobs []wire.JobJSON }
	res.json(t, &body)
	require.Len(t, body.Jobs, 1)
	j := body.Jobs[0]
	job := func() wire.JobJSON {
		t.Helper()
		res := tb.do(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%d", j.ID), tb.admin, nil)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		var out wire.JobJSON
		res.json(t, &out)
		return out
	}
	held := map[string]any{"queue": "q", "id": j.ID, "lease_token": j.LeaseToken}
	with := func(k string, v any) map[string]any {
		m := map[string]any{k: v}
		for k, v := range held {
			m[k] = v
		}
		return m
	}
	res = tb.do(t, http.MethodPost, "/v1/queue/progress", tb.admin, with("progress", map[string]int{"done": 2, "of": 5}))
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.JSONEq(t, `{"done": 2, "of": 5}`, string(job().Progress))

	for _, bad := range []string{
		fmt.Sprintf(`{"queue":"q","id":%d,"lease_token":%d,"progress":"%s"}`, j.ID, j.LeaseToken, strings.Repeat("x", 70000)),
		fmt.Sprintf(`{"queue":"q","id":%d,"lease_token":%d,"progress":"a\u0000b"}`, j.ID, j.LeaseToken),
		fmt.Sprintf(`{"queue":"q","id":%d,"lease_token":%d,"progress":[%s1]}`, j.ID, j.LeaseToken, strings.Repeat("1,", 29999)),
	} {
		res = tb.do(t, http.MethodPost, "/v1/queue/progress", tb.admin, bad)
		require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
		require.Equal(t, "invalid_argument", res.errorCode(t))
		res = tb.do(t, http.MethodPost, "/v1/queue/ack", tb.admin, strings.Replace(bad, `"progress"`, `"result"`, 1))
		require.Equal(t, http.StatusBadRequest, res.status, string(res.body))
		require.Equal(t, "invalid_argument", res.errorCode(t))
	}
	res = tb.do(t, http.MethodPost, "/v1/queue/progress", tb.admin, held)
	require.Equal(t, "invalid_parameter", res.errorCode(t), "progress is required")
	got := job()
	require.Equal(t, pgmsg.JobStateRunning, got.State, "nothing written")
	require.JSONEq(t, `{"done": 2, "of": 5}`, string(got.Progress))

	res = tb.do(t, http.MethodPost, "/v1/queue/ack", tb.admin, with("result", map[string]any{"sent": true}))
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	got = job()
	require.Equal(t, pgmsg.JobStateCompleted, got.State)
	require.JSONEq(t, `{"sent": true}`, string(got.Result))
	require.JSONEq(t, `{"done": 2, "of": 5}`, string(got.Progress))
	res = tb.do(t, http.MethodPost, "/v1/queue/progress", tb.admin, with("progress", 1))
	require.Equal(t, "job_not_held", res.errorCode(t))
}

// GET /v1/queues/{queue}/jobs: a queue's jobs by id, filtered and paged;
// bad filters are 400s, an unknown queue a 404.
func TestListJobsHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin,
		`{"queue":"q","jobs":[{"payload":{"n":1},"kind":"a"},{"payload":{"n":2},"kind":"b"},{"payload":{"n":3},"kind":"b"}]}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	list := func(query string) []wire.JobJSON {
		t.Helper()
		res := tb.do(t, http.MethodGet, "/v1/queues/q/jobs"+query, tb.admin, nil)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		var out struct {
			Queue string
			Jobs  []wire.JobJSON
		}
		res.json(t, &out)
		require.Equal(t, "q", out.Queue)
		return out.Jobs
	}
	all := list("")
	require.Len(t, all, 3)
	require.JSONEq(t, `{"n":1}`, string(all[0].Payload))
	b := list("?kind=b&state=available")
	require.Len(t, b, 2)
	require.Equal(t, all[1].ID, b[0].ID)
	page := list(fmt.Sprintf("?limit=1&after_id=%d", all[0].ID))
	require.Len(t, page, 1)
	require.Equal(t, all[1].ID, page[0].ID)
	require.Empty(t, list("?until=2000-01-01T00:00:00Z"))
	require.Len(t, list("?since=2000-01-01T00:00:00%2B02:00"), 3)
	require.Empty(t, list("?state=completed"))
	// Newest first, paged downwards by after_id; order=asc is the default.
	desc := list("?order=desc")
	require.Equal(t, []int64{all[2].ID, all[1].ID, all[0].ID}, []int64{desc[0].ID, desc[1].ID, desc[2].ID})
	require.Len(t, desc, 3)
	page = list(fmt.Sprintf("?order=desc&limit=1&after_id=%d", all[2].ID))
	require.Len(t, page, 1)
	require.Equal(t, all[1].ID, page[0].ID)
	require.Equal(t, all, list("?order=asc"))

	for query, code := range map[string]string{
		"?order=newest":                      "invalid_parameter",
		"?order=DESC":                        "invalid_parameter",
		"?state=finished":                    "invalid_argument",
		"?since=yesterday":                   "invalid_parameter",
		"?until=0001-01-01T00:00:00%2B01:00": "invalid_argument",
		"?limit=0":                           "limit_exceeded",
		"?after_id=-1":                       "invalid_parameter",
		"?encoding=ebcdic":                   "invalid_parameter",
	} {
		res := tb.do(t, http.MethodGet, "/v1/queues/q/jobs"+query, tb.admin, nil)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", query, res.body)
		require.Equal(t, code, res.errorCode(t), query)
	}
	res = tb.do(t, http.MethodGet, "/v1/queues/nope/jobs", tb.admin, nil)
	require.Equal(t, http.StatusNotFound, res.status, string(res.body))
	require.Equal(t, "unknown_queue", res.errorCode(t))
}

// Tags and metadata over HTTP: given at enqueue, shown by the job and the
// list, searched by tag; malformed ones are 400s that write nothing.
func TestJobTagsHTTP(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	res := tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin,
		`{"queue":"q","jobs":[{"payload":1,"tags":["eu","customer:42"],"metadata":{"by":"ann"}},{"payload":2}]}`)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	res = tb.do(t, http.MethodGet, "/v1/queues/q/jobs?tag=eu", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var out struct{ Jobs []wire.JobJSON }
	res.json(t, &out)
	require.Len(t, out.Jobs, 1)
	require.Equal(t, []string{"customer:42", "eu"}, out.Jobs[0].Tags)
	require.JSONEq(t, `{"by":"ann"}`, string(out.Jobs[0].Metadata))
	res = tb.do(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%d", out.Jobs[0].ID), tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Contains(t, string(res.body), `"tags":["customer:42","eu"]`)

	for _, bad := range []string{
		`{"queue":"q","jobs":[{"payload":3},{"payload":4,"tags":["has space"]}]}`,
		`{"queue":"q","jobs":[{"payload":3},{"payload":4,"metadata":[1]}]}`,
		`{"queue":"q","jobs":[{"payload":3},{"payload":4,"metadata":"text"}]}`,
	} {
		res := tb.do(t, http.MethodPost, "/v1/queue/enqueue", tb.admin, bad)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", bad, res.body)
		require.Equal(t, "invalid_argument", res.errorCode(t), bad)
	}
	res = tb.do(t, http.MethodGet, "/v1/queues/q/jobs", tb.admin, nil)
	res.json(t, &out)
	require.Len(t, out.Jobs, 2, "nothing written")
}
