package logpublish

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// The engine against PostgreSQL: each test has a schema of its own and a
// Publisher on it, configured as the root's Client configures its own.
// Publishing through the Client (its options, the Producer, tracing) is
// tested in the root.

func TestMain(m *testing.M) { pgtest.Main(m) }

// Record is the record type the engine publishes (the root's pgmsg.Record).
type Record = pgmsgtype.Record

// testPublisher is a Publisher on b's schema with the store it uses, and
// the test's context.
type testPublisher struct {
	*Publisher
	store *store.Store
	b     *pgtest.Bundle
	ctx   context.Context
	t     *testing.T
}

// newTestPublisher makes a schema of its own for t (at most maxConns
// connections) and a Publisher on it, with a context that ends after
// timeout. The Publisher is closed when the test ends.
func newTestPublisher(t *testing.T, maxConns int32, timeout time.Duration) *testPublisher {
	t.Helper()
	b := pgtest.Schema(t, &pgtest.Opts{MaxConns: maxConns})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	st := store.New(b.Schema)
	p := New(st, b.Pool, Config{
		MetadataMaxAge:      time.Minute,
		Channel:             b.Schema + "_log",
		Logger:              slog.Default(),
		BackpressureTimeout: 30 * time.Second,
		CheckTime:           func(string, time.Time) error { return nil },
	})
	t.Cleanup(p.Close)
	return &testPublisher{Publisher: p, store: st, b: b, ctx: ctx, t: t}
}

// createTopic creates topic with partitions and the settings given
// (segment_records, max_record_bytes, ...), as Client.CreateTopic does.
func (p *testPublisher) createTopic(topic string, partitions int32, settings map[string]any) {
	p.t.Helper()
	if settings == nil {
		settings = map[string]any{}
	}
	raw, err := json.Marshal(settings)
	require.NoError(p.t, err)
	_, err = p.store.TopicCreate(p.ctx, p.b.Pool, topic, partitions, raw)
	require.NoError(p.t, err)
}

// fetch reads up to max records of the partition from offset from, as
// Client.Fetch does.
func (p *testPublisher) fetch(topic string, partition int32, from int64, max int32) []*Record {
	p.t.Helper()
	rows, err := p.store.RecordFetch(p.ctx, p.b.Pool, topic, partition, from, max)
	require.NoError(p.t, err)
	out := make([]*Record, len(rows))
	for i, r := range rows {
		h, err := store.DecodeHeaders(r.Headers)
		require.NoError(p.t, err)
		out[i] = &Record{Topic: topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
			Headers: h, Timestamp: r.Timestamp}
	}
	return out
}

// publish is Client.Publish: records planned and sent, the partition
// chosen by key or spread.
func (p *testPublisher) publish(ctx context.Context, records []*Record) error {
	_, err := p.Publish(ctx, records, false, Idempotence{})
	return err
}

// publishManual is Client.Publish with PublishOpts.ManualPartition: each
// record goes to the partition it names.
func (p *testPublisher) publishManual(ctx context.Context, records []*Record) error {
	_, err := p.Publish(ctx, records, true, Idempotence{})
	return err
}
