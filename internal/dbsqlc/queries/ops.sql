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

-- name: TopicMetrics :many
SELECT topic::text, partition::integer, start_offset::bigint, end_offset::bigint, segments::integer, bytes::bigint
FROM pgmsg.topic_metrics();

-- name: GroupMetrics :many
SELECT topic::text, group_name::text, partition::integer, next_offset::bigint, lag::bigint, skipped::bigint,
       oldest_unconsumed_at::timestamptz
FROM pgmsg.group_metrics();
