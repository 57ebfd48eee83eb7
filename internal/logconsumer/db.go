package logconsumer

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/deadletter"
	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/logpublish"
	"github.com/pgmsg/pgmsg/internal/logread"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/internal/telemetry"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// DB is the Log of a Consumer on the database: the Client's claim engine
// (internal/logread), publish engine (internal/logpublish, for dead
// letters), store and pool, bound to the consumer's group and claim
// options. The engines open the spans of their calls; DB opens the
// "process" span of a handler. pgmsg.NewGroupConsumer fills it in.
type DB struct {
	Reader    *logread.Reader
	Publisher *logpublish.Publisher
	Store     *store.Store
	Pool      *pgxpool.Pool
	Tracer    *telemetry.Tracer
	// Params are every claim's parameters, defaults applied (the root's
	// claimParams, which Client.Claim uses too), Member set; each claim
	// sets its Partition, RequireOwner, commit and lease on a copy.
	Params store.ClaimParams
}

// params are d.Claim of topic, of partition only unless AnyPartition.
func (d *DB) params(topic string, partition int32, requireOwner bool) store.ClaimParams {
	p := d.Params
	p.Topic = topic
	if partition != AnyPartition {
		part := partition // on the heap only when named
		p.Partition = &part
	}
	if requireOwner {
		p.RequireOwner = true
	}
	return p
}

// Claim claims at most maxRecords records on the pool, committing commit
// in the same statement (logread.Reader.Claim), without waiting for the
// WAL flush.
func (d *DB) Claim(ctx context.Context, topic string, partition int32, requireOwner bool, maxRecords int, commit *pgmsgtype.Claim) (*pgmsgtype.Claim, error) {
	p := d.params(topic, partition, requireOwner)
	p.MaxRecords = int32(min(maxRecords, math.MaxInt32))
	p.Async = true
	if commit != nil {
		p.Commit, p.CommitPartition, p.CommitEpoch = true, commit.Partition, commit.Epoch
	}
	return d.Reader.Claim(ctx, d.Pool, &p)
}

// ClaimTx claims on tx with lease.
func (d *DB) ClaimTx(ctx context.Context, tx pgx.Tx, topic string, partition int32, requireOwner bool, lease time.Duration) (*pgmsgtype.Claim, error) {
	p := d.params(topic, partition, requireOwner)
	p.Lease = lease
	return d.Reader.Claim(ctx, tx, &p)
}

func (d *DB) Commit(ctx context.Context, cl *pgmsgtype.Claim) error {
	return d.Reader.Commit(ctx, d.Pool, cl, nil)
}

func (d *DB) CommitTx(ctx context.Context, tx pgx.Tx, cl *pgmsgtype.Claim) error {
	return d.Reader.Commit(ctx, tx, cl, nil)
}

func (d *DB) Release(ctx context.Context, cl *pgmsgtype.Claim) error {
	return d.Reader.Release(ctx, d.Pool, cl)
}

func (d *DB) Extend(ctx context.Context, cl *pgmsgtype.Claim, lease time.Duration) error {
	return d.Reader.Extend(ctx, d.Pool, cl, lease)
}

// CreateGroup creates the group (group_create(), which refuses a bad
// name) unless it exists.
func (d *DB) CreateGroup(ctx context.Context, topic, start string) error {
	_, err := d.Store.GroupCreate(ctx, d.Pool, topic, d.Params.Group, start)
	return err
}

func (d *DB) BeginFunc(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, d.Pool, fn)
}

// DeadLetterPartitions creates dlq, with topic's partition count and room
// for its largest record plus the dead-letter headers
// (deadletter.HeadersRoom), unless it exists, and returns its partition
// count.
func (d *DB) DeadLetterPartitions(ctx context.Context, dlq, topic string) (int, error) {
	if m, err := d.Publisher.TopicMeta(ctx, d.Pool, dlq, false); err == nil {
		return m.Partitions, nil
	} else if !errors.Is(err, errs.UnknownTopic) {
		return 0, err
	}
	src, err := d.Publisher.TopicMeta(ctx, d.Pool, topic, false)
	if err != nil {
		return 0, err
	}
	settings, err := json.Marshal(map[string]any{
		"max_record_bytes": int(min(int64(src.MaxRecordBytes)+deadletter.HeadersRoom, math.MaxInt32)),
	})
	if err != nil {
		return 0, err
	}
	if _, err := d.Store.TopicCreate(ctx, d.Pool, dlq, int32(min(src.Partitions, math.MaxInt32)), settings); err != nil && !errors.Is(err, errs.TopicExists) {
		return 0, err
	}
	m, err := d.Publisher.TopicMeta(ctx, d.Pool, dlq, true)
	return m.Partitions, err
}

// PublishTx publishes dead letters, each to the partition set aside for
// it, in the publish engine's span.
func (d *DB) PublishTx(ctx context.Context, tx pgx.Tx, recs []*pgmsgtype.Record) error {
	return d.Publisher.PublishTx(ctx, tx, recs, true)
}

func (d *DB) StartProcessSpan(ctx context.Context, cl *pgmsgtype.Claim) (context.Context, func(error)) {
	return d.Tracer.StartProcess(ctx, cl)
}
