package cli

import (
	"fmt"
	"log/slog"
	"net"
	"os"

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
	// ready, if set, receives the listener's address (tests).
	ready func(addr string)
}

func (o *kafkaOpts) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.listen, "kafka-listen", os.Getenv("PGMSG_KAFKA_LISTEN"), "serve the Kafka protocol on this address, e.g. 127.0.0.1:9092 (default: off) ($PGMSG_KAFKA_LISTEN)")
	f.StringVar(&o.advertise, "kafka-advertise", os.Getenv("PGMSG_KAFKA_ADVERTISE"), "host:port Kafka clients are told to connect to (default: --kafka-listen's address) ($PGMSG_KAFKA_ADVERTISE)")
	f.Int32Var(&o.maxRequestBytes, "kafka-max-request-bytes", kafkasrv.MaxRequestBytesDefault, "largest Kafka request accepted; a larger one closes the connection before it is read")
	f.BoolVar(&o.autoCreate, "kafka-auto-create-topics", false, "create a topic a Kafka client's Metadata request names, as auto.create.topics.enable does")
	f.IntVar(&o.autoPartitions, "kafka-auto-create-partitions", 1, "partitions of a topic created by --kafka-auto-create-topics")
}

// check refuses what cannot be served before anything is started. The
// listener has no authentication yet: like the HTTP API without tokens,
// it only binds a loopback address.
func (o *kafkaOpts) check() error {
	if o.listen == "" {
		if o.advertise != "" {
			return fmt.Errorf("--kafka-advertise needs --kafka-listen")
		}
		return nil
	}
	if !httpapi.IsLoopback(o.listen) {
		return fmt.Errorf("--kafka-listen %s is refused: the Kafka listener has no authentication, so it only binds a loopback address (127.0.0.1:9092)", o.listen)
	}
	if o.advertise != "" {
		if _, _, err := net.SplitHostPort(o.advertise); err != nil {
			return fmt.Errorf("--kafka-advertise must be host:port: %w", err)
		}
	}
	if o.maxRequestBytes <= 0 {
		return fmt.Errorf("--kafka-max-request-bytes must be positive, got %d", o.maxRequestBytes)
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
	// The group coordinator (consumer groups, committed offsets). Owns:
	// every group, until the broker registry spreads them over processes.
	groups, err := kafkagroup.New(kafkagroup.Config{Client: client, Logger: logger})
	if err != nil {
		return nil, err
	}
	srv, err := kafkasrv.New(kafkasrv.Config{
		Client: client, Advertise: o.advertise, MaxRequestBytes: o.maxRequestBytes,
		AutoCreateTopics: o.autoCreate, AutoCreatePartitions: o.autoPartitions, Logger: logger,
		Groups: groups,
	})
	if err != nil {
		groups.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		groups.Close()
		return nil, fmt.Errorf("cannot listen on --kafka-listen %s: %w", o.listen, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil {
			logger.Error("pgmsg: Kafka listener stopped", "addr", o.listen, "error", err)
		}
	}()
	fmt.Fprintf(g.stdout, "pgmsg serving Kafka on %s (advertised as %s; no authentication, loopback only)\n", ln.Addr(), srv.Addr())
	if o.ready != nil {
		o.ready(ln.Addr().String())
	}
	return func() {
		_ = srv.Close()
		<-done
		groups.Close()
	}, nil
}
