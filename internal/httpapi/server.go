// Package httpapi is pgmsg's HTTP/JSON API (`pgmsg serve`): publish and
// long-poll consume with explicit commits, enqueue and claim jobs, and
// admin endpoints for topics, groups and queues, behind bearer-token auth,
// request limits and Prometheus metrics.
//
// It uses the public pgmsg API exactly as an application would. Each
// resource has its own file; errors.go is the one error -> status table.
package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// Defaults and limits of Config fields left zero.
const (
	MaxBodyBytesDefault    = 8 << 20
	MaxRecordsDefault      = 1000
	MaxWaitDefault         = 30 * time.Second
	TokenCacheTTLDefault   = 2 * time.Second
	ShutdownTimeoutDefault = 30 * time.Second
	// AuthFailureBurstDefault failed authentications in a row from one
	// address are answered 401; the next get 429 auth_rate_limited until
	// the bucket refills at AuthFailureRateDefault per second. A client
	// with a typo in its token sees ten 401s before any 429; a guesser
	// costs the database at most one token lookup a second per address.
	AuthFailureBurstDefault = 10
	AuthFailureRateDefault  = 1.0
	// AuthFailureClientsDefault caps the addresses the failure limiter
	// tracks (about 150 bytes each).
	AuthFailureClientsDefault = 10000
	// ConsumeMaxRecordsDefault is max_records of a consume or claim that
	// does not say.
	ConsumeMaxRecordsDefault = 100
	// MaxAnswerBytesDefault caps the stored bytes of one consume or claim
	// answer (wire.MaxAnswerBytesDefault, 16 MiB).
	MaxAnswerBytesDefault = wire.MaxAnswerBytesDefault
	// MetricsCacheTTLDefault is how long /metrics serves the pgmsg state
	// figures it collected before asking the database again.
	MetricsCacheTTLDefault = 5 * time.Second
	// PollIntervalDefault is how often a waiting consume or claim checks
	// again when no notification wakes it.
	PollIntervalDefault = pgmsg.PollIntervalDefault
)

// Config configures a Server. Client is required; every other field
// documents its default.
type Config struct {
	// Client the server works through. Required.
	Client *pgmsg.Client
	// MaxBodyBytes caps a request body; larger bodies get 413
	// body_too_large and nothing is written. Default 8 MiB.
	MaxBodyBytes int64
	// MaxRecords caps the records of a publish (413 too_many_records) and
	// max_records of a consume or claim (400 limit_exceeded). Default 1000.
	MaxRecords int
	// MaxAnswerBytes caps what one consume or job claim hands out: the
	// key+value bytes of the records, or the payload bytes of the jobs. The
	// claim itself stops before the record or job that would go beyond it
	// (so nothing past it is leased), but always hands out at least one,
	// whatever its size. A request's max_bytes may lower it (400
	// limit_exceeded beyond it). The JSON answer is larger than the stored
	// bytes: base64 adds a third, and headers, keys and metadata come on
	// top. Default 16 MiB.
	MaxAnswerBytes int64
	// MaxWait caps the long-poll wait of consume and claim (400
	// limit_exceeded beyond it). Default 30s.
	MaxWait time.Duration
	// PollInterval is how often a waiting consume or claim checks again
	// when no notification (LISTEN/NOTIFY) wakes it: the fallback for lost
	// notifications, pgmsg.Config.DisableNotify, and jobs whose delay or
	// retry backoff runs out. Default 1s.
	PollInterval time.Duration
	// InsecureNoAuth serves every request without a token, as admin. For
	// local development only: the CLI refuses it unless the listen address
	// is loopback. So that a web page in a browser on the same machine
	// cannot use it, requests whose Host is not a loopback name or address
	// (DNS rebinding) get 403 host_not_allowed, and requests with an
	// Origin that is not loopback 403 origin_not_allowed. Default false.
	InsecureNoAuth bool
	// TokenCacheTTL is how long a verified token is trusted before it is
	// checked against the database again, so a revocation takes effect
	// within it. Negative disables the cache. Default 2s.
	TokenCacheTTL time.Duration
	// AuthFailureBurst is how many failed authentications (no, malformed,
	// unknown, revoked or expired token) one client address may make in a
	// row; beyond it, requests from that address that are not
	// authenticated by a cached token get 429 auth_rate_limited with
	// Retry-After, without a database round trip, until its bucket
	// refills. The address is the host of the connection's remote address
	// (IPv6 by /64); X-Forwarded-For is not trusted, so behind a proxy all
	// its clients share one bucket. Negative disables the limit.
	// Default 10.
	AuthFailureBurst int
	// AuthFailureRate is how many failed authentications per second an
	// address regains (the bucket's refill rate). Default 1.
	AuthFailureRate float64
	// AuthFailureClients caps the addresses the limiter tracks; the least
	// recently used is forgotten first. Default 10000.
	AuthFailureClients int
	// MetricsAuth makes /metrics require a bearer token with the admin
	// scope (401/403 otherwise). Default false: /metrics is public, as the
	// health endpoints are; keep it on a trusted network or behind a proxy.
	MetricsAuth bool
	// MetricsCacheTTL is how long /metrics serves the pgmsg state figures
	// (offsets, lag, queue depths) of its last collection before querying
	// the database again; concurrent scrapes share one collection. Request
	// and traffic counters are always live. Negative disables the cache
	// (overlapping scrapes still share a collection). Default 5s.
	MetricsCacheTTL time.Duration
	// MetricsPerPartition adds the per-partition series to /metrics
	// (pgmsgprom.Opts.PerPartition). Default false: topic and group
	// totals only, whose cost does not grow with partitions and segments.
	MetricsPerPartition bool
	// MetricsOwnListener takes /metrics off the API: the Server's handler
	// answers it 404, and RunMetrics serves it, on a
	// listener of its own such as a loopback or internal address that only
	// the scraper reaches (pgmsg serve --metrics-addr). MetricsAuth still
	// applies there. Default false: the API serves /metrics.
	MetricsOwnListener bool
	// MaxConnections caps the connections Run (and RunMetrics, on its own
	// listener) has open at once: with that many open, further clients
	// wait in the kernel's accept queue until one closes. Each costs a
	// goroutine and buffers, and a long poll holds one for up to MaxWait.
	// Negative: no limit. Default 1024.
	MaxConnections int
	// TLSConfig, if set, makes Run and RunMetrics serve HTTPS only, with
	// this configuration; answers then carry Strict-Transport-Security.
	// Default nil: plain HTTP.
	TLSConfig *tls.Config
	// ShutdownTimeout bounds how long Run waits for in-flight requests
	// after its context ends. Default 30s.
	ShutdownTimeout time.Duration
	// Logger for request failures. Default slog.Default().
	Logger *slog.Logger
}

// Server is the HTTP API. It is an http.Handler.
type Server struct {
	cfg    Config
	client *pgmsg.Client
	logger *slog.Logger
	mux    *http.ServeMux
	// metricsMux serves /metrics alone (metricsHandler).
	metricsMux *http.ServeMux
	routes     []Route
	metrics    *metrics
	tokens     *tokenCache
	// authFailures limits failed authentications; nil if disabled.
	authFailures *authLimiter

	// stopCtx ends when the server drains (Drain).
	stopCtx context.Context
	stop    context.CancelFunc

	// testHookWaiting, if set (by tests, before serving), is called each
	// time a long poll starts to wait for a wake-up.
	testHookWaiting func()
	// testHookVerify, if set (by tests, before serving), is called before
	// each token lookup in the database.
	testHookVerify func()
}

// Route is one endpoint: what the OpenAPI document must describe.
type Route struct {
	Method string
	// Pattern is the path with {name} wildcards, as in OpenAPI.
	Pattern string
	// Alias names the /v1 route this one is a documented alias of.
	Alias string
	// Scope is what the caller needs: "" (nothing), pgmsg.ScopeAdmin, or a
	// scope kind checked against the topic or queue named by the request.
	Scope string
	// changesOnGet marks the GETs that change state (consume and claim
	// lease what they hand out; consume may commit).
	changesOnGet bool
	handler      func(w http.ResponseWriter, r *http.Request) error
}

// changesState reports whether the route changes state: every method but
// GET, and the GETs that lease or commit.
func (rt Route) changesState() bool {
	return rt.Method != http.MethodGet || rt.changesOnGet
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("httpapi: Config.Client is required")
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = MaxBodyBytesDefault
	}
	if cfg.MaxRecords == 0 {
		cfg.MaxRecords = MaxRecordsDefault
	}
	if cfg.MaxAnswerBytes == 0 {
		cfg.MaxAnswerBytes = MaxAnswerBytesDefault
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = MaxWaitDefault
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = PollIntervalDefault
	}
	if cfg.TokenCacheTTL == 0 {
		cfg.TokenCacheTTL = TokenCacheTTLDefault
	}
	if cfg.AuthFailureBurst == 0 {
		cfg.AuthFailureBurst = AuthFailureBurstDefault
	}
	if cfg.AuthFailureRate == 0 {
		cfg.AuthFailureRate = AuthFailureRateDefault
	}
	if cfg.AuthFailureClients == 0 {
		cfg.AuthFailureClients = AuthFailureClientsDefault
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = ShutdownTimeoutDefault
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = MaxConnectionsDefault
	}
	if cfg.MetricsCacheTTL == 0 {
		cfg.MetricsCacheTTL = MetricsCacheTTLDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.MaxBodyBytes < 0:
		return nil, fmt.Errorf("httpapi: Config.MaxBodyBytes must not be negative, got %d", cfg.MaxBodyBytes)
	case cfg.MaxRecords < 0:
		return nil, fmt.Errorf("httpapi: Config.MaxRecords must not be negative, got %d", cfg.MaxRecords)
	case cfg.MaxAnswerBytes < 0:
		return nil, fmt.Errorf("httpapi: Config.MaxAnswerBytes must not be negative, got %d", cfg.MaxAnswerBytes)
	case cfg.MaxWait < 0:
		return nil, fmt.Errorf("httpapi: Config.MaxWait must not be negative, got %s", cfg.MaxWait)
	case cfg.PollInterval < 0:
		return nil, fmt.Errorf("httpapi: Config.PollInterval must not be negative, got %s", cfg.PollInterval)
	case cfg.AuthFailureRate < 0 || math.IsNaN(cfg.AuthFailureRate) || math.IsInf(cfg.AuthFailureRate, 0):
		return nil, fmt.Errorf("httpapi: Config.AuthFailureRate must be a positive number, got %v", cfg.AuthFailureRate)
	case cfg.AuthFailureClients < 0:
		return nil, fmt.Errorf("httpapi: Config.AuthFailureClients must not be negative, got %d", cfg.AuthFailureClients)
	}
	s := &Server{
		cfg: cfg, client: cfg.Client, logger: cfg.Logger, mux: http.NewServeMux(), metricsMux: http.NewServeMux(),
		metrics: newMetrics(cfg.Client, max(cfg.MetricsCacheTTL, 0), cfg.MetricsPerPartition), tokens: newTokenCache(cfg.TokenCacheTTL),
	}
	if cfg.AuthFailureBurst > 0 {
		s.authFailures = newAuthLimiter(cfg.AuthFailureBurst, cfg.AuthFailureRate, cfg.AuthFailureClients)
	}
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	s.routes = s.routeTable()
	s.register()
	return s, nil
}

// routeTable lists every endpoint. Resource files add theirs.
func (s *Server) routeTable() []Route {
	var rs []Route
	rs = append(rs, s.healthRoutes()...)
	rs = append(rs, s.pubsubRoutes()...)
	rs = append(rs, s.topicRoutes()...)
	rs = append(rs, s.groupRoutes()...)
	rs = append(rs, s.queueRoutes()...)
	rs = append(rs, s.batchRoutes()...)
	return rs
}

// Mount serves h at prefix (a path ending in "/", such as "/ui/"), behind
// the same checks ServeHTTP makes of every request (loopback Host and
// Origin under InsecureNoAuth, clean paths). The dashboard is mounted so.
// Call it before serving.
func (s *Server) Mount(prefix string, h http.Handler) {
	s.mux.Handle(prefix, s.instrument(prefix, h.ServeHTTP))
}

// Authenticate returns the token of a request's Authorization header as
// every authenticated route checks it (cache, failure limit; under
// InsecureNoAuth an admin identity), or the error that route answers.
// WriteError writes that error.
func (s *Server) Authenticate(r *http.Request) (*pgmsg.Token, error) { return s.authenticate(r) }

// ForgetToken drops token id from the cache of verified tokens, so that
// its revocation (Client.RevokeToken) takes effect on this server at once;
// other servers trust their cache for up to their TokenCacheTTL.
func (s *Server) ForgetToken(id int64) { s.tokens.forget(id) }

// RequiresAuth reports whether requests need a token (false under
// InsecureNoAuth).
func (s *Server) RequiresAuth() bool { return !s.cfg.InsecureNoAuth }

// WriteError writes err as the API answers it: its status and the body
// {"error": {"code", "message"}}.
func (s *Server) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	s.writeError(w, r, err)
}

// Routes returns every endpoint the server answers.
func (s *Server) Routes() []Route {
	return append([]Route(nil), s.routes...)
}

// metricsPattern is the path of the metrics endpoint (MetricsOwnListener).
const metricsPattern = "/metrics"

// register fills the API's mux and the metrics mux: /metrics goes to both,
// or only to the metrics mux with MetricsOwnListener.
func (s *Server) register() {
	methods := map[string][]string{}
	for _, rt := range s.routes {
		rt := rt
		h := s.instrument(rt.Pattern, s.wrap(rt))
		if rt.Pattern == metricsPattern {
			s.metricsMux.Handle(rt.Method+" "+rt.Pattern, h)
			if s.cfg.MetricsOwnListener {
				continue
			}
		}
		methods[rt.Pattern] = append(methods[rt.Pattern], rt.Method)
		s.mux.Handle(rt.Method+" "+rt.Pattern, h)
	}
	// JSON 405s for known paths, JSON 404 for everything else.
	for pattern, ms := range methods {
		sort.Strings(ms)
		s.mux.Handle(pattern, s.instrument(pattern, s.notAllowed(ms)))
	}
	s.mux.Handle("/", s.instrument("unmatched", s.notFound("see /v1 in docs/openapi.yaml")))
	s.metricsMux.Handle(metricsPattern, s.instrument(metricsPattern, s.notAllowed([]string{http.MethodGet})))
	s.metricsMux.Handle("/", s.instrument("unmatched", s.notFound("this listener serves GET /metrics only")))
}

// notAllowed answers 405 naming the allowed methods.
func (s *Server) notAllowed(methods []string) http.HandlerFunc {
	allow := strings.Join(methods, ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		s.writeError(w, r, newAPIError(errMethodNotAllowed, "method %s not allowed on %s: use %s", r.Method, r.URL.Path, allow))
	}
}

// notFound answers 404 with a hint.
func (s *Server) notFound(hint string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, newAPIError(errNotFound, "no endpoint %s %s: %s", r.Method, r.URL.Path, hint))
	}
}

// metricsHandler serves GET /metrics alone (with Config.MetricsAuth, for
// an admin token), and 404 for every other path: the handler of a
// metrics listener of its own (Config.MetricsOwnListener, RunMetrics).
func (s *Server) metricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header().Set("Strict-Transport-Security", hstsHeader)
		}
		s.metricsMux.ServeHTTP(w, r)
	})
}

// wrap authenticates (unless the route is public), checks an admin scope,
// and turns a handler's error into the error body.
func (s *Server) wrap(rt Route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if rt.changesState() {
			if err := checkSameOrigin(r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		if r.ContentLength != 0 {
			// A body must say it is JSON, even where it is not read.
			if err := requireJSON(r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		if rt.Scope != "" {
			tok, err := s.authenticate(r)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if rt.Scope == pgmsg.ScopeAdmin && !tok.Allows(pgmsg.ScopeAdmin, "") {
				// A read token may read what an admin token may: the admin
				// routes that are GETs change nothing.
				if rt.Method != http.MethodGet || !tok.CanRead() {
					s.writeError(w, r, newAPIError(errForbidden, "token %q lacks the admin scope", tok.Name))
					return
				}
			}
			if rt.Scope != pgmsg.ScopeAdmin && !mayUse(tok, rt.Scope) {
				// Refused before the request is read: a body may be
				// large, and this token may not send one anywhere.
				s.writeError(w, r, newAPIError(errForbidden, "token %q has no %s scope", tok.Name, rt.Scope))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok))
		}
		if err := rt.handler(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.TLS != nil {
		w.Header().Set("Strict-Transport-Security", hstsHeader)
	}
	if s.cfg.InsecureNoAuth {
		if err := checkLocalRequest(r); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	if p := r.URL.Path; r.Method != http.MethodConnect && cleanPath(p) != p {
		// http.ServeMux would redirect to the clean path, which names
		// another resource: DELETE /v1/topics/t/groups/.. (group "..")
		// would send a client that follows redirects to DELETE
		// /v1/topics/t, the whole topic. Names "." and ".." cannot be
		// used in a path.
		s.instrument("unmatched", func(w http.ResponseWriter, r *http.Request) {
			s.writeError(w, r, newAPIError(errNotFound, "no endpoint %s %s: the path has an empty, \".\" or \"..\" segment "+
				"(a topic, group or queue named \".\" or \"..\" cannot be named in a path)", r.Method, r.URL.Path))
		}).ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// cleanPath is the path http.ServeMux serves p as (it redirects to it):
// without "." and ".." segments and repeated slashes, keeping a trailing
// slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// checkLocalRequest refuses, under InsecureNoAuth, what a browser on this
// machine could send for a web page: a Host that is not loopback (a DNS
// rebinding attack names the attacker's host, resolved to 127.0.0.1) and
// an Origin that is not loopback (a cross-site request; "null" included).
func checkLocalRequest(r *http.Request) error {
	if !isLoopbackHost(r.Host) {
		return newAPIError(errHostNotAllowed, "host %q is not allowed without auth: use localhost, 127.0.0.1 or [::1]", r.Host)
	}
	for _, origin := range r.Header.Values("Origin") {
		u, err := url.Parse(origin)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !isLoopbackHost(u.Host) {
			return newAPIError(errOriginNotAllowed, "origin %q is not allowed without auth: only loopback origins are", origin)
		}
	}
	return nil
}

// checkSameOrigin refuses a state-changing request that a browser made for
// a page of another site, or of another origin of this site: one whose
// Sec-Fetch-Site (sent by every current browser, and not settable by a
// page) is neither same-origin nor none (typed in the address bar). A
// page could otherwise drive a server without auth by loading
// <img src=".../v1/queue/claim?queue=q&lease=8784h">, a GET that sends no
// Origin. Clients that are not browsers (curl, the SDKs, scripts) send no
// Sec-Fetch-Site and are not affected; the dashboard's pages call it from
// its own origin.
func checkSameOrigin(r *http.Request) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
		return nil
	default:
		return newAPIError(errCrossSite, "a request from a page of another site or origin (Sec-Fetch-Site: %s) may not change state: "+
			"call the API from a program, or from a page this server serves", truncateParam(site))
	}
}

// isLoopbackHost reports whether a Host header value (host, host:port,
// [v6] or [v6]:port) names this machine: localhost or a loopback address.
func isLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Drain makes waiting long polls return at once (with what they have) and
// new long polls not wait: call it before http.Server.Shutdown so that
// shutdown does not wait out every poll. Run calls it.
func (s *Server) Drain() { s.stop() }

// Run serves on ln (a TCP listener: Run adds the connection limit and
// TLS of the Config) until ctx ends, then shuts down gracefully: it stops
// accepting, ends long polls, and waits up to ShutdownTimeout for
// in-flight requests to finish.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	// Long polls hold the response for up to MaxWait.
	return s.run(ctx, ln, s, s.cfg.MaxWait+2*time.Minute, s.Drain)
}

// RunMetrics serves metricsHandler on ln until ctx ends, then shuts down
// as Run does. With Config.MetricsOwnListener it is the only way /metrics
// is served.
func (s *Server) RunMetrics(ctx context.Context, ln net.Listener) error {
	return s.run(ctx, ln, s.metricsHandler(), 2*time.Minute, func() {})
}

func (s *Server) run(ctx context.Context, ln net.Listener, h http.Handler, writeTimeout time.Duration, drain func()) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
	ln = s.listener(ln)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	drain()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// IsLoopback reports whether a listen address (host:port) only accepts
// connections from this machine.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	body, err := encodeJSON(v)
	if err != nil {
		return err
	}
	writeBody(w, status, body)
	return nil
}

// encodeJSON encodes a response body in full before anything is written,
// so that a value that cannot be encoded (such as a time outside the years
// 0001..9999) becomes a 500 instead of a 200 with an empty body. Text is
// not HTML-escaped (a message's "<token>" stays "<token>"): the body is
// JSON with nosniff, never HTML.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode the response: %w", err)
	}
	return buf.Bytes(), nil
}

// writeBody writes an encoded JSON body with its status.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
