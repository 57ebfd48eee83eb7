package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/dashboard"
	"github.com/pgmsg/pgmsg/internal/httpapi"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// ListenDefault is where `pgmsg serve` listens without --listen.
const ListenDefault = "127.0.0.1:8080"

// serveOpts are the flags of serve.
type serveOpts struct {
	listen          string
	maxConns        int32
	maxHTTPConns    int
	maxBodyBytes    int64
	maxRecords      int
	maxAnswerBytes  int64
	maxWait         time.Duration
	shutdownTimeout time.Duration
	tokenCacheTTL   time.Duration
	insecureNoAuth  bool
	tlsCert         string
	tlsKey          string
	authBurst       int
	authRate        float64
	maintenance     bool
	noUI            bool
	metricsAuth     bool
	metricsCacheTTL time.Duration
	metricsPerPart  bool
	metricsAddr     string
	kafka           kafkaOpts
	// ready, if set, receives the address once listening (tests);
	// metricsReady the --metrics-addr listener's.
	ready        func(addr string)
	metricsReady func(addr string)
}

func newServe(g *globals) *cobra.Command {
	var o serveOpts
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP/JSON API (publish, consume, queue, admin) with token auth",
		Long: `serve runs pgmsg's HTTP API: POST /v1/pubsub/publish, GET /v1/pubsub/consume
(long-poll), commit/extend/release, queue enqueue/claim/ack, topic, group and
queue admin, /healthz, /readyz and /metrics. docs/openapi.yaml describes it.

Every request needs "Authorization: Bearer TOKEN" (pgmsg token create).
--insecure-no-auth admits everyone as admin, and is refused unless --listen is
a loopback address. An address that fails to authenticate more than
--auth-failure-burst times in a row gets 429 auth_rate_limited (no database
round trip) until it regains attempts at --auth-failure-rate per second; a
token the server has cached still works.

/metrics is public unless --metrics-auth (then it needs an admin token). With
--metrics-addr it is served only there, on a listener of its own (for
example 127.0.0.1:9090, reachable by the scraper alone), and --listen
answers it 404. Its pgmsg state figures (offsets, lag, queue depths) are
collected from the database at most once per --metrics-cache-ttl, however
many scrape it.

With --tls-cert and --tls-key (PEM files; both or neither) it serves HTTPS
only, TLS 1.2 or later. Without them it serves plain HTTP: terminate TLS in a
proxy in front, or keep it on a trusted network. SIGTERM or Ctrl-C stops accepting, ends long polls and
waits up to --shutdown-timeout for requests in flight.

At most --max-http-conns connections are open at once (long polls hold one
each); further clients wait until one closes. Over TLS, answers carry
Strict-Transport-Security (a year, this host only).

Environment: DATABASE_URL, PGMSG_LISTEN, PGMSG_METRICS_ADDR, PGMSG_MAX_CONNS,
PGMSG_MAX_HTTP_CONNS, PGMSG_TLS_CERT, PGMSG_TLS_KEY.`,
		Example: `  pgmsg token create app --scope 'publish:*' --scope 'consume:*'
  pgmsg serve --listen 0.0.0.0:8080 --max-conns 20
  pgmsg serve --listen 0.0.0.0:8443 --tls-cert server.crt --tls-key server.key
  pgmsg serve --listen 0.0.0.0:8080 --metrics-addr 127.0.0.1:9090
  pgmsg serve --insecure-no-auth          # local development only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.serve(cmd.Context(), o)
		},
	}
	g.addReadReplicaFlag(cmd)
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", envOr("PGMSG_LISTEN", ListenDefault), "address to listen on ($PGMSG_LISTEN)")
	maxConns, _ := strconv.Atoi(envOr("PGMSG_MAX_CONNS", "0"))
	f.Int32Var(&o.maxConns, "max-conns", int32(maxConns), "database pool size (default: pgx's, max(4, CPUs)) ($PGMSG_MAX_CONNS)")
	maxHTTPConns, _ := strconv.Atoi(envOr("PGMSG_MAX_HTTP_CONNS", strconv.Itoa(httpapi.MaxConnectionsDefault)))
	f.IntVar(&o.maxHTTPConns, "max-http-conns", maxHTTPConns, "most HTTP connections open at once; further clients wait until one closes; 0: no limit ($PGMSG_MAX_HTTP_CONNS)")
	f.Int64Var(&o.maxBodyBytes, "max-body-bytes", httpapi.MaxBodyBytesDefault, "largest request body; larger get 413")
	f.IntVar(&o.maxRecords, "max-records", httpapi.MaxRecordsDefault, "most records per publish, consume or claim")
	f.Int64Var(&o.maxAnswerBytes, "max-answer-bytes", httpapi.MaxAnswerBytesDefault, "most stored bytes (record key+value, job payload) per consume or claim; a request's max_bytes may only lower it; at least one record or job is always handed out")
	f.DurationVar(&o.maxWait, "max-wait", httpapi.MaxWaitDefault, "longest long-poll wait a request may ask for")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", httpapi.ShutdownTimeoutDefault, "how long to wait for in-flight requests on shutdown")
	f.DurationVar(&o.tokenCacheTTL, "token-cache-ttl", httpapi.TokenCacheTTLDefault, "how long a verified token is trusted (revocations take this long); negative disables")
	f.StringVar(&o.tlsCert, "tls-cert", os.Getenv("PGMSG_TLS_CERT"), "PEM certificate (chain) to serve HTTPS with; needs --tls-key ($PGMSG_TLS_CERT)")
	f.StringVar(&o.tlsKey, "tls-key", os.Getenv("PGMSG_TLS_KEY"), "PEM private key of --tls-cert ($PGMSG_TLS_KEY)")
	f.IntVar(&o.authBurst, "auth-failure-burst", httpapi.AuthFailureBurstDefault, "failed authentications in a row per client address before 429 auth_rate_limited; 0 disables")
	f.Float64Var(&o.authRate, "auth-failure-rate", httpapi.AuthFailureRateDefault, "failed authentications per second a client address regains (0: the default)")
	f.BoolVar(&o.insecureNoAuth, "insecure-no-auth", false, "serve without tokens, everyone admin (loopback --listen only)")
	f.BoolVar(&o.metricsAuth, "metrics-auth", false, "require a bearer token with the admin scope on /metrics")
	f.StringVar(&o.metricsAddr, "metrics-addr", os.Getenv("PGMSG_METRICS_ADDR"), "serve /metrics on this address only, not on --listen (same TLS as --listen) ($PGMSG_METRICS_ADDR)")
	f.BoolVar(&o.metricsPerPart, "metrics-per-partition", false, "add per-partition series to /metrics (offsets and sizes of every partition, every group's lag on every partition); without it /metrics has topic and group totals, whose cost does not grow with partitions")
	f.DurationVar(&o.metricsCacheTTL, "metrics-cache-ttl", httpapi.MetricsCacheTTLDefault, "how long /metrics serves the state figures of its last database collection; negative disables the cache")
	f.BoolVar(&o.noUI, "no-ui", false, "do not serve the web dashboard at /ui/")
	o.kafka.addFlags(f)
	f.BoolVar(&o.maintenance, "maintenance", true, "take part in maintenance leader election (retention, group expiry, compaction, job rescue)")
	return cmd
}

// serve connects, checks the schema and serves until ctx ends.
func (g *globals) serve(ctx context.Context, o serveOpts) error {
	if o.insecureNoAuth && !httpapi.IsLoopback(o.listen) {
		return fmt.Errorf("--insecure-no-auth is refused on %s: it would give anyone who can reach it admin rights; listen on 127.0.0.1 or create tokens with pgmsg token create", o.listen)
	}
	if o.maxAnswerBytes < 0 {
		return fmt.Errorf("--max-answer-bytes must not be negative, got %d (0: the default, 16 MiB)", o.maxAnswerBytes)
	}
	if o.maxConns < 0 {
		return fmt.Errorf("--max-conns must not be negative, got %d", o.maxConns)
	}
	maxHTTPConns := o.maxHTTPConns
	switch {
	case maxHTTPConns < 0:
		return fmt.Errorf("--max-http-conns must not be negative, got %d (0: no limit)", maxHTTPConns)
	case maxHTTPConns == 0:
		maxHTTPConns = -1 // httpapi: negative is no limit, zero the default
	}
	authBurst := o.authBurst
	switch {
	case authBurst < 0:
		return fmt.Errorf("--auth-failure-burst must not be negative, got %d (0 disables the limit)", authBurst)
	case authBurst == 0:
		authBurst = -1 // httpapi: negative disables, zero is the default
	}
	if o.authRate < 0 || math.IsNaN(o.authRate) || math.IsInf(o.authRate, 0) {
		return fmt.Errorf("--auth-failure-rate must be a positive number of attempts per second, got %v", o.authRate)
	}
	o.kafka.noAuth = o.insecureNoAuth
	if err := o.kafka.check(); err != nil {
		return err
	}
	// TLS files are read before connecting, so a mistake fails at once.
	tlsConfig, err := loadTLS(o.tlsCert, o.tlsKey)
	if err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(g.resolveURL())
	if err != nil {
		return fmt.Errorf("invalid database URL: %w", err)
	}
	if o.maxConns > 0 {
		cfg.MaxConns = o.maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("cannot connect to PostgreSQL at %s: %w", cfg.ConnConfig.Host, err)
	}
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: g.schema})
	if err != nil {
		return err
	}
	if err := m.RequireCurrent(ctx); err != nil {
		return err
	}
	replicas, err := g.replicaPools(ctx, g.readReplicas)
	if err != nil {
		return err
	}
	defer func() {
		for _, p := range replicas {
			p.Close()
		}
	}()
	client, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: g.schema, ReadReplicas: replicas})
	if err != nil {
		return err
	}
	defer client.Close()
	logger := slog.New(slog.NewTextHandler(g.stderr, nil))
	srv, err := httpapi.New(httpapi.Config{
		Client: client, MaxBodyBytes: o.maxBodyBytes, MaxRecords: o.maxRecords, MaxWait: o.maxWait,
		MaxAnswerBytes: o.maxAnswerBytes,
		InsecureNoAuth: o.insecureNoAuth, TokenCacheTTL: o.tokenCacheTTL, ShutdownTimeout: o.shutdownTimeout, Logger: logger,
		AuthFailureBurst: authBurst, AuthFailureRate: o.authRate,
		MetricsAuth: o.metricsAuth, MetricsCacheTTL: o.metricsCacheTTL, MetricsPerPartition: o.metricsPerPart, MetricsOwnListener: o.metricsAddr != "",
		MaxConnections: maxHTTPConns, TLSConfig: tlsConfig,
	})
	if err != nil {
		return err
	}
	if !o.noUI {
		dash, err := dashboard.New(dashboard.Config{API: srv, Client: client, Logger: logger})
		if err != nil {
			return err
		}
		srv.Mount(dashboard.Prefix, dash)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", o.listen, err)
	}
	addr := ln.Addr().String()
	auth := "bearer tokens required (pgmsg token create)"
	if o.insecureNoAuth {
		auth = "INSECURE: no auth, every request is admin"
	}
	var metricsLn net.Listener
	if o.metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", o.metricsAddr); err != nil {
			ln.Close()
			return fmt.Errorf("cannot listen on --metrics-addr %s: %w", o.metricsAddr, err)
		}
	}
	proto, scheme := "HTTP", "http"
	if tlsConfig != nil {
		// Run and RunMetrics add TLS (below it, the connection limit).
		proto, scheme = "HTTPS", "https"
	}
	fmt.Fprintf(g.stdout, "pgmsg serving %s on %s://%s (schema %s; %s); Ctrl-C to stop\n", proto, scheme, addr, g.schema, auth)
	if !o.noUI {
		fmt.Fprintf(g.stdout, "pgmsg dashboard on %s://%s%s\n", scheme, addr, dashboard.Prefix)
	}
	if metricsLn != nil {
		maddr := metricsLn.Addr().String()
		fmt.Fprintf(g.stdout, "pgmsg serving /metrics on %s://%s only\n", scheme, maddr)
		mctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := srv.RunMetrics(mctx, metricsLn); err != nil {
				logger.Error("pgmsg: metrics listener stopped", "addr", maddr, "error", err)
			}
		}()
		defer func() { stop(); <-done }()
		if o.metricsReady != nil {
			o.metricsReady(maddr)
		}
	}
	stopKafka, err := g.startKafka(o.kafka, client, logger)
	if err != nil {
		ln.Close()
		if metricsLn != nil {
			metricsLn.Close()
		}
		return err
	}
	defer stopKafka()
	if o.ready != nil {
		o.ready(addr)
	}
	if o.maintenance {
		// One elected leader among all serve processes runs maintenance;
		// the others stand by. It stops with the server.
		mctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = client.RunMaintenance(mctx, &pgmsg.MaintenanceConfig{OnRun: srv.ObserveMaintenance})
		}()
		defer func() { stop(); <-done }()
	}
	if err := srv.Run(ctx, ln); err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, "pgmsg: server stopped")
	return nil
}

// loadTLS returns the TLS configuration of --tls-cert and --tls-key, nil
// if neither is set. TLS 1.2 is the minimum; Go's default cipher suites
// (ECDHE with AEAD ciphers first) and curves apply. HTTP/2 is offered.
func loadTLS(certFile, keyFile string) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "":
		return nil, nil
	case certFile == "":
		return nil, fmt.Errorf("--tls-key needs --tls-cert (both or neither)")
	case keyFile == "":
		return nil, fmt.Errorf("--tls-cert needs --tls-key (both or neither)")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("cannot load --tls-cert %s and --tls-key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}, nil
}
