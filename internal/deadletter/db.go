package deadletter

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/internal/logpublish"
	"github.com/pgmsg/pgmsg/internal/logread"
	"github.com/pgmsg/pgmsg/internal/store"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// DB is the Admin of listing and replaying on the database: the Client's
// store and pool, its claim engine (internal/logread: the replay group's
// claim and commit, in their spans) and its publish engine
// (internal/logpublish: the replay's publish, in its span).
// pgmsg.Client.DeadLetters and ReplayDeadLetters fill it in.
type DB struct {
	Store     *store.Store
	Pool      *pgxpool.Pool
	Reader    *logread.Reader
	Publisher *logpublish.Publisher
	// Claim is the replay claims' parameters with the claim options'
	// defaults applied (the root's claimParams); ClaimTx sets the topic,
	// group, start and cap on a copy.
	Claim store.ClaimParams
}

// Partitions lists dlq's partitions (errs.UnknownTopic when dlq does not
// exist).
func (d *DB) Partitions(ctx context.Context, dlq string) ([]Range, error) {
	if _, err := d.Store.TopicGet(ctx, d.Pool, dlq); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, errs.New(errs.UnknownTopic, "unknown topic %q", dlq)
		}
		return nil, err
	}
	rows, err := d.Store.TopicDescribe(ctx, d.Pool, dlq)
	if err != nil {
		return nil, err
	}
	out := make([]Range, len(rows))
	for i, r := range rows {
		out[i] = Range{Partition: r.Partition, StartOffset: r.StartOffset, NextOffset: r.NextOffset}
	}
	return out, nil
}

// Positions returns group's next offset per partition of dlq.
func (d *DB) Positions(ctx context.Context, dlq, group string) (map[int32]int64, error) {
	rows, err := d.Store.GroupList(ctx, d.Pool, dlq, group)
	if err != nil {
		return nil, err
	}
	next := map[int32]int64{}
	for _, g := range rows {
		next[g.Partition] = g.NextOffset
	}
	return next, nil
}

// Fetch reads up to max records of partition of dlq from offset from.
func (d *DB) Fetch(ctx context.Context, dlq string, partition int32, from int64, max int) ([]*pgmsgtype.Record, error) {
	rows, err := d.Store.RecordFetch(ctx, d.Pool, dlq, partition, from, int32(min(max, fetchMax)))
	if err != nil {
		return nil, err
	}
	out := make([]*pgmsgtype.Record, len(rows))
	for i, r := range rows {
		h, err := store.DecodeHeaders(r.Headers)
		if err != nil {
			return nil, err
		}
		out[i] = &pgmsgtype.Record{Topic: dlq, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
			Headers: h, Timestamp: r.Timestamp}
	}
	return out, nil
}

func (d *DB) BeginFunc(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, d.Pool, fn)
}

// ClaimTx claims up to max records of dlq for group on tx, from the
// earliest record when the group is new.
func (d *DB) ClaimTx(ctx context.Context, tx pgx.Tx, dlq, group string, max int) (*pgmsgtype.Claim, error) {
	p := d.Claim
	p.Topic, p.Group, p.Start, p.MaxRecords = dlq, group, "earliest", int32(min(max, fetchMax))
	return d.Reader.Claim(ctx, tx, &p)
}

func (d *DB) PublishTx(ctx context.Context, tx pgx.Tx, recs []*pgmsgtype.Record) error {
	return d.Publisher.PublishTx(ctx, tx, recs, true)
}

func (d *DB) CommitTx(ctx context.Context, tx pgx.Tx, cl *pgmsgtype.Claim) error {
	return d.Reader.Commit(ctx, tx, cl, nil)
}
