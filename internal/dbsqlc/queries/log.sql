-- name: TopicCreate :one
SELECT name::text, partitions::integer, segment_records::bigint, max_record_bytes::integer, config::jsonb, created_at::timestamptz
FROM pgmsg.topic_create(@name::text, @partitions::integer, @config::jsonb);

-- name: TopicAddPartitions :one
SELECT name::text, partitions::integer, segment_records::bigint, max_record_bytes::integer, config::jsonb, created_at::timestamptz
FROM pgmsg.topic_add_partitions(@name::text, @partitions::integer);

-- name: TopicConfigure :one
SELECT name::text, partitions::integer, segment_records::bigint, max_record_bytes::integer, config::jsonb, created_at::timestamptz
FROM pgmsg.topic_configure(@name::text, @settings::jsonb);

-- name: TopicDelete :exec
SELECT pgmsg.topic_delete(@name::text, @force::boolean);

-- name: TopicList :many
SELECT name::text, partitions::integer, segment_records::bigint, max_record_bytes::integer, config::jsonb, created_at::timestamptz
FROM pgmsg.topic_list();

-- name: TopicGetByName :one
-- The producer's metadata cache: a primary-key read, through _topic(),
-- which raises PM003 for an invalid name and PM001 for an unknown topic.
SELECT t.name::text AS name, t.partitions::integer AS partitions, t.max_record_bytes::integer AS max_record_bytes,
       t.config::jsonb AS config, t.topic_id::integer AS topic_id
FROM pgmsg._topic(@name::text) t;

-- name: TopicGet :one
SELECT name, partitions, segment_records, max_record_bytes, config, created_at FROM pgmsg.topic WHERE name = @name::text;

-- name: TopicDescribe :many
SELECT partition::integer, start_offset::bigint, next_offset::bigint, records::bigint, segments::integer, approx_bytes::bigint
FROM pgmsg.topic_describe(@name::text);

-- name: RecordPublish :many
SELECT partition::integer, base_offset::bigint, record_count::integer, "timestamp"::timestamptz, segments_low::boolean
FROM pgmsg.publish(@topic::text, @values::bytea[], @keys::bytea[], @headers::jsonb[],
                            @timestamps::timestamptz[], sqlc.narg(partition)::integer, @notify::boolean);

-- name: RecordFetch :many
SELECT partition::integer, "offset"::bigint, "timestamp"::timestamptz, key::bytea, value::bytea, headers::jsonb
FROM pgmsg.fetch(@topic::text, @partition::integer, @from_offset::bigint, @max_records::integer);

-- name: GroupCreate :one
SELECT pgmsg.group_create(@topic::text, @group_name::text, @start::text);

-- name: GroupCommit :one
SELECT pgmsg.commit(@topic::text, @group_name::text, @partition::integer, @claim_epoch::bigint,
                    sqlc.narg(next_offset)::bigint);

-- name: GroupRelease :exec
SELECT pgmsg.release(@topic::text, @group_name::text, @partition::integer, @claim_epoch::bigint);

-- name: GroupExtend :one
SELECT pgmsg.extend(@topic::text, @group_name::text, @partition::integer, @claim_epoch::bigint, @lease::interval);

-- name: GroupReset :many
SELECT partition::integer, next_offset::bigint
FROM pgmsg.group_reset(@topic::text, @group_name::text, @to_position::text, sqlc.narg(partition)::integer);

-- name: GroupDelete :one
SELECT pgmsg.group_delete(@topic::text, @group_name::text);

-- name: GroupList :many
SELECT topic::text, group_name::text, partition::integer, next_offset::bigint, end_offset::bigint, lag::bigint, claim_epoch::bigint, coalesce(claim_owner, '')::text AS claim_owner, claim_expires_at::timestamptz, committed_at::timestamptz, coalesce(owner, '')::text AS owner, owner_epoch::bigint, skipped::bigint
FROM pgmsg.group_list(sqlc.narg(topic)::text, sqlc.narg(group_name)::text);

-- name: GroupSummary :many
SELECT topic::text, group_name::text, partitions::integer, next_offset::bigint, end_offset::bigint, lag::bigint, claimed::integer, committed_at::timestamptz, skipped::bigint
FROM pgmsg.group_summary(sqlc.narg(topic)::text, sqlc.narg(group_name)::text);

-- name: GroupHeartbeat :one
-- The heartbeat commits asynchronously, as claims do, unless it creates
-- the group (its start position must be durable): membership is soft state
-- (a heartbeat lost in a crash is sent again, a member that lost its
-- session rejoins), claims are fenced by their epochs, and every durable
-- cursor commit flushes the WAL before it, assignments included. A
-- synchronous heartbeat held its group's row lock through a WAL flush, so a
-- group's members heartbeating together waited for each other's flushes
-- (the start of a mixed bench run, 20 members joining 5 groups, spent its
-- first seconds there). existed is read with the statement's snapshot:
-- before group_heartbeat() runs.
WITH pre AS (
    SELECT EXISTS (SELECT 1 FROM pgmsg.consumer_group g JOIN pgmsg.topic t ON t.topic_id = g.topic_id
                    WHERE t.name = @topic::text AND g.group_name = @group_name::text) AS existed
)
SELECT h.joined::boolean AS joined, h.partitions::integer[] AS partitions, h.owner_epochs::bigint[] AS owner_epochs,
       h.revoking::boolean[] AS revoking,
       coalesce(CASE WHEN pre.existed THEN pg_catalog.set_config('synchronous_commit', 'off', true) END, '')::text AS async
FROM pre, pgmsg.group_heartbeat(@topic::text, @group_name::text, @member::text, @session_timeout::interval, @start::text) h;

-- name: GroupLeave :one
SELECT pgmsg.group_leave(@topic::text, @group_name::text, @member::text);

-- name: GroupMembers :many
SELECT member_id::text, joined_at::timestamptz, heartbeat_at::timestamptz, session_timeout::interval,
       alive::boolean, partitions::integer[]
FROM pgmsg.group_members(@topic::text, @group_name::text);

-- name: SegmentEnsure :one
SELECT pgmsg.segment_ensure(@topic::text, @partition::integer);

-- name: SegmentEnsureMany :many
SELECT partition::integer, created::integer
FROM pgmsg._segments_ahead(@topic::text, @partitions::integer[]);

-- name: GroupClaimRange :many
SELECT partition::integer, claim_epoch::bigint, claim_expires_at::timestamptz, first_offset::bigint,
       last_offset::bigint, topic_id::integer, coalesce(relname, '')::text AS relname, log_epoch::integer
FROM pgmsg.claim_range(@topic::text, @group_name::text, @max_records::integer, @lease::interval,
                       sqlc.narg(partition)::integer, @start::text, sqlc.narg(member)::text,
                       @require_owner::boolean, @async::boolean,
                       sqlc.narg(commit_partition)::integer, sqlc.narg(commit_epoch)::bigint,
                       sqlc.narg(max_bytes)::bigint);

-- name: RecordPublishIdempotent :many
SELECT partition::integer, base_offset::bigint, record_count::integer, "timestamp"::timestamptz,
       segments_low::boolean, duplicate::boolean
FROM pgmsg.publish_idempotent(@topic::text, @producer_id::text, @sequence::bigint, @values::bytea[], @keys::bytea[],
                              @headers::jsonb[], @timestamps::timestamptz[], sqlc.narg(partition)::integer, @notify::boolean);

-- name: ProducerStateExpire :one
SELECT pgmsg.producer_state_expire(@older_than::interval, @max_states::integer)::bigint AS expired;

-- name: TimeIndexRun :one
SELECT pgmsg.time_index_run(@stride::integer, @max_records::bigint)::integer;

-- name: OffsetForTime :one
SELECT pgmsg.offset_for_time(@topic::text, @partition::integer, @ts::timestamptz)::bigint;

-- name: OffsetsForTime :many
SELECT partition::integer, "offset"::bigint FROM pgmsg.offsets_for_time(@topic::text, @ts::timestamptz);
