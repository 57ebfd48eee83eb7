package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/httpapi"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
	"github.com/pgmsg/pgmsg/internal/pgcluster"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// devDataDirDefault is where `pgmsg dev` keeps its PostgreSQL. It is under
// the temp directory because, run as root, the server runs as "postgres",
// which cannot enter root's home. The name is predictable, so pgcluster
// refuses it unless it is a real directory (not a symlink) owned by this
// user or the server's, and makes it 0700.
func devDataDirDefault() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("pgmsg-dev-%d", os.Geteuid()))
}

func newDev(g *globals) *cobra.Command {
	var dataDir string
	var port int
	var noServe, printURL bool
	var listen string
	var kafkaListen string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run pgmsg on a local PostgreSQL it starts itself, and demonstrate a topic",
		Long: `dev shows pgmsg working end to end on a machine with nothing configured.

Without --database-url or DATABASE_URL it starts its own PostgreSQL from the
machine's binaries in --data-dir (kept between runs; a path that is a
symlink or owned by another user is refused) on a loopback port, chosen free
on the first start and kept in the data directory (pgmsg-port), so the URL
it prints stays the same from run to run (--port sets it). TCP
connections need a password, generated on first start and kept in the data
directory (file pgmsg-password, mode 0600); the printed URL carries it.
It then migrates, creates the topic "demo" (3 partitions), publishes keyed
records, and consumes them with two independent groups, printing each step.

Then it serves the HTTP API on --listen (127.0.0.1:8080) WITHOUT auth, as
"pgmsg serve --insecure-no-auth" would, until Ctrl-C; --no-serve exits after
the demo instead. In another terminal, with the URL dev prints:

  curl -s localhost:8080/v1/pubsub/publish -H 'Content-Type: application/json' \
       -d '{"topic":"demo","records":[{"key":"alice","value":{"hello":"world"}}]}'
  curl -s 'localhost:8080/v1/pubsub/consume?topic=demo&group=curl&wait=5s'
  export DATABASE_URL="$(pgmsg dev --print-url)"
  pgmsg group list demo`,
		Example: `  pgmsg dev
  export DATABASE_URL="$(pgmsg dev --print-url)"    # in another terminal
  pgmsg dev --no-serve
  pgmsg dev --database-url postgres://localhost/app --listen 127.0.0.1:9090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if printURL {
				url := g.resolveURL()
				if url == "" {
					var err error
					if url, err = devURL(dataDir); err != nil {
						return err
					}
				}
				fmt.Fprintln(g.stdout, url)
				return nil
			}
			if !noServe {
				if err := checkPortFree(listen, "--listen"); err != nil {
					return err
				}
				if kafkaListen != "" {
					if err := checkPortFree(kafkaListen, "--kafka-listen"); err != nil {
						return err
					}
				}
			}
			if g.resolveURL() == "" {
				fmt.Fprintf(g.stdout, "starting a local PostgreSQL in %s ...\n", dataDir)
				cl, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: dataDir, Port: devPort(port, dataDir, g.stderr), PasswordAuth: true})
				if err != nil {
					if errors.Is(err, pgcluster.ErrNoBinaries) {
						return fmt.Errorf("no DATABASE_URL and no local PostgreSQL to start: %w", err)
					}
					return err
				}
				defer func() {
					fmt.Fprintln(g.stdout, "stopping the local PostgreSQL (data kept in", dataDir+")")
					_ = cl.Stop()
				}()
				if err := keepDevPort(dataDir, cl.Port); err != nil {
					return err
				}
				g.databaseURL = cl.URL
				fmt.Fprintf(g.stdout, "PostgreSQL ready at %s\n(the same URL on every start: the port is kept in %s)\n", cl.URL, devPortFile)
			}
			if err := runDemo(ctx, g); err != nil {
				return err
			}
			if noServe {
				return nil
			}
			return serveDev(ctx, g, listen, kafkaListen)
		},
	}
	cmd.Flags().BoolVar(&noServe, "no-serve", false, "exit after the demo instead of serving HTTP")
	cmd.Flags().BoolVar(&printURL, "print-url", false, "print the database URL dev uses (export DATABASE_URL=\"$(pgmsg dev --print-url)\") and exit")
	cmd.Flags().StringVar(&listen, "listen", ListenDefault, "where to serve HTTP (loopback only: there is no auth)")
	cmd.Flags().StringVar(&kafkaListen, "kafka-listen", KafkaListenDev, "where to serve the Kafka protocol (loopback only; \"\" turns it off)")
	cmd.Flags().StringVar(&dataDir, "data-dir", devDataDirDefault(), "data directory of the local PostgreSQL")
	cmd.Flags().IntVar(&port, "port", 0, "port of the local PostgreSQL (default: the last run's, kept in the data directory, else a free port)")
	return cmd
}

func runDemo(ctx context.Context, g *globals) error {
	pool, err := g.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := pgmsgmigrate.New(pool, &pgmsgmigrate.Opts{Schema: g.schema})
	if err != nil {
		return err
	}
	res, err := m.Up(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "migrated schema %s (applied %v)\n", g.schema, res.Versions)
	client, err := pgmsg.NewClient(pool, &pgmsg.Config{Schema: g.schema})
	if err != nil {
		return err
	}
	defer client.Close()

	const topic = "demo"
	if _, err := client.CreateTopic(ctx, topic, pgmsg.TopicConfig{Partitions: 3}); err != nil {
		if !errors.Is(err, pgmsg.ErrTopicExists) {
			return err
		}
		fmt.Fprintf(g.stdout, "topic %q exists already\n", topic)
	} else {
		fmt.Fprintf(g.stdout, "created topic %q with 3 partitions\n", topic)
	}

	stamp := time.Now().UTC().Format("15:04:05")
	var recs []*pgmsg.Record
	for i, user := range []string{"alice", "bob", "carol", "alice", "bob", "alice"} {
		recs = append(recs, &pgmsg.Record{Topic: topic, Key: []byte(user),
			Value: []byte(fmt.Sprintf(`{"event":"order_placed","n":%d,"at":"%s"}`, i+1, stamp))})
	}
	if err := client.Publish(ctx, recs, nil); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "published %d records in one transaction:\n", len(recs))
	for _, r := range recs {
		fmt.Fprintf(g.stdout, "  key=%-6s -> partition %d offset %d\n", r.Key, r.Partition, r.Offset)
	}

	for _, group := range []string{"billing", "audit"} {
		n := 0
		for {
			cl, err := client.Claim(ctx, topic, group, &pgmsg.ClaimOpts{MaxRecords: 100})
			if err != nil {
				return err
			}
			if cl == nil {
				break
			}
			// The first records only: a group that has much to catch up
			// on (records published over HTTP since the last run) keeps
			// the output short.
			for _, r := range cl.Records {
				if n < demoPrintMax {
					fmt.Fprintf(g.stdout, "  group %-7s read partition %d offset %d key=%s value=%s\n", group, r.Partition, r.Offset, r.Key, r.Value)
				}
				n++
			}
			if err := client.Commit(ctx, cl); err != nil {
				return err
			}
		}
		if n > demoPrintMax {
			fmt.Fprintf(g.stdout, "  group %-7s ... and %d more\n", group, n-demoPrintMax)
		}
		fmt.Fprintf(g.stdout, "group %q consumed and committed %d records\n", group, n)
	}
	fmt.Fprintln(g.stdout, "group lag per partition:")
	for _, group := range []string{"billing", "audit"} {
		lags, err := client.ListGroups(ctx, topic, group)
		if err != nil {
			return err
		}
		for _, l := range lags {
			fmt.Fprintf(g.stdout, "  %-7s partition %d: cursor %d of %d (lag %d)\n", l.Group, l.Partition, l.NextOffset, l.EndOffset, l.Lag)
		}
	}
	return nil
}

// demoPrintMax is how many records each demo group prints.
const demoPrintMax = 6

// serveDev serves the HTTP API without auth after the demo, printing how to
// try it.
func serveDev(ctx context.Context, g *globals, listen, kafkaListen string) error {
	url := g.resolveURL()
	fmt.Fprintf(g.stdout, `
Serving the HTTP API without auth (development only).
Open the dashboard at http://%[1]s/ui/ (no login needed), or try, in another terminal:

  curl -s http://%[1]s/v1/pubsub/publish -H 'Content-Type: application/json' \
       -d '{"topic":"demo","records":[{"key":"alice","value":{"hello":"world"}}]}'
  curl -s 'http://%[1]s/v1/pubsub/consume?topic=demo&group=curl&wait=5s'
  curl -s http://%[1]s/v1/queue/enqueue -H 'Content-Type: application/json' \
       -d '{"queue":"emails","jobs":[{"payload":{"to":"a@example.com"}}]}'
  curl -s 'http://%[1]s/v1/queue/claim?queue=emails&wait=5s'

and with the CLI:

  export DATABASE_URL='%[2]s'    # or "$(pgmsg dev --print-url)"
  echo 'alice:hi' | pgmsg publish demo --key-separator :
  pgmsg consume demo --group cli
  pgmsg group list demo

`, listen, url)
	return g.serve(ctx, serveOpts{listen: listen, insecureNoAuth: true, maxBodyBytes: httpapi.MaxBodyBytesDefault,
		maxRecords: httpapi.MaxRecordsDefault, maxWait: httpapi.MaxWaitDefault, shutdownTimeout: httpapi.ShutdownTimeoutDefault,
		tokenCacheTTL: httpapi.TokenCacheTTLDefault, maxHTTPConns: httpapi.MaxConnectionsDefault, maintenance: true,
		kafka: kafkaOpts{listen: kafkaListen, maxRequestBytes: kafkasrv.MaxRequestBytesDefault, autoCreate: true, autoPartitions: 1, nodeID: -1}})
}
