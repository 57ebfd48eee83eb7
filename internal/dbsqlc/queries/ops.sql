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

-- name: TopicMetrics :many
SELECT topic::text, partition::integer, start_offset::bigint, end_offset::bigint, segments::integer, bytes::bigint
FROM pgmsg.topic_metrics();

-- name: GroupMetrics :many
SELECT topic::text, group_name::text, partition::integer, next_offset::bigint, lag::bigint, skipped::bigint,
       oldest_unconsumed_at::timestamptz
FROM pgmsg.group_metrics();
