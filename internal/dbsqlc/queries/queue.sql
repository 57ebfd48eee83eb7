-- Queue queries: each calls one SQL function of docs/sql-api.md (Job queue).
-- Intervals are returned as microseconds (bigint) for time.Duration.

-- name: QueueCreate :one
SELECT name::text, max_attempts::integer,
       (extract(epoch FROM lease) * 1000000)::bigint AS lease_us,
       (extract(epoch FROM retry_backoff) * 1000000)::bigint AS retry_backoff_us,
       (extract(epoch FROM retry_backoff_max) * 1000000)::bigint AS retry_backoff_max_us,
       (extract(epoch FROM archive_retention) * 1000000)::bigint AS archive_retention_us,
       max_payload_bytes::integer, coalesce(max_depth, 0)::bigint AS max_depth,
       (extract(epoch FROM backpressure_timeout) * 1000000)::bigint AS backpressure_timeout_us,
       coalesce((extract(epoch FROM job_timeout) * 1000000)::bigint, 0)::bigint AS job_timeout_us,
       coalesce((extract(epoch FROM dead_retention) * 1000000)::bigint, 0)::bigint AS dead_retention_us,
       created_at::timestamptz, coalesce(rate_limit, 0)::float8 AS rate_limit, coalesce(max_running, 0)::integer AS max_running,
       coalesce(key_limit, 0)::integer AS key_limit, coalesce(key_field, '')::text AS key_field
FROM pgmsg.queue_create(@name::text, sqlc.narg(max_attempts)::integer, sqlc.narg(lease)::interval,
                        sqlc.narg(retry_backoff)::interval, sqlc.narg(retry_backoff_max)::interval,
                        sqlc.narg(archive_retention)::interval, sqlc.narg(max_payload_bytes)::integer,
                        @if_not_exists::boolean, sqlc.narg(max_depth)::bigint,
                        sqlc.narg(backpressure_timeout)::interval, sqlc.narg(job_timeout)::interval,
                        sqlc.narg(dead_retention)::interval, sqlc.narg(rate_limit)::float8,
                        sqlc.narg(max_running)::integer, sqlc.narg(key_limit)::integer, sqlc.narg(key_field)::text);

-- name: QueueUpdate :one
SELECT name::text, max_attempts::integer,
       (extract(epoch FROM lease) * 1000000)::bigint AS lease_us,
       (extract(epoch FROM retry_backoff) * 1000000)::bigint AS retry_backoff_us,
       (extract(epoch FROM retry_backoff_max) * 1000000)::bigint AS retry_backoff_max_us,
       (extract(epoch FROM archive_retention) * 1000000)::bigint AS archive_retention_us,
       max_payload_bytes::integer, coalesce(max_depth, 0)::bigint AS max_depth,
       (extract(epoch FROM backpressure_timeout) * 1000000)::bigint AS backpressure_timeout_us,
       coalesce((extract(epoch FROM job_timeout) * 1000000)::bigint, 0)::bigint AS job_timeout_us,
       coalesce((extract(epoch FROM dead_retention) * 1000000)::bigint, 0)::bigint AS dead_retention_us,
       created_at::timestamptz, coalesce(rate_limit, 0)::float8 AS rate_limit, coalesce(max_running, 0)::integer AS max_running,
       coalesce(key_limit, 0)::integer AS key_limit, coalesce(key_field, '')::text AS key_field
FROM pgmsg.queue_update(@name::text, sqlc.narg(max_attempts)::integer, sqlc.narg(lease)::interval,
                        sqlc.narg(retry_backoff)::interval, sqlc.narg(retry_backoff_max)::interval,
                        sqlc.narg(archive_retention)::interval, sqlc.narg(max_payload_bytes)::integer,
                        sqlc.narg(max_depth)::bigint, sqlc.narg(backpressure_timeout)::interval,
                        sqlc.narg(job_timeout)::interval, sqlc.narg(dead_retention)::interval,
                        sqlc.narg(rate_limit)::float8, sqlc.narg(max_running)::integer,
                        sqlc.narg(key_limit)::integer, sqlc.narg(key_field)::text);

-- name: QueueList :many
SELECT name::text, max_attempts::integer,
       (extract(epoch FROM lease) * 1000000)::bigint AS lease_us,
       (extract(epoch FROM retry_backoff) * 1000000)::bigint AS retry_backoff_us,
       (extract(epoch FROM retry_backoff_max) * 1000000)::bigint AS retry_backoff_max_us,
       (extract(epoch FROM archive_retention) * 1000000)::bigint AS archive_retention_us,
       max_payload_bytes::integer, coalesce(max_depth, 0)::bigint AS max_depth,
       (extract(epoch FROM backpressure_timeout) * 1000000)::bigint AS backpressure_timeout_us,
       coalesce((extract(epoch FROM job_timeout) * 1000000)::bigint, 0)::bigint AS job_timeout_us,
       coalesce((extract(epoch FROM dead_retention) * 1000000)::bigint, 0)::bigint AS dead_retention_us,
       created_at::timestamptz, coalesce(rate_limit, 0)::float8 AS rate_limit, coalesce(max_running, 0)::integer AS max_running,
       coalesce(key_limit, 0)::integer AS key_limit, coalesce(key_field, '')::text AS key_field
FROM pgmsg.queue_list();

-- name: QueueDelete :exec
SELECT pgmsg.queue_delete(@name::text, @force::boolean);

-- name: QueueStats :many
SELECT s.queue::text AS queue, s.available::bigint AS available, s.scheduled::bigint AS scheduled,
       s.running::bigint AS running, s.retrying::bigint AS retrying, s.dead::bigint AS dead,
       s.archived::bigint AS archived, s.oldest_available_seconds::double precision AS oldest_available_seconds,
       s.archived_last_minute::bigint AS archived_last_minute, coalesce(qq.paused, false)::boolean AS paused,
       s.pending::bigint AS pending
FROM pgmsg.queue_stats(sqlc.narg(queue)::text) s LEFT JOIN pgmsg.queue qq ON qq.name = s.queue;

-- name: QueuePause :one
SELECT pgmsg.queue_pause(@queue::text)::boolean AS paused;

-- name: QueueResume :one
SELECT pgmsg.queue_resume(@queue::text)::boolean AS paused;

-- name: JobEnqueueMany :many
-- Go sends "" for no kind, unique key, sequence key, limit key, name or tenant, 0 for the queue's max attempts and
-- NULL for no timeout, tags, metadata, uniqueness window or dependencies of the job's own.
SELECT id::bigint, duplicate::boolean, state::text, run_at::timestamptz
FROM pgmsg.enqueue_many(@queue::text, @payloads::bytea[], pg_catalog.array_replace(@kinds::text[], '', NULL),
                        @priorities::integer[], @run_ats::timestamptz[], @delays::interval[],
                        pg_catalog.array_replace(@max_attempts::integer[], 0, NULL),
                        pg_catalog.array_replace(@unique_keys::text[], '', NULL), @create_queue::boolean,
                        @timeouts::interval[], @tags::jsonb[], @metadata::jsonb[], @unique_fors::interval[],
                        pg_catalog.array_replace(@sequence_keys::text[], '', NULL), @sequence_continues::boolean[],
                        pg_catalog.array_replace(@limit_keys::text[], '', NULL),
                        pg_catalog.array_replace(@names::text[], '', NULL), @depends_on::jsonb[],
                        @deps_ignore_cancelled::boolean[], @deps_ignore_dead::boolean[],
                        pg_catalog.array_replace(@tenants::text[], '', NULL));

-- name: JobClaim :many
-- One statement: UPDATE ... FROM (SELECT ... ORDER BY priority DESC, run_at,
-- id LIMIT n FOR UPDATE SKIP LOCKED) RETURNING, over the job_claim index.
SELECT id::bigint, queue::text, coalesce(kind, '')::text AS kind, payload::bytea, priority::integer,
       attempt::integer, max_attempts::integer, lease_token::bigint, lease_expires_at::timestamptz,
       run_at::timestamptz, enqueued_at::timestamptz, attempted_at::timestamptz,
       coalesce(unique_key, '')::text AS unique_key, errors::jsonb,
       coalesce((extract(epoch FROM timeout) * 1000000)::bigint, 0)::bigint AS timeout_us
FROM pgmsg.job_claim(@queue::text, @max_jobs::integer, sqlc.narg(lease)::interval, sqlc.narg(worker)::text,
                     sqlc.narg(max_bytes)::bigint, @async::boolean);

-- name: JobCompleteMany :many
-- job_complete_many() as one statement against the tables (a SQL function
-- is planned on every call; this runs from the connection's cached plan):
-- moves the jobs still held under their lease tokens to job_archive and
-- returns their ids. job_complete_many() stays the SQL API's reference.
-- The DELETE returns only what the archive keeps (not j.*: the CTE holds
-- each row it returns).
WITH d AS (
    DELETE FROM pgmsg.job j
     USING (SELECT pg_catalog.unnest(@ids::bigint[]) AS id, pg_catalog.unnest(@lease_tokens::bigint[]) AS token) u
     WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running'
    RETURNING j.id, j.queue_id, j.priority, j.attempt, j.max_attempts, j.enqueued_at, j.attempted_at, j.kind,
              j.unique_key, j.errors, j.progress, j.tags, j.metadata, j.sequence_key, j.depends_on, j.workflow_id,
              j.batch_id
), a AS (
    INSERT INTO pgmsg.job_archive (id, queue_id, status, priority, attempt, max_attempts, enqueued_at,
                                   attempted_at, finished_at, kind, unique_key, errors, progress, tags, metadata,
                                   sequence_key, depends_on, workflow_id, batch_id)
    SELECT d.id, d.queue_id, 'completed', d.priority, d.attempt, d.max_attempts, d.enqueued_at,
           d.attempted_at, pg_catalog.clock_timestamp(), d.kind, d.unique_key, d.errors, d.progress, d.tags, d.metadata,
           d.sequence_key, d.depends_on, d.workflow_id, d.batch_id
      FROM d
    RETURNING job_archive.id
)
SELECT a.id::bigint FROM a;

-- name: JobCompleteManyResults :many
-- job_complete_many() itself, for completions that carry results (it
-- checks their size) or logs.
SELECT id::bigint FROM pgmsg.job_complete_many(@ids::bigint[], @lease_tokens::bigint[], sqlc.narg(results)::jsonb[],
                                               sqlc.narg(logs)::text[]);

-- name: JobComplete :exec
SELECT pgmsg.job_complete(@id::bigint, @lease_token::bigint, sqlc.narg(result)::jsonb);

-- name: JobProgress :exec
SELECT pgmsg.job_progress(@id::bigint, @lease_token::bigint, sqlc.narg(progress)::jsonb);

-- name: JobFail :one
SELECT state::text, run_at::timestamptz
FROM pgmsg.job_fail(@id::bigint, @lease_token::bigint, @error::text, sqlc.narg(retry_in)::interval, @dead::boolean,
                    sqlc.narg(log)::text);

-- name: JobSnooze :one
SELECT pgmsg.job_snooze(@id::bigint, @lease_token::bigint, @delay::interval, sqlc.narg(log)::text)::timestamptz AS run_at;

-- name: JobExtendMany :many
SELECT id::bigint, lease_expires_at::timestamptz
FROM pgmsg.job_extend_many(@ids::bigint[], @lease_tokens::bigint[], sqlc.narg(lease)::interval);

-- name: JobExtend :one
SELECT pgmsg.job_extend(@id::bigint, @lease_token::bigint, sqlc.narg(lease)::interval)::timestamptz AS lease_expires_at;

-- name: JobCancel :one
SELECT pgmsg.job_cancel(@id::bigint)::boolean AS cancelled;

-- name: JobRescue :one
SELECT pgmsg.job_rescue(sqlc.narg(queue)::text, @max_jobs::integer)::integer AS rescued;

-- name: JobGet :one
SELECT g.id::bigint AS id, g.queue::text AS queue, g.state::text AS state, coalesce(g.kind, '')::text AS kind, g.payload::bytea AS payload, g.priority::integer AS priority,
       g.attempt::integer AS attempt, g.max_attempts::integer AS max_attempts, coalesce(g.lease_token, 0)::bigint AS lease_token,
       g.lease_expires_at::timestamptz AS lease_expires_at, g.run_at::timestamptz AS run_at, g.enqueued_at::timestamptz AS enqueued_at, g.attempted_at::timestamptz AS attempted_at,
       g.finished_at::timestamptz AS finished_at, coalesce(g.worker, '')::text AS worker, coalesce(g.unique_key, '')::text AS unique_key,
       g.errors::jsonb AS errors, coalesce((extract(epoch FROM g.timeout) * 1000000)::bigint, 0)::bigint AS timeout_us,
       g.progress::jsonb AS progress, g.result::jsonb AS result, g.tags::text[] AS tags, g.metadata::jsonb AS metadata,
       coalesce(g.sequence_key, '')::text AS sequence_key, coalesce(g.limit_key, '')::text AS limit_key,
       coalesce(g.batch_id, 0)::bigint AS batch_id,
       g.depends_on::bigint[] AS depends_on, coalesce(g.deps_waiting, 0)::integer AS deps_waiting,
       coalesce(g.workflow_id, 0)::bigint AS workflow_id
FROM pgmsg.job_get(@id::bigint) g;

-- name: JobLogs :many
SELECT attempt::integer, at::timestamptz, outcome::text, log::text FROM pgmsg.job_logs(@id::bigint);

-- name: JobSteps :many
SELECT name::text, attempt::integer, at::timestamptz, output::jsonb FROM pgmsg.job_steps(@id::bigint);

-- name: JobStepSave :exec
SELECT pgmsg.job_step_save(@id::bigint, @lease_token::bigint, @name::text, sqlc.narg(output)::jsonb);

-- name: WorkflowGet :many
SELECT id::bigint, coalesce(workflow_id, 0)::bigint AS workflow_id, queue::text, state::text,
       coalesce(kind, '')::text AS kind, depends_on::bigint[], coalesce(deps_waiting, 0)::integer AS deps_waiting,
       coalesce(deps_ignore_cancelled, false)::boolean AS deps_ignore_cancelled,
       coalesce(deps_ignore_dead, false)::boolean AS deps_ignore_dead, enqueued_at::timestamptz,
       attempted_at::timestamptz, finished_at::timestamptz
FROM pgmsg.workflow_get(@id::bigint, @max_jobs::integer);

-- name: JobEnqueueBatch :many
-- JobEnqueueMany's arguments, and the callbacks (JSON, NULL for none).
SELECT batch_id::bigint, id::bigint, duplicate::boolean, state::text, run_at::timestamptz
FROM pgmsg.job_enqueue_batch(@queue::text, @payloads::bytea[], pg_catalog.array_replace(@kinds::text[], '', NULL),
                        @priorities::integer[], @run_ats::timestamptz[], @delays::interval[],
                        pg_catalog.array_replace(@max_attempts::integer[], 0, NULL),
                        pg_catalog.array_replace(@unique_keys::text[], '', NULL), @create_queue::boolean,
                        @timeouts::interval[], @tags::jsonb[], @metadata::jsonb[], @unique_fors::interval[],
                        pg_catalog.array_replace(@sequence_keys::text[], '', NULL), @sequence_continues::boolean[],
                        pg_catalog.array_replace(@limit_keys::text[], '', NULL),
                        pg_catalog.array_replace(@names::text[], '', NULL), @depends_on::jsonb[],
                        @deps_ignore_cancelled::boolean[], @deps_ignore_dead::boolean[],
                        pg_catalog.array_replace(@tenants::text[], '', NULL),
                        @on_complete::jsonb, @on_discard::jsonb, @on_finished::jsonb);

-- name: BatchGet :one
SELECT batch_id::bigint, queue::text, total::integer, created_at::timestamptz, pending::bigint, available::bigint,
       scheduled::bigint, retrying::bigint, running::bigint, completed::bigint, cancelled::bigint, dead::bigint,
       finished_at::timestamptz, on_complete::jsonb, on_discard::jsonb, on_finished::jsonb,
       coalesce(complete_job_id, 0)::bigint AS complete_job_id, coalesce(discard_job_id, 0)::bigint AS discard_job_id,
       coalesce(finished_job_id, 0)::bigint AS finished_job_id
FROM pgmsg.batch_get(@id::bigint);

-- name: JobList :many
SELECT g.id::bigint AS id, g.queue::text AS queue, g.state::text AS state, coalesce(g.kind, '')::text AS kind, g.payload::bytea AS payload, g.priority::integer AS priority,
       g.attempt::integer AS attempt, g.max_attempts::integer AS max_attempts, coalesce(g.lease_token, 0)::bigint AS lease_token,
       g.lease_expires_at::timestamptz AS lease_expires_at, g.run_at::timestamptz AS run_at, g.enqueued_at::timestamptz AS enqueued_at, g.attempted_at::timestamptz AS attempted_at,
       g.finished_at::timestamptz AS finished_at, coalesce(g.worker, '')::text AS worker, coalesce(g.unique_key, '')::text AS unique_key,
       g.errors::jsonb AS errors, coalesce((extract(epoch FROM g.timeout) * 1000000)::bigint, 0)::bigint AS timeout_us,
       g.progress::jsonb AS progress, g.result::jsonb AS result, g.tags::text[] AS tags, g.metadata::jsonb AS metadata,
       coalesce(g.sequence_key, '')::text AS sequence_key, coalesce(g.limit_key, '')::text AS limit_key,
       coalesce(g.batch_id, 0)::bigint AS batch_id,
       g.depends_on::bigint[] AS depends_on, coalesce(g.deps_waiting, 0)::integer AS deps_waiting,
       coalesce(g.workflow_id, 0)::bigint AS workflow_id -- the shape of JobGet
FROM pgmsg.job_list(@queue::text, sqlc.narg(state)::text, sqlc.narg(kind)::text, sqlc.narg(since)::timestamptz,
                    sqlc.narg(until)::timestamptz, @max_jobs::integer, @after_id::bigint, sqlc.narg(tag)::text,
                    @sort_order::text) g
ORDER BY CASE WHEN @sort_order::text = 'desc' THEN -g.id ELSE g.id END;

-- name: DeadList :many
SELECT g.id::bigint AS id, g.queue::text AS queue, g.state::text AS state, coalesce(g.kind, '')::text AS kind, g.payload::bytea AS payload, g.priority::integer AS priority,
       g.attempt::integer AS attempt, g.max_attempts::integer AS max_attempts, coalesce(g.lease_token, 0)::bigint AS lease_token,
       g.lease_expires_at::timestamptz AS lease_expires_at, g.run_at::timestamptz AS run_at, g.enqueued_at::timestamptz AS enqueued_at, g.attempted_at::timestamptz AS attempted_at,
       g.finished_at::timestamptz AS finished_at, coalesce(g.worker, '')::text AS worker, coalesce(g.unique_key, '')::text AS unique_key,
       g.errors::jsonb AS errors, 0::bigint AS timeout_us, NULL::jsonb AS progress, NULL::jsonb AS result, g.tags::text[] AS tags,
       g.metadata::jsonb AS metadata, coalesce(j.sequence_key, '')::text AS sequence_key,
       coalesce(j.limit_key, '')::text AS limit_key, coalesce(j.batch_id, 0)::bigint AS batch_id,
       j.depends_on::bigint[] AS depends_on, 0::integer AS deps_waiting,
       coalesce(j.workflow_id, 0)::bigint AS workflow_id -- the shape of JobGet (a dead job waits for nothing)
FROM pgmsg.dead_list(@queue::text, sqlc.narg(kind)::text, @max_jobs::integer, @after_id::bigint) g
LEFT JOIN pgmsg.job j ON j.id = g.id
ORDER BY 1;

-- name: DeadRequeue :one
SELECT pgmsg.dead_requeue(@queue::text, sqlc.narg(ids)::bigint[], sqlc.narg(kind)::text, @max_jobs::integer)::integer AS requeued;

-- name: DeadPurge :one
SELECT pgmsg.dead_purge(@queue::text, sqlc.narg(ids)::bigint[], sqlc.narg(kind)::text,
                        sqlc.narg(older_than)::interval, @max_jobs::integer)::integer AS purged;

-- name: DeadPrune :one
SELECT pgmsg.dead_prune(sqlc.narg(queue)::text, @max_jobs::integer)::integer AS pruned;

-- name: ArchivePrune :one
SELECT pgmsg.archive_prune(sqlc.narg(queue)::text, sqlc.narg(older_than)::interval, @max_jobs::integer)::integer AS pruned;

-- name: QueueLatency :many
-- Quantiles are NULL for a queue that completed nothing in the window; 0 here
-- (completed says which).
SELECT queue::text, completed::bigint, cancelled::bigint,
       coalesce(latency_p50, 0)::double precision AS latency_p50, coalesce(latency_p99, 0)::double precision AS latency_p99,
       coalesce(latency_max, 0)::double precision AS latency_max,
       coalesce(run_p50, 0)::double precision AS run_p50, coalesce(run_p99, 0)::double precision AS run_p99
FROM pgmsg.queue_latency(@window_interval::interval);

-- name: JobRetry :one
SELECT pgmsg.job_retry(@id::bigint)::text AS state;

-- name: PeriodicAdd :one
SELECT queue::text, name::text, schedule::text, time_zone::text, payload::bytea, coalesce(kind, '')::text AS kind,
       priority::integer, coalesce(max_attempts, 0)::integer AS max_attempts,
       coalesce((extract(epoch FROM timeout) * 1000000)::bigint, 0)::bigint AS timeout_us, tags::text[], metadata::jsonb,
       run_on_start::boolean, defined_at::timestamptz, next_run_at::timestamptz, last_run_at::timestamptz,
       coalesce(last_job_id, 0)::bigint AS last_job_id, coalesce(last_error, '')::text AS last_error
FROM pgmsg.periodic_add(@queue::text, @name::text, @schedule::text, @payload::bytea, sqlc.narg(kind)::text,
                        @time_zone::text, @priority::integer, sqlc.narg(max_attempts)::integer,
                        sqlc.narg(timeout)::interval, sqlc.narg(tags)::jsonb, sqlc.narg(metadata)::jsonb,
                        @run_on_start::boolean);

-- name: PeriodicList :many
SELECT queue::text, name::text, schedule::text, time_zone::text, payload::bytea, coalesce(kind, '')::text AS kind,
       priority::integer, coalesce(max_attempts, 0)::integer AS max_attempts,
       coalesce((extract(epoch FROM timeout) * 1000000)::bigint, 0)::bigint AS timeout_us, tags::text[], metadata::jsonb,
       run_on_start::boolean, defined_at::timestamptz, next_run_at::timestamptz, last_run_at::timestamptz,
       coalesce(last_job_id, 0)::bigint AS last_job_id, coalesce(last_error, '')::text AS last_error -- the shape of PeriodicAdd
FROM pgmsg.periodic_list(sqlc.narg(queue)::text);

-- name: PeriodicRemove :exec
SELECT pgmsg.periodic_remove(@queue::text, @name::text);

-- name: PeriodicEnqueueDue :many
SELECT queue::text, name::text, tick::timestamptz, coalesce(job_id, 0)::bigint AS job_id, duplicate::boolean,
       next_run_at::timestamptz, coalesce(error, '')::text AS error
FROM pgmsg.periodic_enqueue_due(@max_jobs::integer);

-- name: PeriodicPreview :many
SELECT t::timestamptz FROM pgmsg.periodic_preview(@schedule::text, @time_zone::text, @after::timestamptz, @count::integer) t;

-- name: JobUniquePrune :one
SELECT pgmsg.job_unique_prune(@max_rows::integer)::integer;

-- name: SequenceResume :one
SELECT pgmsg.sequence_resume(@queue::text, @sequence_key::text)::boolean AS resumed;
