package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg/internal/mirror"
	"github.com/pgmsg/pgmsg/pgmsgkafka"
)

// kafkaFlags are the Kafka connection flags of pgmsg mirror and its
// subcommands: the brokers, TLS and SASL (as managed Kafka services
// require), and the topics.
type kafkaFlags struct {
	brokers []string
	topics  []string
	tls     pgmsgkafka.TLSConfig
	sasl    pgmsgkafka.SASLConfig
	// passwordFile is read into sasl.Password by opts.
	passwordFile string
}

func (k *kafkaFlags) add(cmd *cobra.Command, persistent bool) {
	f := cmd.Flags()
	if persistent {
		f = cmd.PersistentFlags()
	}
	var def []string
	if v := os.Getenv("PGMSG_KAFKA_BROKERS"); v != "" {
		def = strings.Split(v, ",")
	}
	f.StringSliceVar(&k.brokers, "brokers", def, "Kafka bootstrap brokers, host:port,... ($PGMSG_KAFKA_BROKERS)")
	f.StringSliceVar(&k.topics, "topics", nil, "pgmsg topics to mirror, each to the Kafka topic of the same name (required)")
	f.BoolVar(&k.tls.Enabled, "tls", os.Getenv("PGMSG_KAFKA_TLS") == "1", "connect to the brokers with TLS, verified against the system's roots unless --tls-ca ($PGMSG_KAFKA_TLS=1; implied by the other --tls flags)")
	f.StringVar(&k.tls.CAFile, "tls-ca", os.Getenv("PGMSG_KAFKA_TLS_CA"), "PEM file of the CA that signs the brokers' certificates ($PGMSG_KAFKA_TLS_CA)")
	f.StringVar(&k.tls.CertFile, "tls-cert", os.Getenv("PGMSG_KAFKA_TLS_CERT"), "PEM client certificate, for brokers that require one (mutual TLS) ($PGMSG_KAFKA_TLS_CERT)")
	f.StringVar(&k.tls.KeyFile, "tls-key", os.Getenv("PGMSG_KAFKA_TLS_KEY"), "PEM key of --tls-cert ($PGMSG_KAFKA_TLS_KEY)")
	f.StringVar(&k.tls.ServerName, "tls-server-name", os.Getenv("PGMSG_KAFKA_TLS_SERVER_NAME"), "name the brokers' certificates must hold (default: each broker's host) ($PGMSG_KAFKA_TLS_SERVER_NAME)")
	f.BoolVar(&k.tls.InsecureSkipVerify, "tls-insecure-skip-verify", false, "accept any broker certificate: no protection against a man in the middle, for tests only")
	f.StringVar(&k.sasl.Mechanism, "sasl-mechanism", os.Getenv("PGMSG_KAFKA_SASL_MECHANISM"), "SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER ($PGMSG_KAFKA_SASL_MECHANISM)")
	f.StringVar(&k.sasl.User, "sasl-user", os.Getenv("PGMSG_KAFKA_SASL_USER"), "SASL user of PLAIN and SCRAM (Confluent Cloud: the API key) ($PGMSG_KAFKA_SASL_USER)")
	f.StringVar(&k.passwordFile, "sasl-password-file", "", "file holding the SASL password (else $PGMSG_KAFKA_SASL_PASSWORD; never a flag's value, which ps shows)")
	f.StringVar(&k.sasl.TokenFile, "sasl-token-file", os.Getenv("PGMSG_KAFKA_SASL_TOKEN_FILE"), "OAUTHBEARER: file holding the token, read again for each connection so a renewer can rewrite it (else $PGMSG_KAFKA_SASL_TOKEN) ($PGMSG_KAFKA_SASL_TOKEN_FILE)")
}

// opts returns the kgo options of the flags: the seed brokers, TLS and
// SASL. Secrets come from files or the environment, never from a flag.
func (k *kafkaFlags) opts() ([]kgo.Opt, error) {
	s := k.sasl
	s.Password = os.Getenv("PGMSG_KAFKA_SASL_PASSWORD")
	if k.passwordFile != "" {
		b, err := os.ReadFile(k.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--sasl-password-file: %w", err)
		}
		s.Password = strings.TrimRight(string(b), "\r\n")
	}
	if s.TokenFile == "" {
		s.Token = os.Getenv("PGMSG_KAFKA_SASL_TOKEN")
	}
	upper := strings.ToUpper(s.Mechanism)
	if upper == pgmsgkafka.SASLOAuthBearer {
		s.Password = ""
	} else {
		s.Token = ""
		if upper != "" && s.Password == "" {
			return nil, fmt.Errorf("--sasl-mechanism %s needs a password: --sasl-password-file or PGMSG_KAFKA_SASL_PASSWORD", s.Mechanism)
		}
	}
	sec, err := pgmsgkafka.SecurityOpts(&k.tls, &s)
	if err != nil {
		return nil, err
	}
	return append([]kgo.Opt{kgo.SeedBrokers(k.brokers...)}, sec...), nil
}

func (k *kafkaFlags) check() error {
	if len(k.brokers) == 0 {
		return errors.New("--brokers is required: the Kafka bootstrap brokers (or set PGMSG_KAFKA_BROKERS)")
	}
	if len(k.topics) == 0 {
		return errors.New("--topics is required: the pgmsg topics to mirror")
	}
	return nil
}

func newMirror(g *globals) *cobra.Command {
	var kf kafkaFlags
	var group, metricsAddr string
	var create, drain bool
	var workers, batch int
	var progress, lease, session time.Duration
	cmd := &cobra.Command{
		Use:   "mirror --brokers HOST:PORT --topics T1,T2",
		Short: "Copy topics to Kafka continuously, keeping partitions, order, keys, headers and timestamps",
		Long: `mirror copies pgmsg topics to the Kafka topics of the same names, as pgmsg
consumer group --group: each record goes to the same partition, in order, with
its key, value, headers and timestamp (milliseconds in Kafka), plus a header
pgmsg-offset with its pgmsg offset. A claim is committed in pgmsg only once every
in-sync Kafka replica has it (idempotent producer, acks=all), so a crash or a
kill -9 loses nothing; on restart the mirror reads the last pgmsg-offset of each
Kafka partition and skips what Kafka already has, so nothing is written twice
either (the skipped records are counted).

--create-topics creates missing Kafka topics with the pgmsg topic's partition
count; a Kafka topic with fewer partitions is refused. Progress goes to stderr;
--metrics-addr serves /metrics (mirrored and skipped records, lag per
partition). Managed Kafka (Confluent Cloud, MSK, Aiven) needs --tls (with
--tls-ca and a client certificate where the service issues them) and SASL:
--sasl-mechanism PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER, with
--sasl-user and the password in PGMSG_KAFKA_SASL_PASSWORD or
--sasl-password-file, or the token in PGMSG_KAFKA_SASL_TOKEN or
--sasl-token-file. --drain stops once everything published so far is copied (lag 0):
the step of a switch-over. "pgmsg mirror groups" then moves consumer groups.
docs/scale-out.md is the runbook.`,
		Example: `  pgmsg mirror --brokers kafka:9092 --topics orders,payments --create-topics
  pgmsg mirror --brokers kafka:9092 --topics orders --metrics-addr 127.0.0.1:9091
  pgmsg mirror --brokers kafka:9092 --topics orders --drain
  PGMSG_KAFKA_SASL_PASSWORD=$SECRET pgmsg mirror --brokers pkc-xxxxx.confluent.cloud:9092 --tls \
      --sasl-mechanism PLAIN --sasl-user $API_KEY --topics orders`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := kf.check(); err != nil {
				return err
			}
			if workers < 1 || batch < 1 {
				return fmt.Errorf("--workers and --batch must be at least 1, got %d and %d", workers, batch)
			}
			if progress < 0 || lease < 0 || session < 0 {
				return errors.New("--progress, --lease and --session-timeout must not be negative")
			}
			kopts, err := kf.opts()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c, done, err := g.client(ctx)
			if err != nil {
				return err
			}
			defer done()
			cfg := mirror.Config{Client: c, Kafka: kopts, Topics: kf.topics,
				Group: group, CreateTopics: create, Workers: workers, Batch: batch, Drain: drain,
				Lease: lease, SessionTimeout: session,
				ProgressInterval: progress, Logger: slog.New(slog.NewTextHandler(g.stderr, nil))}
			if progress > 0 {
				cfg.Progress = g.stderr
			} else {
				cfg.ProgressInterval = 0
			}
			if metricsAddr != "" {
				reg := prometheus.NewRegistry()
				if cfg.Metrics, err = mirror.NewMetrics(reg); err != nil {
					return err
				}
				stop, err := serveMetrics(ctx, g, metricsAddr, reg)
				if err != nil {
					return err
				}
				defer stop()
			}
			m, err := mirror.New(cfg)
			if err != nil {
				return err
			}
			defer m.Close()
			start := time.Now()
			err = m.Run(ctx)
			s := m.Stats()
			// A mirror that failed before copying anything (no broker, a
			// missing topic) says why in its error alone.
			if err == nil || s.Mirrored > 0 || s.Skipped > 0 {
				fmt.Fprintf(g.stderr, "pgmsg mirror: stopped after %s: %d records mirrored, %d skipped (already in Kafka)\n",
					time.Since(start).Round(time.Millisecond), s.Mirrored, s.Skipped)
			}
			return err
		},
	}
	kf.add(cmd, true)
	f := cmd.Flags()
	f.StringVarP(&group, "group", "g", mirror.GroupDefault, "the mirror's pgmsg consumer group (its cursor is the mirror's position)")
	f.BoolVar(&create, "create-topics", false, "create missing Kafka topics with the pgmsg topic's partition count")
	f.IntVar(&workers, "workers", mirror.WorkersDefault, "members of the group in this process (at most one per partition works)")
	f.IntVar(&batch, "batch", mirror.BatchDefault, "records per claim: one produce request and one commit")
	f.BoolVar(&drain, "drain", false, "stop once the group's lag is 0 on every partition")
	f.DurationVar(&progress, "progress", mirror.ProgressDefault, "interval of the progress lines on stderr (0: none)")
	f.DurationVar(&lease, "lease", 0, "lease of the mirror's claims (default pgmsg's, 30s); after a crash the next run resumes a partition once it ran out")
	f.DurationVar(&session, "session-timeout", 0, "session timeout of the mirror's members (default pgmsg's, 10s)")
	f.StringVar(&metricsAddr, "metrics-addr", os.Getenv("PGMSG_MIRROR_METRICS_ADDR"), "serve Prometheus /metrics on this address ($PGMSG_MIRROR_METRICS_ADDR; not serve's variable, both may run on one host)")
	cmd.AddCommand(newMirrorGroups(g, &kf))
	return cmd
}

// serveMetrics serves reg on addr/metrics until stop is called.
func serveMetrics(ctx context.Context, g *globals, addr string, reg *prometheus.Registry) (stop func(), err error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on --metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(g.stderr, "pgmsg mirror: serving /metrics on http://%s\n", ln.Addr())
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

func newMirrorGroups(g *globals, kf *kafkaFlags) *cobra.Command {
	var groups []string
	var mirrorGroup string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "groups --groups G1,G2 --brokers HOST:PORT --topics T1,T2",
		Short: "Commit pgmsg groups' positions as the offsets of the Kafka groups of the same names",
		Long: `groups translates each pgmsg consumer group's position (its next offset per
partition) into the Kafka offset of the first mirrored record at or after it,
found by the records' pgmsg-offset headers, and commits it for the Kafka group
of the same name: a Kafka consumer of that group then starts where the pgmsg
group stood. Records of a claim in flight are not committed, so they are read
again (IN FLIGHT says where); stop the group's pgmsg consumers first.

A position past the mirror's (group --mirror-group) is refused: let the mirror
catch up first (pgmsg mirror --drain). Kafka refuses the commit while the Kafka
group has live members. It reads each Kafka partition's tail, further back
only as far as the positions need.`,
		Example: `  pgmsg mirror groups --brokers kafka:9092 --topics orders --groups billing,audit
  pgmsg mirror groups --brokers kafka:9092 --topics orders --groups billing --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := kf.check(); err != nil {
				return err
			}
			if len(groups) == 0 {
				return errors.New("--groups is required: the pgmsg consumer groups to move to Kafka")
			}
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			kopts, err := kf.opts()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c, done, err := g.client(ctx)
			if err != nil {
				return err
			}
			defer done()
			offs, err := mirror.TranslateGroups(ctx, mirror.GroupsConfig{Client: c,
				Kafka: kopts, Groups: groups, Topics: kf.topics,
				MirrorGroup: mirrorGroup, DryRun: dryRun})
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(offs)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "GROUP\tTOPIC\tPARTITION\tPGMSG OFFSET\tKAFKA OFFSET\tIN FLIGHT")
			for _, o := range offs {
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%v\n", o.Group, o.Topic, o.Partition, o.PgmsgOffset, o.KafkaOffset, o.InFlight)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if dryRun {
				fmt.Fprintln(g.stderr, "pgmsg: dry run: nothing committed in Kafka")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&groups, "groups", nil, "pgmsg consumer groups to translate (required)")
	f.StringVar(&mirrorGroup, "mirror-group", mirror.GroupDefault, "the mirror's pgmsg consumer group")
	f.BoolVar(&dryRun, "dry-run", false, "print the offsets without committing them")
	return cmd
}
