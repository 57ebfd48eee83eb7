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
