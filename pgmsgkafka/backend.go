// Package pgmsgkafka is the Kafka implementation of pgmsg's log
// interfaces (pgmsg.Backend, LogProducer, LogConsumer, LogAdmin), on
// franz-go (kgo and kadm). An application written against the interfaces
// switches from PostgreSQL to Kafka by building its backend here instead
// of with pgmsg.NewBackend:
//
//	backend, err := pgmsgkafka.New(&pgmsgkafka.Config{Brokers: []string{"localhost:9092"}})
//
// Keys go to the partitions pgmsg picks (pgmsg.PartitionForKey is Kafka's
// murmur2 partitioner), headers and timestamps are carried over, and
// errors match pgmsg's sentinels (pgmsg.ErrUnknownTopic ...) with their
// codes. docs/backends.md lists what differs.
package pgmsgkafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
)

// Config configures a Backend.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// TLS turns TLS on for every connection to the brokers (a CA file,
	// a client certificate, the server name). nil: plain TCP.
	TLS *TLSConfig
	// SASL authenticates every connection (PLAIN, SCRAM-SHA-256/512,
	// OAUTHBEARER). nil: no SASL.
	SASL *SASLConfig
	// Opts are further kgo options for every client the backend creates
	// (a custom dialer, a TransactionalID ...); they apply after the
	// backend's own and those of TLS and SASL, so they win.
	Opts []kgo.Opt
	// Logger receives warnings (failed commits). Default slog.Default().
	Logger *slog.Logger
}

// Backend is pgmsg's log on a Kafka cluster. Safe for concurrent use.
type Backend struct {
	cfg      Config
	security []kgo.Opt   // of cfg.TLS and cfg.SASL
	client   *kgo.Client // for Publish and the admin calls
	admin    *kadm.Client
}

var _ pgmsg.Backend = (*Backend)(nil)

// New connects to cfg.Brokers (lazily: the first call dials). Close the
// backend when done.
func New(cfg *Config) (*Backend, error) {
	if cfg == nil || len(cfg.Brokers) == 0 {
		return nil, pgmsg.NewError(pgmsg.ErrInvalidArgument, nil, "pgmsgkafka: Config.Brokers is required")
	}
	c := *cfg
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	sec, err := SecurityOpts(c.TLS, c.SASL)
	if err != nil {
		return nil, err
	}
	b := &Backend{cfg: c, security: sec}
	cl, err := b.newClient()
	if err != nil {
		return nil, err
	}
	b.client = cl
	b.admin = kadm.NewClient(cl)
	return b, nil
}

// newClient returns a kgo client on the backend's brokers with pgmsg's
// partitioner, then opts, then TLS and SASL, then Config.Opts.
func (b *Backend) newClient(opts ...kgo.Opt) (*kgo.Client, error) {
	all := []kgo.Opt{kgo.SeedBrokers(b.cfg.Brokers...), kgo.RecordPartitioner(newPartitioner())}
	all = append(all, opts...)
	all = append(all, b.security...)
	all = append(all, b.cfg.Opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, pgmsg.NewError(pgmsg.ErrInvalidArgument, err, "pgmsgkafka: %v", err)
	}
	return cl, nil
}

// Client is the kgo client behind Publish and the admin calls, for what
// the interfaces leave out (Kafka transactions, further admin calls).
func (b *Backend) Client() *kgo.Client { return b.client }

// Close closes the backend's own client. Producers and consumers it
// created are closed by their owners.
func (b *Backend) Close() { b.client.Close() }

// Publish produces records and waits for all of them. Unlike on
// PostgreSQL it is not atomic: each partition's records are stored or
// fail on their own; the first error is returned.
func (b *Backend) Publish(ctx context.Context, records []*pgmsg.Record, opts *pgmsg.PublishOpts) error {
	if len(records) == 0 {
		return pgmsg.NewError(pgmsg.ErrEmptyBatch, nil, "no records to publish")
	}
	manual := opts != nil && opts.ManualPartition
	for _, r := range records {
		if err := checkRecord(r, manual); err != nil {
			return err
		}
	}
	if err := b.checkPlacement(ctx, records, manual); err != nil {
		return err
	}
	errs := make([]error, len(records))
	done := make(chan struct{}, len(records))
	for i, r := range records {
		produce(ctx, b.client, r, manual, false, func(_ *pgmsg.Record, err error) {
			errs[i] = err
			done <- struct{}{}
		})
	}
	for range records {
		<-done
	}
	return firstError(errs)
}

// checkPlacement fails with ErrUnknownTopic when a record's topic does
// not exist, and under manual partitioning with ErrPartitionOutOfRange
// when its partition is not one of the topic's: bad input is refused
// before anything is written (one metadata request per call).
func (b *Backend) checkPlacement(ctx context.Context, records []*pgmsg.Record, manual bool) error {
	partitions := map[string]int{}
	for _, r := range records {
		n, ok := partitions[r.Topic]
		if !ok {
			td, err := b.topicDetail(ctx, r.Topic)
			if err != nil {
				return err
			}
			n = len(td.Partitions)
			partitions[r.Topic] = n
		}
		if manual && int(r.Partition) >= n {
			return pgmsg.NewError(pgmsg.ErrPartitionOutOfRange, nil, "partition %d out of range: topic %q has %d partitions", r.Partition, r.Topic, n)
		}
	}
	return nil
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkRecord does the checks pgmsg's Publish does before a round trip.
func checkRecord(r *pgmsg.Record, manual bool) error {
	if r == nil {
		return pgmsg.NewError(pgmsg.ErrInvalidArgument, nil, "nil record")
	}
	if err := pgmsg.ValidateName("topic", r.Topic); err != nil {
		return err
	}
	if manual && r.Partition < 0 {
		return pgmsg.NewError(pgmsg.ErrPartitionOutOfRange, nil, "partition %d out of range", r.Partition)
	}
	return nil
}
