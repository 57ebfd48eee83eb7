package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/pgmsgprom"
)

// metrics are the server's Prometheus metrics, in a registry of its own
// (several servers in one process do not collide).
type metrics struct {
	registry  *prometheus.Registry
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	published *prometheus.CounterVec
	consumed  *prometheus.CounterVec
	enqueued  *prometheus.CounterVec
	claimed   *prometheus.CounterVec
	state     *pgmsgprom.Collector
	handler   http.Handler
}

// newMetrics registers the server's request and traffic metrics and, read
// at scrape time, pgmsgprom's state metrics of client's schema: partition
// offsets and sizes, group lag, queue depth by state, collected at most once
// per cacheTTL.
func newMetrics(client *pgmsg.Client, cacheTTL time.Duration, perPartition bool) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgmsg_http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pgmsg_http_request_duration_seconds", Help: "HTTP request latency by route, method and status (long polls included).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method", "status"}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgmsg_published_records_total", Help: "Records published through the API, by topic.",
		}, []string{"topic"}),
		consumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgmsg_consumed_records_total", Help: "Records delivered by consume, by topic and group.",
		}, []string{"topic", "group"}),
		enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgmsg_enqueued_jobs_total", Help: "Jobs enqueued through the API, by queue.",
		}, []string{"queue"}),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgmsg_claimed_jobs_total", Help: "Jobs handed out by claim, by queue.",
		}, []string{"queue"}),
	}
	m.state = pgmsgprom.NewCollector(client, &pgmsgprom.Opts{CacheTTL: cacheTTL, PerPartition: perPartition})
	m.registry.MustRegister(m.requests, m.latency, m.published, m.consumed, m.enqueued, m.claimed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.state)
	m.handler = m.state.Handler(m.registry)
	return m
}

// ObserveMaintenance records a maintenance run in /metrics; pass it as
// pgmsg.MaintenanceConfig.OnRun.
func (s *Server) ObserveMaintenance(res *pgmsg.MaintenanceResult) {
	s.metrics.state.ObserveMaintenance(res)
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

// statusRecorder captures the status a handler writes.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// methodLabel is the method label of a request: the method if it is one the
// API knows, else "other". Go's server accepts any token as a method (the API
// answers 405), so using it as is would let an unauthenticated client add a
// series, kept for the life of the process, per distinct method it sends.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodHead, http.MethodOptions:
		return method
	}
	return "other"
}

// instrument counts and times requests of route. Every label value comes
// from a bounded set: route is a pattern of the route table (or
// "unmatched"), never the request path; the method goes through
// methodLabel; the status is a number a handler wrote.
func (s *Server) instrument(route string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		h(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		status := strconv.Itoa(rec.status)
		method := methodLabel(r.Method)
		s.metrics.requests.WithLabelValues(route, method, status).Inc()
		s.metrics.latency.WithLabelValues(route, method, status).Observe(time.Since(start).Seconds())
	})
}
