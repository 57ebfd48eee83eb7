package deadletter

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Admin is what listing and replaying dead letters need of the database;
// DB implements it (tests may use their own). Errors are the library's (internal/errs sentinels,
// mapped database errors).
type Admin interface {
	// Partitions lists the partitions of dlq with their first and next
	// offsets (errs.UnknownTopic when dlq does not exist).
	Partitions(ctx context.Context, dlq string) ([]Range, error)
	// Positions returns group's next offset per partition of dlq.
	Positions(ctx context.Context, dlq, group string) (map[int32]int64, error)
	// Fetch reads up to max records of partition of dlq from offset from.
	Fetch(ctx context.Context, dlq string, partition int32, from int64, max int) ([]*pgmsgtype.Record, error)
	// BeginFunc runs fn in a transaction of its own, committed when fn
	// returns nil.
	BeginFunc(ctx context.Context, fn func(tx pgx.Tx) error) error
	// ClaimTx claims up to max records of dlq for group on tx, a group
	// that does not exist yet starting at the earliest record.
	ClaimTx(ctx context.Context, tx pgx.Tx, dlq, group string, max int) (*pgmsgtype.Claim, error)
	// PublishTx publishes recs (each to its own partition) on tx.
	PublishTx(ctx context.Context, tx pgx.Tx, recs []*pgmsgtype.Record) error
	// CommitTx commits cl on tx.
	CommitTx(ctx context.Context, tx pgx.Tx, cl *pgmsgtype.Claim) error
}

// Range is a partition of a dead-letter topic and the offsets it holds.
type Range struct {
	Partition   int32
	StartOffset int64
	NextOffset  int64
}

// Listed is a dead letter as List finds it.
type Listed struct {
	Record *pgmsgtype.Record
	Source
	// Replayed is true once Replay published it back.
	Replayed bool
}

// fetchMax is how many records of a dead-letter topic one read or one
// replay transaction takes.
const fetchMax = 500

// List lists group's dead letters of topic in dlq, oldest first in each
// partition of dlq, at most limit; none when dlq does not exist. Whether
// each was replayed is told by the position of group's replay group
// (ReplayGroupSuffix) on dlq.
//
// Its reads (Partitions, Positions, each Fetch) are statements of their
// own on the pool, not one snapshot: a listing writes nothing, and what
// may change between them changes no answer into a wrong one. Offsets
// only grow; a Fetch reads the records still there from its offset on
// (retention removes only the oldest); a record published meanwhile is
// listed or left for the next listing; and a replay committed after
// Positions shows its records not yet replayed, as a listing a moment
// earlier would. A REPEATABLE READ transaction over the listing's
// fetches (up to limit/fetchMax per partition) would hold back vacuum's
// horizon for as long. Replay's claim, publish and commit, which must be
// atomic, share BeginFunc's transaction.
func List(ctx context.Context, a Admin, dlq, topic, group string, limit int) ([]Listed, error) {
	parts, err := a.Partitions(ctx, dlq)
	if errors.Is(err, errs.UnknownTopic) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	replayed, err := a.Positions(ctx, dlq, group+ReplayGroupSuffix)
	if err != nil {
		return nil, err
	}
	var out []Listed
	for _, p := range parts {
		for from := p.StartOffset; from < p.NextOffset && len(out) < limit; {
			recs, err := a.Fetch(ctx, dlq, p.Partition, from, fetchMax)
			if err != nil {
				return nil, err
			}
			from += fetchMax
			for _, r := range recs {
				if s, ok := Of(r, topic, group); ok && len(out) < limit {
					out = append(out, Listed{Record: r, Source: s, Replayed: r.Offset < replayed[p.Partition]})
				}
			}
		}
	}
	return out, nil
}

// Replay publishes group's dead letters of topic in dlq back to topic,
// each to the partition it came from (ReplayRecord), at most limit, and
// returns how many it replayed. Each is replayed once: the replay group
// (group+ReplayGroupSuffix) on dlq remembers how far replays went,
// committed in the transaction that publishes them.
func Replay(ctx context.Context, a Admin, dlq, topic, group string, limit int) (int, error) {
	replayGroup := group + ReplayGroupSuffix
	replayed := 0
	for replayed < limit {
		more := false
		err := a.BeginFunc(ctx, func(tx pgx.Tx) error {
			cl, err := a.ClaimTx(ctx, tx, dlq, replayGroup, min(limit-replayed, fetchMax))
			if err != nil || cl == nil {
				return err
			}
			more = true
			var recs []*pgmsgtype.Record
			for _, r := range cl.Records {
				if s, ok := Of(r, topic, group); ok {
					recs = append(recs, ReplayRecord(r, topic, s.Partition, group))
				}
			}
			if len(recs) > 0 {
				if err := a.PublishTx(ctx, tx, recs); err != nil {
					return err
				}
			}
			if err := a.CommitTx(ctx, tx, cl); err != nil {
				return err
			}
			replayed += len(recs)
			return nil
		})
		if err != nil {
			return replayed, err
		}
		if !more {
			break
		}
	}
	return replayed, nil
}
