package httpapi

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// collections reads pgmsg_scrape_collections_total from a /metrics body.
func collections(t *testing.T, body []byte) string {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "pgmsg_scrape_collections_total "); ok {
			return v
		}
	}
	t.Fatalf("no pgmsg_scrape_collections_total in /metrics")
	return ""
}

// /metrics ran four queries per scrape (one counting the whole job
// backlog), so unauthenticated scrape loops could slow the database down.
// Scrapes now share one collection per MetricsCacheTTL.
func TestMetricsScrapesShareOneCollection(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{MetricsCacheTTL: time.Hour})
	_, err := tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Payload: []byte("1")}, nil)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				res := tb.do(t, http.MethodGet, "/metrics", "", nil)
				require.Equal(t, http.StatusOK, res.status)
			}
		}()
	}
	wg.Wait()
	res := tb.do(t, http.MethodGet, "/metrics", "", nil)
	require.Equal(t, "1", collections(t, res.body), "81 scrapes within the cache TTL collected more than once")
	require.Contains(t, string(res.body), `pgmsg_queue_jobs{queue="q",state="available"} 1`)
}

func TestMetricsCacheExpires(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{MetricsCacheTTL: 100 * time.Millisecond})
	res := tb.do(t, http.MethodGet, "/metrics", "", nil)
	require.Equal(t, "1", collections(t, res.body))
	_, err := tb.client.Enqueue(tb.ctx, "q", pgmsg.EnqueueParams{Payload: []byte("1")}, nil)
	require.NoError(t, err)
	time.Sleep(150 * time.Millisecond)
	res = tb.do(t, http.MethodGet, "/metrics", "", nil)
	require.Equal(t, "2", collections(t, res.body))
	require.Contains(t, string(res.body), `pgmsg_queue_jobs{queue="q",state="available"} 1`)
}

// With MetricsAuth, /metrics (which names every topic, group and
// queue) needs an admin token.
func TestMetricsAuth(t *testing.T) {
	t.Parallel()
	tb := setup(t, &Config{MetricsAuth: true})
	res := tb.do(t, http.MethodGet, "/metrics", "", nil)
	require.Equal(t, http.StatusUnauthorized, res.status)
	require.Equal(t, "unauthorized", res.errorCode(t))
	require.NotContains(t, string(res.body), "pgmsg_")
	app := tb.token(t, "app", "consume:*", "claim:*")
	res = tb.do(t, http.MethodGet, "/metrics", app, nil)
	require.Equal(t, http.StatusForbidden, res.status)
	require.Equal(t, "forbidden", res.errorCode(t))
	res = tb.do(t, http.MethodGet, "/metrics", tb.admin, nil)
	require.Equal(t, http.StatusOK, res.status)
	require.Contains(t, string(res.body), "pgmsg_scrape_collections_total")

	// Without MetricsAuth it stays public, and the health probes always are.
	open := setup(t, nil)
	require.Equal(t, http.StatusOK, open.do(t, http.MethodGet, "/metrics", "", nil).status)
	require.Equal(t, http.StatusOK, tb.do(t, http.MethodGet, "/healthz", "", nil).status)
}
