-- name: RetentionRun :many
SELECT topic::text, partition::integer, start_offset::bigint, end_offset::bigint, reason::text, skipped::bigint
FROM pgmsg.retention_run(@max_segments::integer);

-- name: GroupExpire :many
SELECT topic::text, group_name::text, last_active::timestamptz
FROM pgmsg.group_expire(@default_ttl::interval, @max_groups::integer);

-- name: CompactRun :many
SELECT topic::text, partition::integer, closed_end::bigint, removed::bigint
FROM pgmsg.compact_run(@max_partitions::integer);

-- name: SegmentsEnsure :one
SELECT pgmsg.segments_ensure();

-- name: MaintenanceEvents :many
SELECT event_id::bigint, at::timestamptz, kind::text, topic::text, coalesce(group_name, '')::text AS group_name,
       coalesce(partition, -1)::integer AS partition, detail::jsonb
FROM pgmsg.maintenance_events(@max_events::integer, sqlc.narg(kind)::text);

-- name: MaintenanceEventsPrune :one
SELECT pgmsg.maintenance_events_prune(@older::interval, @max_events::integer);

-- name: MaintenanceLeaderTryLock :one
-- The session advisory lock that elects a schema's maintenance leader
-- (lock_key names the schema). The leader's dedicated connection holds it
-- until it closes: there is no unlock, a closed session releases it.
SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext(@lock_key::text));

-- name: TopicOffsets :many
-- topic_metrics without the segments' sizes: the offsets and segment count
-- of every partition from pgmsg's own tables, no file sizes (topic_metrics
-- asks pg_total_relation_size of every segment: 21 s for 1,000 topics on
-- a shared server, against milliseconds here).
SELECT t.name::text AS topic, tp.partition::integer AS partition, tp.start_offset::bigint AS start_offset, tp.next_offset::bigint AS end_offset,
       (SELECT pg_catalog.count(*) FROM pgmsg.segment s WHERE s.topic_id = tp.topic_id AND s.partition = tp.partition)::integer AS segments
FROM pgmsg.topic_partition tp
JOIN pgmsg.topic t ON t.topic_id = tp.topic_id
ORDER BY t.name, tp.partition;

-- name: TopicTotals :many
-- One row per topic: its partitions' offsets summed and its segments
-- counted, from pgmsg's own tables (no file sizes): what /metrics exposes
-- unless per-partition series are asked for. Partitions and segments are
-- aggregated by topic id before the names are joined (a subquery per topic
-- counting its segments cost a fifth more at 10,000 topics, and its
-- estimate grows towards jit_above_cost).
SELECT t.name::text AS topic, p.partitions::integer AS partitions,
       p.start_offset::bigint AS start_offset, p.end_offset::bigint AS end_offset,
       coalesce(sg.n, 0)::integer AS segments
FROM (SELECT tp.topic_id, pg_catalog.count(*) AS partitions,
             pg_catalog.sum(tp.start_offset) AS start_offset, pg_catalog.sum(tp.next_offset) AS end_offset
      FROM pgmsg.topic_partition tp GROUP BY tp.topic_id) p
JOIN pgmsg.topic t ON t.topic_id = p.topic_id
LEFT JOIN (SELECT s.topic_id, pg_catalog.count(*) AS n FROM pgmsg.segment s GROUP BY s.topic_id) sg ON sg.topic_id = p.topic_id
ORDER BY t.name;

-- name: GroupTotals :many
-- One row per group: lag, cursors and skipped records summed over its
-- partitions, and the oldest record it has not read (one index probe per
-- lagging partition, none for a caught-up group). Grouped by topic id,
-- the names joined after.
SELECT t.name::text AS topic, g.group_name::text AS group_name, g.partitions::integer AS partitions,
       g.next_offset::bigint AS next_offset, g.lag::bigint AS lag, g.skipped::bigint AS skipped,
       g.oldest_unconsumed_at::timestamptz AS oldest_unconsumed_at
FROM (SELECT c.topic_id, c.group_name, pg_catalog.count(*) AS partitions,
             pg_catalog.sum(c.next_offset) AS next_offset,
             pg_catalog.sum(greatest(tp.next_offset - c.next_offset, 0)) AS lag,
             pg_catalog.sum(c.skipped) AS skipped,
             pg_catalog.min(CASE WHEN tp.next_offset > c.next_offset THEN
                 pgmsg._oldest_unconsumed(c.topic_id, c.partition, c.next_offset) END) AS oldest_unconsumed_at
      FROM pgmsg.group_cursor c
      JOIN pgmsg.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
      GROUP BY c.topic_id, c.group_name) g
JOIN pgmsg.topic t ON t.topic_id = g.topic_id
ORDER BY t.name, g.group_name;

-- name: TopicMetrics :many
SELECT topic::text, partition::integer, start_offset::bigint, end_offset::bigint, segments::integer, bytes::bigint
FROM pgmsg.topic_metrics();

-- name: GroupMetrics :many
SELECT topic::text, group_name::text, partition::integer, next_offset::bigint, lag::bigint, skipped::bigint,
       oldest_unconsumed_at::timestamptz
FROM pgmsg.group_metrics();
