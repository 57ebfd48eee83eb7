// Package mirror copies pgmsg topics to Kafka (pgmsg mirror) and
// translates pgmsg consumer groups' positions into Kafka groups' committed
// offsets (pgmsg mirror groups), for moving a workload from pgmsg to Kafka
// (docs/scale-out.md).
//
// The mirror is a pgmsg consumer group: each claim's records are produced
// to the same partition of the same-named Kafka topic, with their key,
// value, headers and timestamp, by an idempotent producer waiting for all
// in-sync replicas; the claim is committed in pgmsg only once Kafka
// acknowledged every record of it. A crash therefore loses nothing, and
// records Kafka got but pgmsg did not see committed are found again on
// restart: every mirrored record carries its pgmsg offset (OffsetHeader),
// the mirror reads those of a partition's last records before it writes to
// it, and skips what Kafka already has instead of writing it twice.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgmsg/pgmsg"
)

// Defaults of Config.
const (
	GroupDefault    = "pgmsg-mirror"
	WorkersDefault  = 4
	BatchDefault    = 1000
	ProgressDefault = 5 * time.Second
)

// Config configures a Mirror.
type Config struct {
	// Client reads the pgmsg topics. Required.
	Client *pgmsg.Client
	// Kafka are the options of the Kafka clients (kgo.SeedBrokers at
	// least); the mirror adds its producer settings. Required.
	Kafka []kgo.Opt
	// Topics to mirror, each to the Kafka topic of the same name. Required.
	Topics []string
	// Group is the pgmsg consumer group whose cursor is the mirror's
	// position. Default GroupDefault.
	Group string
	// CreateTopics creates missing Kafka topics with the pgmsg topic's
	// partition count. Default: a missing topic is an error
	// (ErrKafkaTopicMissing).
	CreateTopics bool
	// Workers is how many members of Group the mirror runs (at most one
	// per partition does work). Default WorkersDefault.
	Workers int
	// Batch caps the records of one claim, which is produced at once and
	// committed at once. Default BatchDefault.
	Batch int
	// Lease is the claims' lease and SessionTimeout the members' session
	// (defaults: pgmsg's, 30s and 10s). After a crash, the next run
	// resumes the partitions once the dead member's session expired and
	// its claims' leases ran out: shorter values resume sooner.
	Lease          time.Duration
	SessionTimeout time.Duration
	// Drain makes Run return once the group has copied every record (its
	// lag is 0 on every partition). Default: run until ctx ends.
	Drain bool
	// Progress receives a line of progress every ProgressInterval (records
	// per second, skipped records, lag). Nil: no progress.
	Progress         io.Writer
	ProgressInterval time.Duration
	// Metrics, when set, is updated with the mirror's figures.
	Metrics *Metrics
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
}

// Mirror copies pgmsg topics to Kafka; see the package documentation.
type Mirror struct {
	cfg        Config
	kafka      *kgo.Client
	adm        *kadm.Client
	partitions map[string]int32

	mu    sync.Mutex
	parts map[partKey]*partState

	mirrored atomic.Int64
	skipped  atomic.Int64

	// fatal receives a condition that stops Run (ErrTruncatedHistory,
	// ErrKafkaRefused):
	// the handler's errors are otherwise redeliveries.
	fatal chan error
}

type partKey struct {
	topic     string
	partition int32
}

// partState is what the mirror knows of one Kafka partition. mu
// serialises its claims (one per partition at a time: pgmsg fences the
// others, but a lost claim's handler may still be running).
type partState struct {
	mu sync.Mutex
	// stale is set until tail has been read from Kafka, and again when
	// the partition is (re)assigned or a produce failed: another member
	// (or a failed request) may have written records meanwhile.
	stale bool
	// tail is what Kafka holds of the partition.
	tail kafkaTail
	// failures counts the produce requests that failed in a row.
	failures int
}

// Backoff after a failed produce request: it doubles with each failure
// of the same partition in a row. The claim is held (its lease extended)
// meanwhile, so the partition waits instead of being claimed again at
// once by the next poll.
const (
	produceBackoffMin = 100 * time.Millisecond
	produceBackoffMax = 10 * time.Second
)

// New checks cfg and connects the Kafka client (lazily: the first request
// connects).
func New(cfg Config) (*Mirror, error) {
	if cfg.Client == nil || len(cfg.Kafka) == 0 {
		return nil, errors.New("mirror: a pgmsg client and Kafka options are required")
	}
	if len(cfg.Topics) == 0 {
		return nil, errors.New("mirror: no topics to mirror")
	}
	if cfg.Group == "" {
		cfg.Group = GroupDefault
	}
	if cfg.Workers == 0 {
		cfg.Workers = WorkersDefault
	}
	if cfg.Batch == 0 {
		cfg.Batch = BatchDefault
	}
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = ProgressDefault
	}
	if cfg.Workers < 0 || cfg.Batch < 0 || cfg.ProgressInterval < 0 || cfg.Lease < 0 || cfg.SessionTimeout < 0 {
		return nil, errors.New("mirror: workers, batch, progress interval, lease and session timeout must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, t := range cfg.Topics {
		if err := pgmsg.ValidateName("topic", t); err != nil {
			return nil, err
		}
	}
	if err := pgmsg.ValidateName("group", cfg.Group); err != nil {
		return nil, err
	}
	opts := append(append([]kgo.Opt(nil), cfg.Kafka...),
		// Kafka's partition is the pgmsg record's, not a hash of its key.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// A claim is committed only once every in-sync replica has it.
		// (Idempotence is kgo's default: its retries write nothing twice.)
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return &Mirror{cfg: cfg, kafka: cl, adm: kadm.NewClient(cl), parts: map[partKey]*partState{}, fatal: make(chan error, 1)}, nil
}

// Close closes the Kafka client.
func (m *Mirror) Close() { m.kafka.Close() }

// Stats are the mirror's counts since it started.
type Stats struct {
	// Mirrored counts records produced to Kafka and acknowledged.
	Mirrored int64
	// Skipped counts records claimed again that Kafka already held (from
	// a run that stopped between Kafka's acknowledgement and the pgmsg
	// commit): the duplicates at-least-once would have written.
	Skipped int64
}

// Stats returns the counts so far.
func (m *Mirror) Stats() Stats {
	return Stats{Mirrored: m.mirrored.Load(), Skipped: m.skipped.Load()}
}

// prepare reads the topics' partition counts and checks (or creates) the
// Kafka topics.
func (m *Mirror) prepare(ctx context.Context) error {
	m.partitions = map[string]int32{}
	for _, t := range m.cfg.Topics {
		d, err := m.cfg.Client.DescribeTopic(ctx, t)
		if err != nil {
			return err
		}
		m.partitions[t] = int32(d.Partitions)
	}
	return ensureTopics(ctx, m.adm, m.partitions, m.cfg.CreateTopics, m.cfg.Logger)
}

// Run mirrors until ctx ends (then it returns nil) or, with Drain, until
// the group's lag is 0. It returns the first error that is not a
// transient one of the database (pgmsg's Consumer retries those; failed
// produce requests are retried with the claim), or ErrKafkaRefused (MR006)
// when Kafka refuses the mirror's credentials or rights, which no retry
// mends.
func (m *Mirror) Run(ctx context.Context) error {
	if err := m.prepare(ctx); err != nil {
		if refused(err) {
			return newError(ErrKafkaRefused, fmt.Sprintf("Kafka refuses the mirror (check --sasl-* and the principal's rights): %v", err))
		}
		return err
	}
	total := 0
	for _, n := range m.partitions {
		total += int(n)
	}
	workers := min(m.cfg.Workers, total)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		cn, err := m.cfg.Client.NewGroupConsumer(m.cfg.Group, m.cfg.Topics, &pgmsg.ConsumerOpts{
			Claim:             pgmsg.ClaimOpts{MaxRecords: m.cfg.Batch, Lease: m.cfg.Lease},
			SessionTimeout:    m.cfg.SessionTimeout,
			HeartbeatInterval: heartbeat(m.cfg.SessionTimeout),
			OnAssigned:        m.markStale,
		})
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cn.Close()
			if err := cn.Run(rctx, m.handle); err != nil && rctx.Err() == nil {
				errc <- err
			}
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()

	tick := m.cfg.ProgressInterval
	if m.cfg.Drain || m.cfg.Metrics != nil {
		tick = min(tick, 200*time.Millisecond)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	lastReport, lastCount := time.Now(), int64(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case err := <-m.fatal:
			return err
		case <-t.C:
		}
		lag, known, err := m.lag(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			m.cfg.Logger.Warn("pgmsg mirror: cannot read the group's lag", "error", err)
			continue
		}
		if m.cfg.Progress != nil && time.Since(lastReport) >= m.cfg.ProgressInterval {
			s := m.Stats()
			secs := time.Since(lastReport).Seconds()
			fmt.Fprintf(m.cfg.Progress, "pgmsg mirror: %d records mirrored (%.0f/s), %d skipped (already in Kafka), lag %d\n",
				s.Mirrored, float64(s.Mirrored-lastCount)/secs, s.Skipped, lag)
			lastReport, lastCount = time.Now(), s.Mirrored
		}
		if m.cfg.Drain && known && lag == 0 {
			return nil
		}
	}
}

// lag reads the group's lag per partition (updating the metrics) and
// returns its sum; known is false while the group does not cover every
// partition yet (it has not claimed from all topics).
func (m *Mirror) lag(ctx context.Context) (sum int64, known bool, err error) {
	known = true
	for _, t := range m.cfg.Topics {
		gps, err := m.cfg.Client.ListGroups(ctx, t, m.cfg.Group)
		if err != nil {
			return 0, false, err
		}
		if int32(len(gps)) < m.partitions[t] {
			known = false
		}
		for _, gp := range gps {
			sum += gp.Lag
			if m.cfg.Metrics != nil {
				m.cfg.Metrics.lag.WithLabelValues(t, strconv.Itoa(int(gp.Partition))).Set(float64(gp.Lag))
			}
		}
	}
	return sum, known, nil
}

// heartbeat is the members' heartbeat interval: pgmsg's default, or a
// third of a shorter session timeout.
func heartbeat(session time.Duration) time.Duration {
	if session > 0 && session < 3*pgmsg.HeartbeatIntervalDefault {
		return session / 3
	}
	return 0
}

func (m *Mirror) part(topic string, partition int32) *partState {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := partKey{topic, partition}
	ps := m.parts[k]
	if ps == nil {
		ps = &partState{stale: true, tail: kafkaTail{upTo: -1}}
		m.parts[k] = ps
	}
	return ps
}

// markStale is the consumers' OnAssigned: a partition that comes (back)
// to this process may have been written by another mirror meanwhile.
func (m *Mirror) markStale(topic string, partitions []int32) {
	for _, p := range partitions {
		ps := m.part(topic, p)
		ps.mu.Lock()
		ps.stale = true
		ps.mu.Unlock()
	}
}

// handle produces a claim's records to Kafka, skipping those Kafka holds
// already, and returns once Kafka acknowledged all of them: the consumer
// commits the claim only then.
func (m *Mirror) handle(ctx context.Context, cl *pgmsg.Claim) error {
	err := m.handleClaim(ctx, cl)
	if refused(err) {
		select {
		case m.fatal <- newError(ErrKafkaRefused, fmt.Sprintf("Kafka refuses the mirror (check --sasl-* and the principal's rights to write and read %q): %v", cl.Topic, err)):
		default:
		}
	}
	return err
}

// refused reports whether err is Kafka refusing the client's credentials
// or their rights, which no retry mends.
func refused(err error) bool {
	for _, e := range []error{kerr.SaslAuthenticationFailed, kerr.TopicAuthorizationFailed,
		kerr.ClusterAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed,
		kerr.IllegalSaslState, kerr.UnsupportedSaslMechanism} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (m *Mirror) handleClaim(ctx context.Context, cl *pgmsg.Claim) error {
	ps := m.part(cl.Topic, cl.Partition)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.stale {
		tail, err := readTail(ctx, m.adm, m.cfg.Kafka, cl.Topic, cl.Partition, 2*int64(m.cfg.Batch))
		if err != nil {
			return err
		}
		ps.tail, ps.stale = tail, false
		if err := m.checkTailEpoch(ctx, cl, &tail); err != nil {
			ps.stale = true
			select {
			case m.fatal <- err:
			default:
			}
			return err
		}
	}
	recs := make([]*kgo.Record, 0, len(cl.Records))
	behind := 0 // records Kafka gets after later ones of the claim
	for _, r := range cl.Records {
		if ps.tail.holds(r.Offset) {
			behind = len(recs) // every record to write so far precedes this one
			continue
		}
		recs = append(recs, kafkaRecord(r, cl.LogEpoch))
	}
	skipped := len(cl.Records) - len(recs)
	if behind > 0 {
		m.cfg.Logger.Warn("pgmsg mirror: Kafka accepted part of a claim after refusing records before it: those are written now, after the later ones (out of order in Kafka; none lost, none twice)",
			"topic", cl.Topic, "partition", cl.Partition, "records", behind)
	}
	if len(recs) > 0 {
		if err := m.kafka.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			// Part of the batch may have been written: read the tail again
			// before the retry.
			ps.stale = true
			if m.cfg.Metrics != nil {
				m.cfg.Metrics.errors.Inc()
			}
			backoff := min(produceBackoffMin<<min(ps.failures, 10), produceBackoffMax)
			ps.failures++
			m.cfg.Logger.Warn("pgmsg mirror: produce to Kafka failed; the claim is retried", "topic", cl.Topic,
				"partition", cl.Partition, "records", len(recs), "backoff", backoff, "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			return fmt.Errorf("kafka: produce to %s/%d: %w", cl.Topic, cl.Partition, err)
		}
		ps.failures = 0
	}
	ps.tail.wrote(cl.Records[len(cl.Records)-1].Offset)
	m.mirrored.Add(int64(len(recs)))
	m.skipped.Add(int64(skipped))
	if m.cfg.Metrics != nil {
		p := strconv.Itoa(int(cl.Partition))
		m.cfg.Metrics.mirrored.WithLabelValues(cl.Topic, p).Add(float64(len(recs)))
		m.cfg.Metrics.skipped.WithLabelValues(cl.Topic, p).Add(float64(skipped))
	}
	if skipped > 0 {
		m.cfg.Logger.Debug("pgmsg mirror: skipped records Kafka already had", "topic", cl.Topic,
			"partition", cl.Partition, "records", skipped)
	}
	return nil
}

// checkTailEpoch fails with ErrTruncatedHistory when Kafka's tail of the
// claim's partition was mirrored in another log epoch of the pgmsg
// partition than the claim's, and reaches past where that epoch ends on
// the pgmsg primary: a failover lost those records in pgmsg, their
// offsets now name other records, and skipping "what Kafka holds" by
// offset would skip the new ones.
func (m *Mirror) checkTailEpoch(ctx context.Context, cl *pgmsg.Claim, tail *kafkaTail) error {
	if tail.high < 0 || tail.epoch == cl.LogEpoch {
		return nil
	}
	_, end, err := m.cfg.Client.LogEpochEnd(ctx, cl.Topic, cl.Partition, tail.epoch)
	if err != nil {
		return err
	}
	if tail.high < end {
		return nil
	}
	return newError(ErrTruncatedHistory, fmt.Sprintf(
		"kafka topic %s partition %d holds pgmsg offsets up to %d of log epoch %d, which ends at offset %d on the pgmsg primary "+
			"(now in log epoch %d): a failover lost those records in pgmsg and their offsets now name other records; "+
			"docs/scale-out.md says how to resume", cl.Topic, cl.Partition, tail.high, tail.epoch, end, cl.LogEpoch))
}

// kafkaRecord is r as the mirror writes it: same topic, partition, key,
// value and timestamp (Kafka keeps milliseconds), r's headers by name,
// then LogEpochHeader (when the log epoch is not 0) and OffsetHeader.
func kafkaRecord(r *pgmsg.Record, logEpoch int32) *kgo.Record {
	names := make([]string, 0, len(r.Headers))
	for k := range r.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	hs := make([]kgo.RecordHeader, 0, len(names)+1)
	for _, k := range names {
		hs = append(hs, kgo.RecordHeader{Key: k, Value: r.Headers[k]})
	}
	if logEpoch != 0 {
		hs = append(hs, kgo.RecordHeader{Key: LogEpochHeader, Value: strconv.AppendInt(nil, int64(logEpoch), 10)})
	}
	hs = append(hs, kgo.RecordHeader{Key: OffsetHeader, Value: strconv.AppendInt(nil, r.Offset, 10)})
	return &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value,
		Headers: hs, Timestamp: r.Timestamp}
}
