package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/httpapi"
	"github.com/pgmsg/pgmsg/internal/kafkagroup"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// KafkaListenDev is where `pgmsg dev` serves Kafka.
const KafkaListenDev = "127.0.0.1:9092"

// kafkaOpts are serve's Kafka listener flags.
type kafkaOpts struct {
	listen          string
	advertise       string
	maxRequestBytes int32
	autoCreate      bool
	autoPartitions  int
	nodeID          int32
	sessionTimeout  time.Duration
	tlsCert         string
	tlsKey          string
	// noAuth: serve's --insecure-no-auth (every Kafka request allowed).
	noAuth bool
	// tls is --kafka-tls-cert/--kafka-tls-key loaded (check).
	tls *tls.Config
	// ready, if set, receives the listener's address (tests).
	ready func(addr string)
}

func (o *kafkaOpts) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.listen, "kafka-listen", os.Getenv("PGMSG_KAFKA_LISTEN"), "serve the Kafka protocol on this address, e.g. 127.0.0.1:9092 (default: off) ($PGMSG_KAFKA_LISTEN)")
	f.StringVar(&o.advertise, "kafka-advertise", os.Getenv("PGMSG_KAFKA_ADVERTISE"), "host:port Kafka clients are told to connect to (default: --kafka-listen's address) ($PGMSG_KAFKA_ADVERTISE)")
	f.Int32Var(&o.maxRequestBytes, "kafka-max-request-bytes", kafkasrv.MaxRequestBytesDefault, "largest Kafka request accepted; a larger one closes the connection before it is read")
	f.Int32Var(&o.nodeID, "kafka-node-id", -1, "this process's Kafka broker id (-1: the smallest no live pgmsg serve of the schema holds)")
	f.DurationVar(&o.sessionTimeout, "kafka-session-timeout", kafkasrv.SessionTimeoutDefault, "how long a pgmsg serve stays in the Kafka cluster without renewing its registration; its partitions and groups move to the others after it")
	f.StringVar(&o.tlsCert, "kafka-tls-cert", os.Getenv("PGMSG_KAFKA_TLS_CERT"), "PEM certificate (chain) the Kafka listener speaks TLS with; needs --kafka-tls-key ($PGMSG_KAFKA_TLS_CERT)")
	f.StringVar(&o.tlsKey, "kafka-tls-key", os.Getenv("PGMSG_KAFKA_TLS_KEY"), "PEM private key of --kafka-tls-cert ($PGMSG_KAFKA_TLS_KEY)")
	f.BoolVar(&o.autoCreate, "kafka-auto-create-topics", false, "create a topic a Kafka client's Metadata request names, as auto.create.topics.enable does")
	f.IntVar(&o.autoPartitions, "kafka-auto-create-partitions", 1, "partitions of a topic created by --kafka-auto-create-topics")
}

// check refuses what cannot be served before anything is started. Kafka
// clients authenticate with SASL/PLAIN, the password a pgmsg token's
// secret, or SASL/SCRAM-SHA-256/512 (username the token's name); with
// PLAIN and without TLS that secret crosses the network in clear, so a
// non-loopback --kafka-listen needs --kafka-tls-cert. With serve's
// --insecure-no-auth nothing is authenticated: loopback only, as for
// HTTP.
func (o *kafkaOpts) check() error {
	if o.listen == "" {
		if o.advertise != "" {
			return fmt.Errorf("--kafka-advertise needs --kafka-listen")
		}
		if o.tlsCert != "" || o.tlsKey != "" {
			return fmt.Errorf("--kafka-tls-cert and --kafka-tls-key need --kafka-listen")
		}
		return nil
	}
	loopback := httpapi.IsLoopback(o.listen)
	switch {
	case o.noAuth && !loopback:
		return fmt.Errorf("--kafka-listen %s is refused with --insecure-no-auth: it would let anyone who can reach it read, write and delete every topic; listen on 127.0.0.1 or drop --insecure-no-auth (Kafka clients then authenticate with SASL/PLAIN or SCRAM and a token)", o.listen)
	case !loopback && o.tlsCert == "":
		return fmt.Errorf("--kafka-listen %s needs --kafka-tls-cert and --kafka-tls-key: SASL/PLAIN would send tokens in clear", o.listen)
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return fmt.Errorf("--kafka-tls-cert and --kafka-tls-key go together (both or neither)")
	case o.tlsCert != "":
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return fmt.Errorf("cannot load --kafka-tls-cert %s and --kafka-tls-key %s: %w", o.tlsCert, o.tlsKey, err)
		}
		o.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if o.advertise != "" {
		if _, _, err := net.SplitHostPort(o.advertise); err != nil {
			return fmt.Errorf("--kafka-advertise must be host:port: %w", err)
		}
	}
	if o.maxRequestBytes <= 0 {
		return fmt.Errorf("--kafka-max-request-bytes must be positive, got %d", o.maxRequestBytes)
	}
	if o.nodeID < -1 {
		return fmt.Errorf("--kafka-node-id must be -1 (automatic) or more, got %d", o.nodeID)
	}
	if o.sessionTimeout != 0 && o.sessionTimeout < time.Second {
		return fmt.Errorf("--kafka-session-timeout must be at least 1s, got %v", o.sessionTimeout)
	}
	if o.autoPartitions < 1 || o.autoPartitions > 1024 {
		return fmt.Errorf("--kafka-auto-create-partitions must be 1 to 1024, got %d", o.autoPartitions)
	}
	return nil
}

// startKafka starts the Kafka listener when --kafka-listen is set, and
// returns a function that stops it (and waits for it).
func (g *globals) startKafka(o kafkaOpts, client *pgmsg.Client, logger *slog.Logger) (stop func(), err error) {
	if o.listen == "" {
		return func() {}, nil
	}
	// The group coordinator (consumer groups, committed offsets): this
	// process coordinates the groups the broker registry's rule gives it
	// (every listener of the schema computes the same), and the listener
	// authorizes its requests.
	var srv *kafkasrv.Server
	groups, err := kafkagroup.New(kafkagroup.Config{Client: client, Logger: logger,
		Owns:      func(group string) bool { return srv.OwnsGroup(group) },
		Authorize: func(ctx context.Context, kind, name, op string) bool { return srv.Authorize(ctx, kind, name, op) },
	})
	if err != nil {
		return nil, err
	}
	tlsConfig := o.tls
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		groups.Close()
		return nil, fmt.Errorf("cannot listen on --kafka-listen %s: %w", o.listen, err)
	}
	// Without --kafka-advertise, the listener's own address (its port
	// known now, also for :0), set before anything reads it.
	advertise := o.advertise
	if advertise == "" {
		advertise = ln.Addr().String()
	}
	srv, err = kafkasrv.New(kafkasrv.Config{
		RequireAuth: !o.noAuth, TLS: tlsConfig,
		Client: client, Advertise: advertise, MaxRequestBytes: o.maxRequestBytes,
		AutoCreateTopics: o.autoCreate, AutoCreatePartitions: o.autoPartitions, Logger: logger,
		Groups: groups, Cluster: true, NodeID: o.nodeID, SessionTimeout: o.sessionTimeout,
	})
	if err != nil {
		_ = ln.Close()
		groups.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil {
			logger.Error("pgmsg: Kafka listener stopped", "addr", o.listen, "error", err)
		}
	}()
	auth := "SASL/PLAIN or SCRAM-SHA-256/512 with a token as the password (SCRAM username: the token's name)"
	if o.noAuth {
		auth = "INSECURE: no authentication"
	}
	proto := "plaintext"
	if tlsConfig != nil {
		proto = "TLS"
	}
	fmt.Fprintf(g.stdout, "pgmsg serving Kafka on %s (%s, %s; advertised as %s)\n", ln.Addr(), proto, auth, srv.Addr())
	if o.ready != nil {
		o.ready(ln.Addr().String())
	}
	return func() {
		_ = srv.Close()
		<-done
		groups.Close()
	}, nil
}
