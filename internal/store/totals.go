package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// TotalsChanges is what changed in the tables LogTotals reads since a
// snapshot's xmin, and how many rows they hold now.
type TotalsChanges struct {
	// Xmin is this snapshot's xmin (a full transaction id): the next
	// call's since. Every row written by a transaction below it is visible
	// in this snapshot; rows of later transactions are reported as changed
	// by the next call, whether this snapshot saw them or not.
	Xmin uint64
	// Rows of topic_partition, segment and group_cursor.
	PartitionRows, SegmentRows, CursorRows int64
	// Topics whose topic, topic_partition or segment rows were written
	// at or after since (their totals and all their groups' are to be read
	// again).
	Topics []int32
	// Groups (GroupTopics[i], GroupNames[i], repeated once per changed
	// cursor row) whose cursor rows were written at or after since.
	GroupTopics []int32
	GroupNames  []string
}

// totalsChangesSQL reads the rows written by transactions at or after
// $1 (a 32-bit transaction id): age(xmin) <= age($1) is xmin >= $1 counted
// from the same "now" (age() reads it once per transaction), and a frozen
// row's xmin is FrozenTransactionId, whose age is the largest. One
// sequential scan of each table, no joins and no aggregates by topic: at
// 10,000 topics of 4 partitions a few milliseconds against the ~100 ms of
// the full totals. Deletions do not show as written rows: the counts let
// the caller see them (a deleted row lowers a count that the changed rows,
// read again, do not account for).
const totalsChangesSQL = `
SELECT pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text,
       tp.n, sg.n, gc.n,
       pg_catalog.array_cat(pg_catalog.array_cat(coalesce(tp.changed, '{}'), coalesce(sg.changed, '{}')), coalesce(t.changed, '{}')),
       coalesce(gc.topics, '{}'), coalesce(gc.groups, '{}')
FROM (SELECT pg_catalog.count(*) AS n,
             pg_catalog.array_agg(DISTINCT x.topic_id) FILTER (WHERE pg_catalog.age(x.xmin) <= pg_catalog.age($1::text::xid)) AS changed
      FROM pgmsg.topic_partition x) tp,
     (SELECT pg_catalog.count(*) AS n,
             pg_catalog.array_agg(DISTINCT x.topic_id) FILTER (WHERE pg_catalog.age(x.xmin) <= pg_catalog.age($1::text::xid)) AS changed
      FROM pgmsg.segment x) sg,
     (SELECT pg_catalog.array_agg(x.topic_id) AS changed
      FROM pgmsg.topic x WHERE pg_catalog.age(x.xmin) <= pg_catalog.age($1::text::xid)) t,
     (SELECT pg_catalog.count(*) AS n,
             pg_catalog.array_agg(x.topic_id) FILTER (WHERE pg_catalog.age(x.xmin) <= pg_catalog.age($1::text::xid)) AS topics,
             pg_catalog.array_agg(x.group_name::text) FILTER (WHERE pg_catalog.age(x.xmin) <= pg_catalog.age($1::text::xid)) AS groups
      FROM pgmsg.group_cursor x) gc`

// LogTotalsChanges returns what changed since the transaction id since
// (TotalsChanges.Xmin of an earlier call), read in exec's snapshot: run it
// in the repeatable-read transaction that then reads the changed totals.
// since must be within 2^31 transactions of now (the caller reads
// everything again when it is not).
func (s *Store) LogTotalsChanges(ctx context.Context, exec DBTX, since uint64) (*TotalsChanges, error) {
	var ch TotalsChanges
	var xmin string
	err := s.DB(exec).QueryRow(ctx, totalsChangesSQL, strconv.FormatUint(since&0xffffffff, 10)).Scan(&xmin,
		&ch.PartitionRows, &ch.SegmentRows, &ch.CursorRows, &ch.Topics, &ch.GroupTopics, &ch.GroupNames)
	if err != nil {
		return nil, errs.Map(err)
	}
	if ch.Xmin, err = strconv.ParseUint(xmin, 10, 64); err != nil {
		return nil, err
	}
	return &ch, nil
}

// TopicTotalsRow is one topic's totals with its id.
type TopicTotalsRow struct {
	TopicID                int32
	Topic                  string
	Partitions             int32
	StartOffset, EndOffset int64
	Segments               int32
}

// GroupTotalsRow is one group's totals with its topic's id.
type GroupTotalsRow struct {
	TopicID int32
	GroupTotals
}

// topicTotalsByIDSQL: every topic's partitions' offsets summed and its
// segments counted (%s: the filters), from pgmsg's own tables (no file
// sizes): what /metrics exposes unless per-partition series are asked
// for. Partitions and segments are aggregated by topic id before the names
// are joined (a subquery per topic counting its segments cost a fifth more
// at 10,000 topics, and its estimate grows towards jit_above_cost).
const topicTotalsByIDSQL = `
SELECT p.topic_id, t.name::text, p.partitions::integer, p.start_offset::bigint, p.end_offset::bigint,
       coalesce(sg.n, 0)::integer
FROM (SELECT tp.topic_id, pg_catalog.count(*) AS partitions,
             pg_catalog.sum(tp.start_offset) AS start_offset, pg_catalog.sum(tp.next_offset) AS end_offset
      FROM pgmsg.topic_partition tp %s GROUP BY tp.topic_id) p
JOIN pgmsg.topic t ON t.topic_id = p.topic_id
LEFT JOIN (SELECT s.topic_id, pg_catalog.count(*) AS n FROM pgmsg.segment s %s GROUP BY s.topic_id) sg ON sg.topic_id = p.topic_id`

var (
	topicTotalsAllSQL  = fmt.Sprintf(topicTotalsByIDSQL, "", "")
	topicTotalsSomeSQL = fmt.Sprintf(topicTotalsByIDSQL, "WHERE tp.topic_id = ANY($1::integer[])",
		"WHERE s.topic_id = ANY($1::integer[])")
)

// groupTotalsByIDSQL: every group of the topics $1 and the groups
// ($2[i], $3[i]); %s is the filter. Lag, cursors and skipped records are
// summed over a group's partitions, with the oldest record it has not read
// (one index probe per lagging partition, none for a caught-up group).
const groupTotalsByIDSQL = `
SELECT g.topic_id, t.name::text, g.group_name::text, g.partitions::integer,
       g.next_offset::bigint, g.lag::bigint, g.skipped::bigint, g.oldest_unconsumed_at::timestamptz
FROM (SELECT c.topic_id, c.group_name, pg_catalog.count(*) AS partitions,
             pg_catalog.sum(c.next_offset) AS next_offset,
             pg_catalog.sum(greatest(tp.next_offset - c.next_offset, 0)) AS lag,
             pg_catalog.sum(c.skipped) AS skipped,
             pg_catalog.min(CASE WHEN tp.next_offset > c.next_offset THEN
                 pgmsg._oldest_unconsumed(c.topic_id, c.partition, c.next_offset) END) AS oldest_unconsumed_at
      FROM pgmsg.group_cursor c
      JOIN pgmsg.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
      %s
      GROUP BY c.topic_id, c.group_name) g
JOIN pgmsg.topic t ON t.topic_id = g.topic_id`

var (
	groupTotalsAllSQL  = fmt.Sprintf(groupTotalsByIDSQL, "")
	groupTotalsSomeSQL = fmt.Sprintf(groupTotalsByIDSQL, `WHERE c.topic_id = ANY($1::integer[])
         OR (c.topic_id, c.group_name) IN (SELECT u.t, u.g FROM ROWS FROM (pg_catalog.unnest($2::integer[]), pg_catalog.unnest($3::text[])) AS u(t, g))`)
)

// LogTotalsByID returns the totals of every topic and group (all), or of
// the topics topics (and all their groups) and the groups (groupTopics[i],
// groupNames[i]).
func (s *Store) LogTotalsByID(ctx context.Context, exec DBTX, all bool, topics, groupTopics []int32,
	groupNames []string) ([]TopicTotalsRow, []GroupTotalsRow, error) {
	db := s.DB(exec)
	q, args := topicTotalsAllSQL, []any{}
	if !all {
		q, args = topicTotalsSomeSQL, []any{topics}
	}
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, nil, errs.Map(err)
	}
	var ts []TopicTotalsRow
	for rows.Next() {
		var r TopicTotalsRow
		if err := rows.Scan(&r.TopicID, &r.Topic, &r.Partitions, &r.StartOffset, &r.EndOffset, &r.Segments); err != nil {
			rows.Close()
			return nil, nil, errs.Map(err)
		}
		ts = append(ts, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, errs.Map(err)
	}
	q = groupTotalsAllSQL
	if !all {
		if len(topics) == 0 && len(groupTopics) == 0 {
			return ts, nil, nil
		}
		q, args = groupTotalsSomeSQL, []any{topics, groupTopics, groupNames}
	}
	rows, err = db.Query(ctx, q, args...)
	if err != nil {
		return nil, nil, errs.Map(err)
	}
	defer rows.Close()
	var gs []GroupTotalsRow
	for rows.Next() {
		var r GroupTotalsRow
		var oldest pgtype.Timestamptz
		if err := rows.Scan(&r.TopicID, &r.Topic, &r.Group, &r.Partitions, &r.NextOffset, &r.Lag, &r.Skipped, &oldest); err != nil {
			return nil, nil, errs.Map(err)
		}
		r.OldestUnconsumed = time.Time{}
		if oldest.Valid {
			r.OldestUnconsumed = oldest.Time
		}
		gs = append(gs, r)
	}
	return ts, gs, errs.Map(rows.Err())
}
