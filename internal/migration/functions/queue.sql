-- pgmsg functions: the job queue (queues, enqueue, claims, completion,
-- retries, dead-letter, archive, pause). Applied as described in
-- common.sql.

-- ---------------------------------------------------------------------------
-- Queues
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION {{schema}}._queue(p_name text)
 RETURNS {{schema}}.queue
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q {{schema}}.queue;
BEGIN
    SELECT * INTO q FROM {{schema}}.queue WHERE name = p_name;
    IF NOT FOUND THEN
        -- A name no queue can have is the caller's mistake (PM003), as
        -- _topic() has it.
        PERFORM {{schema}}._check_name('queue', p_name);
        PERFORM {{schema}}._raise('PM101', format('unknown queue %s', left(quote_literal(coalesce(p_name, '')), 210)));
    END IF;
    RETURN q;
END $function$;

-- _queue_check (queue_create, queue_update) refuses a setting out of range
-- (PM105 for max_attempts, PM004 otherwise): counts and sizes at least 1,
-- durations not negative, a positive lease, and upper bounds that the Go
-- client can represent.
CREATE OR REPLACE FUNCTION {{schema}}._queue_check(q {{schema}}.queue)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF q.max_attempts IS NULL OR q.max_attempts < 1 THEN
        PERFORM {{schema}}._raise('PM105', format('max_attempts must be at least 1, got %s', coalesce(q.max_attempts::text, 'NULL')));
    END IF;
    IF q.lease IS NULL OR q.lease <= interval '0' OR q.lease > interval '366 days' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive and at most 366 days');
    END IF;
    IF q.retry_backoff IS NULL OR q.retry_backoff < interval '0' OR q.retry_backoff_max IS NULL
       OR q.retry_backoff_max < interval '0' OR q.retry_backoff > interval '366 days'
       OR q.retry_backoff_max > interval '366 days' THEN
        PERFORM {{schema}}._raise('PM004', 'retry_backoff and retry_backoff_max must be from 0 to 366 days');
    END IF;
    IF q.archive_retention IS NULL OR q.archive_retention < interval '0' OR q.archive_retention > interval '36525 days' THEN
        PERFORM {{schema}}._raise('PM004', 'archive_retention must be from 0 to 36525 days (100 years)');
    END IF;
    IF q.max_payload_bytes IS NULL OR q.max_payload_bytes < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'max_payload_bytes must be at least 1');
    END IF;
    IF q.max_depth < 1 THEN
        PERFORM {{schema}}._raise('PM004', format('max_depth must be at least 1 (0 or NULL: no limit), got %s', q.max_depth));
    END IF;
    IF q.backpressure_timeout IS NULL OR q.backpressure_timeout < interval '0'
       OR q.backpressure_timeout > interval '366 days' THEN
        PERFORM {{schema}}._raise('PM004', 'backpressure_timeout must be from 0 to 366 days');
    END IF;
    IF q.job_timeout <= interval '0' OR q.job_timeout > interval '366 days' THEN
        PERFORM {{schema}}._raise('PM004', 'job_timeout must be positive and at most 366 days (0 or NULL: none)');
    END IF;
    IF q.dead_retention <= interval '0' OR q.dead_retention > interval '36525 days' THEN
        PERFORM {{schema}}._raise('PM004', 'dead_retention must be positive and at most 36525 days (0 or NULL: keep)');
    END IF;
    IF q.rate_limit <= 0 OR q.rate_limit > 1000000 OR q.rate_limit = 'NaN'::double precision THEN
        PERFORM {{schema}}._raise('PM004', format('rate_limit must be more than 0 and at most 1000000 jobs per second (0 or NULL: none), got %s', q.rate_limit));
    END IF;
    IF q.max_running < 1 THEN
        PERFORM {{schema}}._raise('PM004', format('max_running must be at least 1 (0 or NULL: no limit), got %s', q.max_running));
    END IF;
    IF q.key_limit < 1 THEN
        PERFORM {{schema}}._raise('PM004', format('key_limit must be at least 1 (0 or NULL: no limit), got %s', q.key_limit));
    END IF;
    IF q.key_field = '' OR octet_length(q.key_field) > 200 THEN
        PERFORM {{schema}}._raise('PM004', 'key_field must be 1 to 200 bytes (the name of a top-level field of the jobs'' JSON payloads)');
    END IF;
    IF q.key_field IS NOT NULL AND q.key_limit IS NULL THEN
        PERFORM {{schema}}._raise('PM004', 'key_field needs a key_limit');
    END IF;
END $function$;

-- queue_create creates a queue. Settings left NULL take the defaults of the
-- queue table (max_attempts 25, lease 30s, retry_backoff 1s, retry_backoff_max
-- 1h, archive_retention 7 days, max_payload_bytes 1 MiB). With
-- p_if_not_exists an existing queue is returned unchanged; otherwise an
-- existing name fails with PM102.
CREATE OR REPLACE FUNCTION {{schema}}.queue_create(p_name text, p_max_attempts integer DEFAULT NULL::integer, p_lease interval DEFAULT NULL::interval, p_retry_backoff interval DEFAULT NULL::interval, p_retry_backoff_max interval DEFAULT NULL::interval, p_archive_retention interval DEFAULT NULL::interval, p_max_payload_bytes integer DEFAULT NULL::integer, p_if_not_exists boolean DEFAULT false, p_max_depth bigint DEFAULT NULL::bigint, p_backpressure_timeout interval DEFAULT NULL::interval, p_job_timeout interval DEFAULT NULL::interval, p_dead_retention interval DEFAULT NULL::interval, p_rate_limit double precision DEFAULT NULL::double precision, p_max_running integer DEFAULT NULL::integer, p_key_limit integer DEFAULT NULL::integer, p_key_field text DEFAULT NULL::text)
 RETURNS {{schema}}.queue
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q {{schema}}.queue;
BEGIN
    PERFORM {{schema}}._check_name('queue', p_name);
    SELECT * INTO q FROM {{schema}}.queue WHERE name = p_name;
    IF FOUND THEN
        IF p_if_not_exists THEN
            RETURN q;
        END IF;
        PERFORM {{schema}}._raise('PM102', format('queue %s already exists', quote_literal(p_name)));
    END IF;
    q.name := p_name;
    q.max_attempts := coalesce(p_max_attempts, 25);
    q.lease := coalesce(p_lease, interval '30 seconds');
    q.retry_backoff := coalesce(p_retry_backoff, interval '1 second');
    q.retry_backoff_max := coalesce(p_retry_backoff_max, interval '1 hour');
    q.archive_retention := coalesce(p_archive_retention, interval '7 days');
    q.max_payload_bytes := coalesce(p_max_payload_bytes, 1048576);
    q.max_depth := nullif(p_max_depth, 0);
    q.backpressure_timeout := coalesce(p_backpressure_timeout, interval '5 seconds');
    q.job_timeout := nullif(p_job_timeout, interval '0');
    q.dead_retention := nullif(p_dead_retention, interval '0');
    q.rate_limit := nullif(p_rate_limit, 0);
    q.max_running := nullif(p_max_running, 0);
    q.key_limit := nullif(p_key_limit, 0);
    q.key_field := p_key_field;
    PERFORM {{schema}}._queue_check(q);
    INSERT INTO {{schema}}.queue (name, max_attempts, lease, retry_backoff, retry_backoff_max,
                                  archive_retention, max_payload_bytes, max_depth, backpressure_timeout, job_timeout,
                                  dead_retention, rate_limit, max_running, key_limit, key_field)
    VALUES (q.name, q.max_attempts, q.lease, q.retry_backoff, q.retry_backoff_max,
            q.archive_retention, q.max_payload_bytes, q.max_depth, q.backpressure_timeout, q.job_timeout,
            q.dead_retention, q.rate_limit, q.max_running, q.key_limit, q.key_field)
    ON CONFLICT (name) DO NOTHING
    RETURNING * INTO q;
    IF NOT FOUND THEN
        -- A concurrent creator won.
        IF p_if_not_exists THEN
            RETURN {{schema}}._queue(p_name);
        END IF;
        PERFORM {{schema}}._raise('PM102', format('queue %s already exists', quote_literal(p_name)));
    END IF;
    RETURN q;
END $function$;

-- queue_update changes the settings given (non-NULL) of a queue; p_max_depth
-- 0, p_job_timeout 0, p_dead_retention 0, p_rate_limit 0, p_max_running 0
-- and p_key_limit 0 remove the limit (p_key_limit 0 removes key_field too;
-- p_key_field '' removes it alone). Jobs already enqueued keep their
-- max_attempts and their limit keys (or none); the other settings apply at
-- once: a key_limit raised or removed admits the pending jobs it now
-- allows, one lowered lets the jobs of a key over it finish.
CREATE OR REPLACE FUNCTION {{schema}}.queue_update(p_name text, p_max_attempts integer DEFAULT NULL::integer, p_lease interval DEFAULT NULL::interval, p_retry_backoff interval DEFAULT NULL::interval, p_retry_backoff_max interval DEFAULT NULL::interval, p_archive_retention interval DEFAULT NULL::interval, p_max_payload_bytes integer DEFAULT NULL::integer, p_max_depth bigint DEFAULT NULL::bigint, p_backpressure_timeout interval DEFAULT NULL::interval, p_job_timeout interval DEFAULT NULL::interval, p_dead_retention interval DEFAULT NULL::interval, p_rate_limit double precision DEFAULT NULL::double precision, p_max_running integer DEFAULT NULL::integer, p_key_limit integer DEFAULT NULL::integer, p_key_field text DEFAULT NULL::text)
 RETURNS {{schema}}.queue
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q    {{schema}}.queue := {{schema}}._queue(p_name);
    prev integer := q.key_limit;
BEGIN
    q.max_attempts := coalesce(p_max_attempts, q.max_attempts);
    q.lease := coalesce(p_lease, q.lease);
    q.retry_backoff := coalesce(p_retry_backoff, q.retry_backoff);
    q.retry_backoff_max := coalesce(p_retry_backoff_max, q.retry_backoff_max);
    q.archive_retention := coalesce(p_archive_retention, q.archive_retention);
    q.max_payload_bytes := coalesce(p_max_payload_bytes, q.max_payload_bytes);
    q.max_depth := CASE WHEN p_max_depth IS NULL THEN q.max_depth ELSE nullif(p_max_depth, 0) END;
    q.backpressure_timeout := coalesce(p_backpressure_timeout, q.backpressure_timeout);
    q.job_timeout := CASE WHEN p_job_timeout IS NULL THEN q.job_timeout ELSE nullif(p_job_timeout, interval '0') END;
    q.dead_retention := CASE WHEN p_dead_retention IS NULL THEN q.dead_retention
                             ELSE nullif(p_dead_retention, interval '0') END;
    q.rate_limit := CASE WHEN p_rate_limit IS NULL THEN q.rate_limit ELSE nullif(p_rate_limit, 0) END;
    q.max_running := CASE WHEN p_max_running IS NULL THEN q.max_running ELSE nullif(p_max_running, 0) END;
    q.key_limit := CASE WHEN p_key_limit IS NULL THEN q.key_limit ELSE nullif(p_key_limit, 0) END;
    q.key_field := CASE WHEN p_key_limit = 0 THEN NULL WHEN p_key_field IS NULL THEN q.key_field
                        ELSE nullif(p_key_field, '') END;
    PERFORM {{schema}}._queue_check(q);
    UPDATE {{schema}}.queue u
       SET max_attempts = q.max_attempts, lease = q.lease, retry_backoff = q.retry_backoff,
           retry_backoff_max = q.retry_backoff_max, archive_retention = q.archive_retention,
           max_payload_bytes = q.max_payload_bytes, max_depth = q.max_depth,
           backpressure_timeout = q.backpressure_timeout, job_timeout = q.job_timeout,
           dead_retention = q.dead_retention, rate_limit = q.rate_limit, max_running = q.max_running,
           key_limit = q.key_limit, key_field = q.key_field,
           rate_tokens = CASE WHEN q.rate_limit IS DISTINCT FROM u.rate_limit THEN NULL ELSE u.rate_tokens END
     WHERE u.queue_id = q.queue_id
    RETURNING * INTO q;
    IF prev IS NOT NULL AND (q.key_limit IS NULL OR q.key_limit > prev) THEN
        -- The keys with pending jobs, read by skipping from key to key
        -- through job_limit_pending.
        PERFORM {{schema}}._key_limit_admit(q.queue_id, ARRAY(
            WITH RECURSIVE k AS (
                (SELECT x.limit_key FROM {{schema}}.job x
                  WHERE x.queue_id = q.queue_id AND x.limit_key IS NOT NULL AND x.state = 'pending'
                  ORDER BY x.limit_key LIMIT 1)
                UNION ALL
                SELECT (SELECT x.limit_key FROM {{schema}}.job x
                         WHERE x.queue_id = q.queue_id AND x.limit_key > k.limit_key AND x.state = 'pending'
                         ORDER BY x.limit_key LIMIT 1)
                  FROM k WHERE k.limit_key IS NOT NULL)
            SELECT k.limit_key FROM k WHERE k.limit_key IS NOT NULL), true);
    END IF;
    RETURN q;
END $function$;

-- queue_delete removes a queue with its jobs and archive. A queue that still
-- has live jobs (waiting, running or dead) fails with PM108 unless p_force.
CREATE OR REPLACE FUNCTION {{schema}}.queue_delete(p_name text, p_force boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_name);
BEGIN
    PERFORM 1 FROM {{schema}}.queue WHERE queue_id = q.queue_id FOR UPDATE;
    IF NOT p_force AND EXISTS (SELECT 1 FROM {{schema}}.job j WHERE j.queue_id = q.queue_id) THEN
        PERFORM {{schema}}._raise('PM108', format('queue %s still has jobs: complete, cancel or purge them, or force', quote_literal(q.name)));
    END IF;
    WITH d AS (
        DELETE FROM {{schema}}.job j WHERE j.queue_id = q.queue_id RETURNING j.id
    ), a AS (
        DELETE FROM {{schema}}.job_archive a WHERE a.queue_id = q.queue_id RETURNING a.id
    ), l AS (
        DELETE FROM {{schema}}.job_log l WHERE l.job_id IN (SELECT d.id FROM d UNION ALL SELECT a.id FROM a)
    ), st AS (
        DELETE FROM {{schema}}.job_step st WHERE st.job_id IN (SELECT d.id FROM d UNION ALL SELECT a.id FROM a)
    )
    DELETE FROM {{schema}}.job_payload pl
     WHERE pl.id IN (SELECT d.id FROM d UNION ALL SELECT a.id FROM a);
    DELETE FROM {{schema}}.queue WHERE queue_id = q.queue_id;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}.queue_list()
 RETURNS SETOF {{schema}}.queue
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT * FROM {{schema}}.queue ORDER BY name
$function$;

-- queue_stats: per queue (one or all) the live jobs by state, the archive
-- size, the age of the oldest claimable job and the jobs archived in the
-- last minute (throughput). Each count reads one partial index of its state,
-- so the cost follows the size of that state, never of the whole table;
-- available/scheduled/retrying share one scan of the backlog (job_claim).
CREATE OR REPLACE FUNCTION {{schema}}.queue_stats(p_queue text DEFAULT NULL::text)
 RETURNS TABLE(queue text, available bigint, scheduled bigint, running bigint, retrying bigint, dead bigint, archived bigint, oldest_available_seconds double precision, archived_last_minute bigint, pending bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    now_ts timestamptz := clock_timestamp();
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM {{schema}}._queue(p_queue);
    END IF;
    RETURN QUERY
    SELECT q.name, w.available, w.scheduled, r.running, w.retrying, d.dead, a.archived,
           coalesce(extract(epoch FROM now_ts - w.oldest)::double precision, 0), m.recent, p.pending
    FROM {{schema}}.queue q
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE j.run_at <= now_ts) AS available,
               count(*) FILTER (WHERE j.run_at > now_ts AND j.state <> 'retrying') AS scheduled,
               count(*) FILTER (WHERE j.run_at > now_ts AND j.state = 'retrying') AS retrying,
               min(j.run_at) FILTER (WHERE j.run_at <= now_ts) AS oldest
        FROM {{schema}}.job j
        WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')) w
    CROSS JOIN LATERAL (
        SELECT count(*) AS running FROM {{schema}}.job j WHERE j.queue_id = q.queue_id AND j.state = 'running') r
    CROSS JOIN LATERAL (
        SELECT count(*) AS dead FROM {{schema}}.job j WHERE j.queue_id = q.queue_id AND j.state = 'dead') d
    CROSS JOIN LATERAL (
        SELECT count(*) AS pending FROM {{schema}}.job j WHERE j.queue_id = q.queue_id AND j.state = 'pending') p
    CROSS JOIN LATERAL (
        SELECT count(*) AS archived FROM {{schema}}.job_archive x WHERE x.queue_id = q.queue_id) a
    CROSS JOIN LATERAL (
        SELECT count(*) AS recent FROM {{schema}}.job_archive x
        WHERE x.queue_id = q.queue_id AND x.finished_at > now_ts - interval '1 minute') m
    WHERE p_queue IS NULL OR q.name = p_queue
    ORDER BY q.name;
END $function$;

-- queue_latency summarises the jobs each queue finished in the last
-- p_window from the archive: how many completed and were cancelled, and
-- quantiles of the end-to-end latency (enqueue to completion, scheduled
-- delay and retries included) and of the run time (start of the last
-- attempt to completion). It reads only the window through
-- job_archive_finished (queue_id, finished_at): an index range scan per
-- queue, so a scrape costs what the last minute archived, not the archive's
-- size. Dead-lettered jobs stay in the job table; queue_stats counts them.
CREATE OR REPLACE FUNCTION {{schema}}.queue_latency(p_window interval DEFAULT '00:01:00'::interval)
 RETURNS TABLE(queue text, completed bigint, cancelled bigint, latency_p50 double precision, latency_p99 double precision, latency_max double precision, run_p50 double precision, run_p99 double precision)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    now_ts timestamptz := clock_timestamp();
BEGIN
    IF p_window IS NULL OR p_window <= interval '0' OR p_window > interval '1 day' THEN
        PERFORM {{schema}}._raise('PM004', format('queue_latency: window must be in (0, 1 day], got %s', coalesce(p_window::text, 'NULL')));
    END IF;
    RETURN QUERY
    SELECT q.name, coalesce(w.completed, 0), coalesce(w.cancelled, 0),
           w.l50, w.l99, w.lmax, w.r50, w.r99
    FROM {{schema}}.queue q
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE x.status = 'completed') AS completed,
               count(*) FILTER (WHERE x.status = 'cancelled') AS cancelled,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM x.finished_at - x.enqueued_at))
                   FILTER (WHERE x.status = 'completed') AS l50,
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM x.finished_at - x.enqueued_at))
                   FILTER (WHERE x.status = 'completed') AS l99,
               (max(extract(epoch FROM x.finished_at - x.enqueued_at)) FILTER (WHERE x.status = 'completed'))::double precision AS lmax,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM x.finished_at - x.attempted_at))
                   FILTER (WHERE x.status = 'completed' AND x.attempted_at IS NOT NULL) AS r50,
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM x.finished_at - x.attempted_at))
                   FILTER (WHERE x.status = 'completed' AND x.attempted_at IS NOT NULL) AS r99
        FROM {{schema}}.job_archive x
        WHERE x.queue_id = q.queue_id AND x.finished_at > now_ts - p_window) w
    ORDER BY q.name;
END $function$;

-- queue_pause / queue_resume set the state and return it (true: paused);
-- an unknown queue is PM101. Both are idempotent; resuming wakes the
-- queue's idle workers.
CREATE OR REPLACE FUNCTION {{schema}}._queue_set_paused(p_queue text, p_paused boolean)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    UPDATE {{schema}}.queue SET paused = p_paused WHERE name = p_queue;
    IF NOT FOUND THEN
        PERFORM {{schema}}._queue(p_queue);
    END IF;
    IF NOT p_paused THEN
        PERFORM pg_notify({{schema_lit}} || '_log', 'queue:' || p_queue);
    END IF;
    RETURN p_paused;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}.queue_pause(p_queue text)
 RETURNS boolean
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT {{schema}}._queue_set_paused(p_queue, true) $function$;

CREATE OR REPLACE FUNCTION {{schema}}.queue_resume(p_queue text)
 RETURNS boolean
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT {{schema}}._queue_set_paused(p_queue, false) $function$;

-- ---------------------------------------------------------------------------
-- Enqueueing (the Go client's hot path: internal/store/job_enqueue.go)
-- ---------------------------------------------------------------------------

-- _delay_too_long: p_now + p_delay is after the UTC year 9999. Extreme
-- delays are caught before the addition, which would overflow (22008).
CREATE OR REPLACE FUNCTION {{schema}}._delay_too_long(p_now timestamp with time zone, p_delay interval)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT CASE WHEN p_delay IS NULL OR p_delay < interval '0' THEN false
                WHEN p_delay > interval '10000 years' THEN true
                ELSE NOT {{schema}}._time_ok(p_now + p_delay) END
$function$;

-- _queue_depth_check raises PM109 when adding p_n jobs would put more than
-- max_depth live jobs (waiting or running) in the queue. The count is
-- bounded: it reads at most max_depth - p_n + 1 entries of the partial
-- indexes of waiting jobs (job_claim) and running jobs (job_lease), so a
-- queue far below its limit pays for its actual depth and a full one for
-- its limit, never for the whole table:
--   Aggregate -> Limit -> Index Only Scan using job_claim on job (queue_id = $1)
-- (the planner, misled by stale statistics after a burst of enqueues,
-- would otherwise pick a sequential scan of the whole job table). It costs
-- about 0.2 ms per 1,000 jobs counted on a 2-core machine (50,000 waiting
-- jobs: 10.7 ms; docs/operations.md), so limits in the tens of thousands
-- are cheap and a full queue of a million would not be. There is no
-- counter row to keep: completing workers would all update it and wait on
-- one another. The check is not serialised, so enqueuers never wait on each
-- other; concurrent enqueues can overshoot by the batches in flight at that
-- moment. Unique-key duplicates of the batch count as new jobs.
CREATE OR REPLACE FUNCTION {{schema}}._queue_depth_check(q {{schema}}.queue, p_n integer)
 RETURNS void
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    room    bigint := q.max_depth - p_n;
    waiting bigint;
    running bigint := 0;
BEGIN
    IF room >= 0 THEN
        SELECT count(*) INTO waiting FROM (
            SELECT 1 FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
             LIMIT room + 1) w;
        IF waiting <= room THEN
            SELECT count(*) INTO running FROM (
                SELECT 1 FROM {{schema}}.job j
                 WHERE j.queue_id = q.queue_id AND j.state = 'running'
                 LIMIT room - waiting + 1) r;
        END IF;
    END IF;
    IF room < 0 OR waiting + running > room THEN
        PERFORM {{schema}}._raise_backpressure('PM109', format(
            'queue %s is full: %s more jobs would exceed its max_depth of %s jobs waiting or running',
            quote_literal(q.name), p_n, q.max_depth),
            (extract(epoch FROM q.backpressure_timeout) * 1000)::bigint);
    END IF;
END $function$;

-- _job_tags turns a job's tags (a JSON array of strings, or NULL) into the
-- text[] stored: at most 20, each 1 to 100 of A-Z a-z 0-9 . _ : / = @ + -;
-- an empty array is no tags (NULL). PM004 otherwise.
CREATE OR REPLACE FUNCTION {{schema}}._job_tags(p_tags jsonb)
 RETURNS text[]
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    out text[];
BEGIN
    IF p_tags IS NULL OR p_tags = 'null'::jsonb THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(p_tags) <> 'array' THEN
        PERFORM {{schema}}._raise('PM004', 'tags must be a JSON array of strings');
    END IF;
    IF jsonb_array_length(p_tags) > 20 THEN
        PERFORM {{schema}}._raise('PM004', format('at most 20 tags per job, got %s', jsonb_array_length(p_tags)));
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_tags) e(t)
                WHERE jsonb_typeof(e.t) <> 'string' OR NOT (e.t #>> '{}') ~ '^[A-Za-z0-9._:/=@+-]{1,100}$') THEN
        PERFORM {{schema}}._raise('PM004', 'a tag is 1 to 100 of A-Z a-z 0-9 . _ : / = @ + -');
    END IF;
    out := ARRAY(SELECT DISTINCT e.t FROM jsonb_array_elements_text(p_tags) e(t) ORDER BY e.t);
    RETURN nullif(out, '{}'::text[]);
END $function$;

-- _job_metadata checks a job's metadata: a JSON object of at most 64 KiB
-- (as jsonb text); PM004 otherwise. Returns true.
CREATE OR REPLACE FUNCTION {{schema}}._job_metadata(p_metadata jsonb)
 RETURNS boolean
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_metadata IS NOT NULL AND jsonb_typeof(p_metadata) <> 'object' THEN
        PERFORM {{schema}}._raise('PM004', 'job metadata must be a JSON object');
    END IF;
    RETURN {{schema}}._job_document_check('metadata', p_metadata);
END $function$;

-- enqueue_many inserts a batch of jobs into a queue, in the caller's
-- transaction, and returns one row per input in input order: the job's id,
-- whether it was a duplicate (an existing live job with the same unique key,
-- whose id, state and run_at are returned instead), its state and run_at.
-- Arrays are parallel to p_payloads; the others may be NULL or shorter
-- (missing entries are NULL: defaults). Per job: priority (higher first,
-- -32768..32767, default 0), run_at or delay (not both; default now),
-- max_attempts (default the queue's), unique key, and a uniqueness window
-- for the key (p_unique_fors, 1 second to 366 days; see below). The queue is created with
-- default settings if it does not exist, unless p_create_queue is false
-- (then PM101). Bad input fails the whole batch, writing nothing.
--
-- A unique key alone is unique among the queue's live jobs (waiting or
-- running): once its job finishes, the key can be used again. With a
-- window (p_unique_fors), it is unique within the window whatever became
-- of its job: windows are fixed and aligned to the Unix epoch (1 hour:
-- from the top of each hour, UTC), the job's unique_key is
-- <key>@<window start, UTC> (a live job of another window does not make it
-- a duplicate), and a duplicate returns the window's job: its state if it is
-- still kept, 'completed' once the archive has pruned it (or it was
-- purged dead).
--
-- In a queue with a key_limit, a job's limit key (p_limit_keys, else the
-- field key_field of its JSON payload) admits it only while fewer than
-- key_limit jobs of the key wait to run or run; the others wait as
-- 'pending' (_key_limit_enqueue). A job without a key in a queue with a
-- key_field is PM113, a limit key in a queue without a key_limit PM004.
CREATE OR REPLACE FUNCTION {{schema}}.enqueue_many(p_queue text, p_payloads bytea[], p_kinds text[] DEFAULT NULL::text[], p_priorities integer[] DEFAULT NULL::integer[], p_run_ats timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_delays interval[] DEFAULT NULL::interval[], p_max_attempts integer[] DEFAULT NULL::integer[], p_unique_keys text[] DEFAULT NULL::text[], p_create_queue boolean DEFAULT true, p_timeouts interval[] DEFAULT NULL::interval[], p_tags jsonb[] DEFAULT NULL::jsonb[], p_metadata jsonb[] DEFAULT NULL::jsonb[], p_unique_fors interval[] DEFAULT NULL::interval[], p_sequence_keys text[] DEFAULT NULL::text[], p_sequence_continues boolean[] DEFAULT NULL::boolean[], p_limit_keys text[] DEFAULT NULL::text[], p_names text[] DEFAULT NULL::text[], p_depends_on jsonb[] DEFAULT NULL::jsonb[], p_deps_ignore_cancelled boolean[] DEFAULT NULL::boolean[], p_deps_ignore_dead boolean[] DEFAULT NULL::boolean[], p_tenants text[] DEFAULT NULL::text[])
 RETURNS TABLE(id bigint, duplicate boolean, state text, run_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    q          {{schema}}.queue;
    n          integer := coalesce(cardinality(p_payloads), 0);
    now_ts     timestamptz := clock_timestamp();
    too_big    boolean;
    bad_delay  boolean;
    bad_att    boolean;
    bad_prio   boolean;
    both_times boolean;
    bad_time   boolean;
    far_delay  boolean;
    long_kind  boolean;
    long_key   boolean;
    bad_tmo    boolean;
    has_keys   boolean;
    wake       boolean;
    ids        bigint[];
    r          record;
    found_id   bigint;
    keys       text[] := p_unique_keys;
    wends      timestamptz[];
    pend       boolean[];
    lkeys      text[];
    lpend      boolean[];
    d_ord      integer[];
    d_dep      bigint[];
    d_how      text[];
    d_named    boolean[];
    d_wf       bigint;
    dwait      integer[];
    tnames     text[];
    ftags      double precision[];
BEGIN
    IF p_create_queue THEN
        SELECT * INTO q FROM {{schema}}.queue WHERE name = p_queue;
        IF NOT FOUND THEN
            q := {{schema}}.queue_create(p_queue, p_if_not_exists => true);
        END IF;
    ELSE
        q := {{schema}}._queue(p_queue);
    END IF;
    IF n = 0 THEN
        PERFORM {{schema}}._raise('PM010', 'empty batch: enqueue needs at least one job');
    END IF;
    IF coalesce(cardinality(p_kinds), 0) > n OR coalesce(cardinality(p_priorities), 0) > n
       OR coalesce(cardinality(p_run_ats), 0) > n OR coalesce(cardinality(p_delays), 0) > n
       OR coalesce(cardinality(p_max_attempts), 0) > n OR coalesce(cardinality(p_unique_keys), 0) > n
       OR coalesce(cardinality(p_timeouts), 0) > n OR coalesce(cardinality(p_tags), 0) > n
       OR coalesce(cardinality(p_metadata), 0) > n OR coalesce(cardinality(p_unique_fors), 0) > n
       OR coalesce(cardinality(p_sequence_keys), 0) > n OR coalesce(cardinality(p_sequence_continues), 0) > n
       OR coalesce(cardinality(p_limit_keys), 0) > n OR coalesce(cardinality(p_names), 0) > n
       OR coalesce(cardinality(p_depends_on), 0) > n OR coalesce(cardinality(p_deps_ignore_cancelled), 0) > n
       OR coalesce(cardinality(p_deps_ignore_dead), 0) > n OR coalesce(cardinality(p_tenants), 0) > n THEN
        PERFORM {{schema}}._raise('PM004', 'kinds, priorities, run_ats, delays, max_attempts, unique_keys, timeouts, tags, metadata, unique_fors, sequence_keys, sequence_continues, limit_keys, names, depends_on, deps_ignore_cancelled, deps_ignore_dead and tenants must not be longer than payloads');
    END IF;
    -- Fair share: a job naming a tenant makes the queue fair; each job of
    -- a fair queue gets its tenant ('' for none) and its virtual start tag
    -- (_fair_enqueue, PM118 a bad tenant name).
    IF q.fair OR (p_tenants IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_tenants) u(t) WHERE u.t IS NOT NULL)) THEN
        SELECT * INTO tnames, ftags FROM {{schema}}._fair_enqueue(q, p_tenants, n);
    END IF;
    -- Per-key limits: each job's key (PM113 if the queue's key_field needs
    -- one it lacks), locked (before the sequences) and which jobs wait.
    IF q.key_field IS NOT NULL OR (p_limit_keys IS NOT NULL
                                   AND EXISTS (SELECT 1 FROM unnest(p_limit_keys) u(k) WHERE u.k IS NOT NULL)) THEN
        lkeys := {{schema}}._key_limit_keys(q, p_payloads, p_limit_keys, p_sequence_keys);
        lpend := {{schema}}._key_limit_enqueue(q, lkeys);
    END IF;
    -- Sequences: each key's row is locked (in key order, so concurrent
    -- batches cannot deadlock on each other) and pend says which jobs wait
    -- behind their sequence's head (_sequence_enqueue).
    IF p_sequence_keys IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_sequence_keys) u(k) WHERE u.k IS NOT NULL) THEN
        pend := {{schema}}._sequence_enqueue(q.queue_id, p_sequence_keys, p_sequence_continues);
    ELSIF p_sequence_continues IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_sequence_continues) u(r) WHERE u.r) THEN
        PERFORM {{schema}}._raise('PM004', 'sequence_continue needs a sequence_key');
    END IF;
    -- Workflows: the batch's ids are drawn now (names refer to them), its
    -- dependencies checked, the live ones locked (_deps_enqueue); a job
    -- waits for those not completed yet.
    IF (p_depends_on IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_depends_on) u(d) WHERE u.d IS NOT NULL))
       OR (p_names IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_names) u(nm) WHERE u.nm IS NOT NULL)) THEN
        ids := ARRAY(SELECT nextval('{{schema}}.job_id_seq') FROM generate_series(1, n));
        SELECT * INTO d_ord, d_dep, d_how, d_named, d_wf
          FROM {{schema}}._deps_enqueue(q, ids, p_names, p_depends_on, p_unique_keys, p_sequence_keys, lkeys);
        SELECT array_agg(coalesce(c.w, 0) ORDER BY g.i) INTO dwait
          FROM generate_series(1, n) g(i)
          LEFT JOIN (SELECT u.o, count(*) FILTER (WHERE u.h <> 'completed')::integer AS w
                       FROM unnest(d_ord, d_how) u(o, h) GROUP BY u.o) c ON c.o = g.i;
        lpend := ARRAY(SELECT coalesce(lpend[u.ord], false) OR u.w > 0
                         FROM unnest(dwait) WITH ORDINALITY u(w, ord) ORDER BY u.ord);
    ELSIF p_deps_ignore_cancelled IS NOT NULL OR p_deps_ignore_dead IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM unnest(p_deps_ignore_cancelled) u(b) WHERE u.b)
           OR EXISTS (SELECT 1 FROM unnest(p_deps_ignore_dead) u(b) WHERE u.b) THEN
            PERFORM {{schema}}._raise('PM004', 'deps_ignore_cancelled and deps_ignore_dead need depends_on');
        END IF;
    END IF;
    IF lpend IS NOT NULL THEN
        pend := CASE WHEN pend IS NULL THEN lpend
                     ELSE ARRAY(SELECT coalesce(u.a, false) OR coalesce(u.b, false)
                                  FROM unnest(pend, lpend) WITH ORDINALITY AS u(a, b, ord) ORDER BY u.ord) END;
    END IF;
    -- Uniqueness windows: the key becomes <key>@<window start>, and the
    -- window's end is kept for job_unique.
    IF p_unique_fors IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_unique_fors) u(w) WHERE u.w IS NOT NULL) THEN
        IF EXISTS (SELECT 1 FROM unnest(p_unique_fors, p_unique_keys) u(w, k) WHERE u.w IS NOT NULL
                    AND (u.w < interval '1 second' OR u.w > interval '366 days' OR extract(month FROM u.w) <> 0
                         OR extract(year FROM u.w) <> 0 OR coalesce(u.k, '') = '')) THEN
            PERFORM {{schema}}._raise('PM004', 'a uniqueness window needs a unique key and lasts from 1 second to 366 days, without months or years');
        END IF;
        SELECT array_agg(CASE WHEN u.w IS NULL THEN u.k
                              ELSE u.k || '@' || to_char(b.start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') END ORDER BY u.ord),
               array_agg(CASE WHEN u.w IS NULL THEN NULL ELSE b.start + u.w END ORDER BY u.ord)
          INTO keys, wends
          FROM unnest(p_unique_keys, p_unique_fors) WITH ORDINALITY AS u(k, w, ord)
         CROSS JOIN LATERAL (SELECT to_timestamp(floor(extract(epoch FROM now_ts) / extract(epoch FROM u.w))
                                                 * extract(epoch FROM u.w)) AS start) b;
    END IF;
    -- Tags and metadata raise PM004 when malformed (_job_tags, _job_metadata).
    PERFORM {{schema}}._job_tags(u.t) FROM unnest(p_tags) AS u(t) WHERE u.t IS NOT NULL;
    PERFORM {{schema}}._job_metadata(u.m) FROM unnest(p_metadata) AS u(m) WHERE u.m IS NOT NULL;
    SELECT coalesce(bool_or(octet_length(u.p) > q.max_payload_bytes), false),
           coalesce(bool_or(u.d < interval '0'), false),
           coalesce(bool_or(u.m < 1), false),
           coalesce(bool_or(u.pr NOT BETWEEN -32768 AND 32767), false),
           coalesce(bool_or(u.ra IS NOT NULL AND u.d IS NOT NULL), false),
           coalesce(bool_or(u.k IS NOT NULL), false),
           coalesce(bool_or(coalesce(u.ra, now_ts + coalesce(u.d, interval '0')) <= now_ts), false),
           coalesce(bool_or(NOT {{schema}}._time_ok(u.ra)), false),
           coalesce(bool_or({{schema}}._delay_too_long(now_ts, u.d)), false),
           coalesce(bool_or(octet_length(u.kd) > 200), false),
           coalesce(bool_or(octet_length(u.k) > 1000), false),
           coalesce(bool_or(u.tmo <= interval '0' OR u.tmo > interval '366 days'), false)
      INTO too_big, bad_delay, bad_att, bad_prio, both_times, has_keys, wake, bad_time, far_delay, long_kind, long_key, bad_tmo
      FROM unnest(p_payloads, p_delays, p_max_attempts, p_priorities, p_run_ats, p_unique_keys, p_kinds, p_timeouts)
           AS u(p, d, m, pr, ra, k, kd, tmo);
    IF too_big THEN
        PERFORM {{schema}}._raise('PM103', format('payload larger than the queue''s max_payload_bytes (%s)', q.max_payload_bytes));
    END IF;
    IF bad_delay THEN
        PERFORM {{schema}}._raise('PM104', 'delay must not be negative');
    END IF;
    IF bad_att THEN
        PERFORM {{schema}}._raise('PM105', 'max_attempts must be at least 1');
    END IF;
    IF bad_prio THEN
        PERFORM {{schema}}._raise('PM004', 'priority must be between -32768 and 32767');
    END IF;
    IF both_times THEN
        PERFORM {{schema}}._raise('PM004', 'give a job a run_at or a delay, not both');
    END IF;
    IF bad_time THEN
        PERFORM {{schema}}._raise('PM004', 'run_at must be in the UTC years 0001 to 9999');
    END IF;
    IF far_delay THEN
        PERFORM {{schema}}._raise('PM104', 'delay too long: the job would run after the UTC year 9999');
    END IF;
    IF long_kind THEN
        PERFORM {{schema}}._raise('PM004', 'kind must be at most 200 bytes');
    END IF;
    IF long_key THEN
        PERFORM {{schema}}._raise('PM004', 'unique_key must be at most 1000 bytes');
    END IF;
    IF bad_tmo THEN
        PERFORM {{schema}}._raise('PM004', 'timeout must be positive and at most 366 days');
    END IF;
    -- Queues with a max_depth pay for a bounded count (_queue_depth_check);
    -- the others for this one test of a column already read.
    IF q.max_depth IS NOT NULL THEN
        PERFORM {{schema}}._queue_depth_check(q, n);
    END IF;

    IF NOT has_keys AND pend IS NULL THEN
        -- Fast path: ids come from the sequence in input order (nextval is
        -- increasing within a statement), so ORDER BY id is input order.
        -- src is read twice (a CTE so referenced is computed once): each
        -- job's id is drawn once, for its row and its payload's.
        RETURN QUERY
        WITH src AS (
            SELECT nextval('{{schema}}.job_id_seq') AS id, u.*
            FROM unnest(p_payloads, p_kinds, p_priorities, p_run_ats, p_delays, p_max_attempts, p_timeouts, p_tags, p_metadata,
                        tnames, ftags)
                 WITH ORDINALITY AS u(p, kd, pr, ra, d, m, tmo, tg, md, tn, ft, ord)
            ORDER BY u.ord
        ), pl AS (
            INSERT INTO {{schema}}.job_payload (id, payload) SELECT src.id, src.p FROM src
        ), ins AS (
            INSERT INTO {{schema}}.job AS j (id, queue_id, state, priority, max_attempts, run_at, enqueued_at, kind, timeout,
                                             tags, metadata, tenant, fair_tag)
            SELECT src.id, q.queue_id,
                   CASE WHEN t.at > now_ts THEN 'scheduled' ELSE 'available' END,
                   coalesce(src.pr, 0), coalesce(src.m, q.max_attempts), t.at, now_ts, src.kd, src.tmo,
                   {{schema}}._job_tags(src.tg), src.md, src.tn, src.ft
            FROM src
            CROSS JOIN LATERAL (SELECT coalesce(src.ra, now_ts + coalesce(src.d, interval '0')) AS at) t
            ORDER BY src.ord
            RETURNING j.id, j.state, j.run_at
        )
        SELECT ins.id, false, ins.state, ins.run_at FROM ins ORDER BY ins.id;
    ELSE
        -- Unique keys: take the ids first so that each input row can be
        -- matched to its job whether it was inserted or found. ON CONFLICT DO
        -- NOTHING waits for a concurrent inserter of the same key and then
        -- skips; the lookup below is a new statement and sees its row.
        IF ids IS NULL THEN
            ids := ARRAY(SELECT nextval('{{schema}}.job_id_seq') FROM generate_series(1, n));
        END IF;
        -- Windowed keys: the first job of a key's window takes the window
        -- (job_unique's primary key, taken in key order); the others are
        -- its duplicates, whatever became of it, and insert nothing.
        IF wends IS NOT NULL THEN
            INSERT INTO {{schema}}.job_unique AS ju (queue_id, unique_key, job_id, expires_at)
            SELECT q.queue_id, u.k, u.id, u.e FROM unnest(ids, keys, wends) AS u(id, k, e)
             WHERE u.e IS NOT NULL
             ORDER BY u.k, u.id
            ON CONFLICT (queue_id, unique_key) DO NOTHING;
        END IF;
        INSERT INTO {{schema}}.job AS j (id, queue_id, state, priority, max_attempts, run_at, enqueued_at, kind,
                                         unique_key, timeout, tags, metadata, sequence_key, sequence_continue, limit_key,
                                         depends_on, deps_waiting, deps_ignore_cancelled, deps_ignore_dead, has_dependents,
                                         workflow_id, tenant, fair_tag)
        SELECT u.id, q.queue_id,
               CASE WHEN pend[u.ord] THEN 'pending' WHEN t.at > now_ts THEN 'scheduled' ELSE 'available' END,
               coalesce(u.pr, 0), coalesce(u.m, q.max_attempts), t.at, now_ts, u.kd, u.k, u.tmo,
               {{schema}}._job_tags(u.tg), u.md, u.sk, CASE WHEN u.sk IS NOT NULL THEN coalesce(u.sr, false) END,
               lkeys[u.ord], dp.ids, CASE WHEN dp.ids IS NOT NULL THEN dwait[u.ord] END,
               CASE WHEN dp.ids IS NOT NULL THEN coalesce(p_deps_ignore_cancelled[u.ord], false) END,
               CASE WHEN dp.ids IS NOT NULL THEN coalesce(p_deps_ignore_dead[u.ord], false) END,
               CASE WHEN d_named[u.ord] THEN true END,
               CASE WHEN dp.ids IS NOT NULL OR p_names[u.ord] IS NOT NULL THEN d_wf END,
               u.tn, u.ft
        FROM unnest(ids, p_payloads, p_kinds, p_priorities, p_run_ats, p_delays, p_max_attempts, keys, p_timeouts,
                    p_tags, p_metadata, p_sequence_keys, p_sequence_continues, tnames, ftags)
             WITH ORDINALITY AS u(id, p, kd, pr, ra, d, m, k, tmo, tg, md, sk, sr, tn, ft, ord)
        LEFT JOIN (SELECT e.o, array_agg(e.d ORDER BY e.d) AS ids FROM unnest(d_ord, d_dep) e(o, d)
                    GROUP BY e.o) dp ON dp.o = u.ord
        CROSS JOIN LATERAL (SELECT coalesce(u.ra, now_ts + coalesce(u.d, interval '0')) AS at) t
        WHERE wends[u.ord] IS NULL
           OR EXISTS (SELECT 1 FROM {{schema}}.job_unique ju
                       WHERE ju.queue_id = q.queue_id AND ju.unique_key = u.k AND ju.job_id = u.id)
        -- Key order: concurrent batches take the unique index's locks in one
        -- order and cannot deadlock on each other.
        ORDER BY u.k, u.ord
        ON CONFLICT (queue_id, unique_key) WHERE unique_key IS NOT NULL AND state <> 'dead' DO NOTHING;

        IF wends IS NOT NULL THEN
            -- A window taken by a job that a live job of the same key and
            -- window kept out (a key written with its window by hand) is
            -- given back: that live job answers below.
            DELETE FROM {{schema}}.job_unique ju USING unnest(ids, keys) AS u(id, k)
             WHERE ju.queue_id = q.queue_id AND ju.unique_key = u.k AND ju.job_id = u.id
               AND NOT EXISTS (SELECT 1 FROM {{schema}}.job x WHERE x.id = u.id);
        END IF;

        -- A row skipped for a key whose job finished (was archived) before
        -- this lookup has neither its own job nor a live one: insert it
        -- again (keys without a window only).
        FOR r IN
            SELECT u.id AS id, u.ord AS ord
            FROM unnest(ids, keys) WITH ORDINALITY AS u(id, k, ord)
            WHERE wends[u.ord] IS NULL
              AND NOT EXISTS (SELECT 1 FROM {{schema}}.job x WHERE x.id = u.id)
              AND NOT EXISTS (SELECT 1 FROM {{schema}}.job x WHERE x.queue_id = q.queue_id AND x.unique_key = u.k
                                                              AND x.state <> 'dead')
        LOOP
            LOOP
                INSERT INTO {{schema}}.job AS j (id, queue_id, state, priority, max_attempts, run_at, enqueued_at,
                                                 kind, unique_key, timeout, tags, metadata, sequence_key, sequence_continue,
                                                 limit_key, tenant, fair_tag)
                SELECT r.id, q.queue_id,
                       CASE WHEN pend[r.ord] THEN 'pending' WHEN t.at > now_ts THEN 'scheduled' ELSE 'available' END,
                       coalesce(p_priorities[r.ord], 0), coalesce(p_max_attempts[r.ord], q.max_attempts),
                       t.at, now_ts, p_kinds[r.ord], keys[r.ord], p_timeouts[r.ord],
                       {{schema}}._job_tags(p_tags[r.ord]), p_metadata[r.ord], p_sequence_keys[r.ord],
                       CASE WHEN p_sequence_keys[r.ord] IS NOT NULL THEN coalesce(p_sequence_continues[r.ord], false) END,
                       lkeys[r.ord], tnames[r.ord], ftags[r.ord]
                FROM (SELECT coalesce(p_run_ats[r.ord], now_ts + coalesce(p_delays[r.ord], interval '0')) AS at) t
                ON CONFLICT (queue_id, unique_key) WHERE unique_key IS NOT NULL AND state <> 'dead' DO NOTHING
                RETURNING j.id INTO found_id;
                EXIT WHEN found_id IS NOT NULL;
                SELECT x.id INTO found_id FROM {{schema}}.job x
                WHERE x.queue_id = q.queue_id AND x.unique_key = keys[r.ord] AND x.state <> 'dead';
                EXIT WHEN found_id IS NOT NULL;
            END LOOP;
        END LOOP;

        -- The payloads of the jobs this call inserted (each id once).
        INSERT INTO {{schema}}.job_payload (id, payload)
        SELECT u.id, u.p FROM unnest(ids, p_payloads) AS u(id, p)
        WHERE EXISTS (SELECT 1 FROM {{schema}}.job x WHERE x.id = u.id);

        -- A sequence whose head this call meant to insert but found a
        -- duplicate of (a unique key) has no head: give it its next job.
        IF pend IS NOT NULL AND has_keys THEN
            PERFORM {{schema}}._sequence_advance(q.queue_id, s.k)
               FROM (SELECT DISTINCT u.k FROM unnest(p_sequence_keys) AS u(k) WHERE u.k IS NOT NULL) s;
            -- Likewise a key whose admitted job was a duplicate.
            IF lkeys IS NOT NULL THEN
                PERFORM {{schema}}._key_limit_admit(q.queue_id, lkeys, false);
            END IF;
        END IF;

        -- Workflows: the edges to wait on, then those to dependencies that
        -- failed already settled at once (their dependents cancelled, or
        -- counting them off when they ignore them).
        IF d_ord IS NOT NULL THEN
            INSERT INTO {{schema}}.job_dependency (dep_id, job_id)
            SELECT u.d, ids[u.o] FROM unnest(d_ord, d_dep, d_how) u(o, d, h) WHERE u.h <> 'completed'
            ON CONFLICT DO NOTHING;
            IF 'cancelled' = ANY (d_how) OR 'dead' = ANY (d_how) THEN
                PERFORM {{schema}}._deps_settle(NULL,
                    ARRAY(SELECT u.d FROM unnest(d_dep, d_how) u(d, h) WHERE u.h = 'cancelled'),
                    ARRAY(SELECT u.d FROM unnest(d_dep, d_how) u(d, h) WHERE u.h = 'dead'));
            END IF;
        END IF;

        -- Each row's job: its own (live, or cancelled with a dependency at
        -- once), else its window's (kept live or in the archive,
        -- 'completed' once pruned), else the live job of its key.
        RETURN QUERY
        SELECT coalesce(own.id, gone.id, win.id, live.id), own.id IS NULL AND gone.id IS NULL,
               coalesce(own.state, gone.status, win.state, live.state),
               coalesce(own.run_at, win.run_at, live.run_at)
        FROM unnest(ids, keys) WITH ORDINALITY AS u(id, k, ord)
        LEFT JOIN {{schema}}.job own ON own.id = u.id
        LEFT JOIN {{schema}}.job_archive gone ON d_ord IS NOT NULL AND own.id IS NULL AND gone.id = u.id
        LEFT JOIN LATERAL (
            SELECT ju.job_id AS id, coalesce(x.state, a.status, 'completed') AS state, x.run_at
              FROM {{schema}}.job_unique ju
              LEFT JOIN {{schema}}.job x ON x.id = ju.job_id
              LEFT JOIN {{schema}}.job_archive a ON a.id = ju.job_id
             WHERE own.id IS NULL AND gone.id IS NULL AND wends[u.ord] IS NOT NULL AND ju.queue_id = q.queue_id
               AND ju.unique_key = u.k
        ) win ON true
        LEFT JOIN LATERAL (
            SELECT x.id, x.state, x.run_at FROM {{schema}}.job x
            WHERE own.id IS NULL AND gone.id IS NULL AND win.id IS NULL AND x.queue_id = q.queue_id AND x.unique_key = u.k
              AND x.state <> 'dead'
        ) live ON true
        ORDER BY u.ord;
    END IF;

    -- A wake-up for idle workers; polling stays the correctness path.
    IF wake THEN
        PERFORM pg_notify({{schema_lit}} || '_log', 'queue:' || q.name);
    END IF;
END $function$;

-- enqueue inserts one job; see enqueue_many.
CREATE OR REPLACE FUNCTION {{schema}}.enqueue(p_queue text, p_payload bytea, p_kind text DEFAULT NULL::text, p_priority integer DEFAULT 0, p_run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_delay interval DEFAULT NULL::interval, p_max_attempts integer DEFAULT NULL::integer, p_unique_key text DEFAULT NULL::text, p_create_queue boolean DEFAULT true, p_timeout interval DEFAULT NULL::interval, p_tags jsonb DEFAULT NULL::jsonb, p_metadata jsonb DEFAULT NULL::jsonb, p_unique_for interval DEFAULT NULL::interval, p_sequence_key text DEFAULT NULL::text, p_sequence_continue boolean DEFAULT NULL::boolean, p_limit_key text DEFAULT NULL::text, p_depends_on jsonb DEFAULT NULL::jsonb, p_deps_ignore_cancelled boolean DEFAULT NULL::boolean, p_deps_ignore_dead boolean DEFAULT NULL::boolean, p_tenant text DEFAULT NULL::text)
 RETURNS TABLE(id bigint, duplicate boolean, state text, run_at timestamp with time zone)
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT * FROM {{schema}}.enqueue_many(p_queue, ARRAY[p_payload], ARRAY[p_kind], ARRAY[p_priority],
                                          ARRAY[p_run_at], ARRAY[p_delay], ARRAY[p_max_attempts],
                                          ARRAY[p_unique_key], p_create_queue, ARRAY[p_timeout], ARRAY[p_tags],
                                          ARRAY[p_metadata], ARRAY[p_unique_for], ARRAY[p_sequence_key],
                                          ARRAY[p_sequence_continue], ARRAY[p_limit_key], NULL,
                                          ARRAY[p_depends_on], ARRAY[p_deps_ignore_cancelled], ARRAY[p_deps_ignore_dead],
                                          ARRAY[p_tenant])
$function$;

-- ---------------------------------------------------------------------------
-- Claims and leases (the Go worker's hot path: internal/store/job_claim.go)
-- ---------------------------------------------------------------------------

-- _lease_token returns a random bigint in [1, 2^53-1] (exact in JSON for
-- JavaScript and jq, which read numbers as doubles), drawn as
-- statements/lease_token.sql says.
CREATE OR REPLACE FUNCTION {{schema}}._lease_token()
 RETURNS bigint
 LANGUAGE sql
 PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT {{sql lease_token(u.h)}}
    FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS h) u
$function$;

-- job_claim: see _job_claim. A paused queue hands out nothing; a queue
-- with a rate_limit or max_running (queue settings) hands out at most what
-- its limits allow now, its claims taking turns on the queue's row. The
-- arguments are checked first (PM004), before the queue is looked up
-- (PM003, PM101) or found paused: a bad argument is refused whatever else
-- is wrong, as the Go client refused it before its call.
CREATE OR REPLACE FUNCTION {{schema}}.job_claim(p_queue text, p_limit integer DEFAULT 1, p_lease interval DEFAULT NULL::interval, p_worker text DEFAULT NULL::text, p_max_bytes bigint DEFAULT NULL::bigint, p_async boolean DEFAULT false)
 RETURNS TABLE(id bigint, queue text, kind text, payload bytea, priority integer, attempt integer, max_attempts integer, lease_token bigint, lease_expires_at timestamp with time zone, run_at timestamp with time zone, enqueued_at timestamp with time zone, attempted_at timestamp with time zone, unique_key text, errors jsonb, timeout interval)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q      {{schema}}.queue;
    now_ts timestamptz;
    allow  integer;
    tokens double precision;
    cap    double precision;
    busy   integer;
    got    integer;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'limit must be at least 1');
    END IF;
    IF p_lease IS NOT NULL AND (p_lease <= interval '0' OR p_lease > interval '366 days') THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive and at most 366 days');
    END IF;
    IF p_max_bytes IS NOT NULL AND p_max_bytes < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'max_bytes must be at least 1');
    END IF;
    q := {{schema}}._queue(p_queue);
    IF q.paused THEN
        RETURN; -- nothing handed out
    END IF;
    IF q.rate_limit IS NULL AND q.max_running IS NULL THEN
        RETURN QUERY SELECT * FROM {{schema}}._job_claim(p_queue, p_limit, p_lease, p_worker, p_max_bytes, p_async);
        RETURN;
    END IF;
    -- A limited queue (rate_limit, max_running): its claims take turns on
    -- the queue's row until they commit, so the running count and the token bucket
    -- they read are exact.
    SELECT * INTO q FROM {{schema}}.queue qq WHERE qq.queue_id = q.queue_id FOR UPDATE;
    IF q.paused THEN
        RETURN;
    END IF;
    now_ts := clock_timestamp();
    allow := p_limit;
    IF q.rate_limit IS NOT NULL THEN
        cap := greatest(q.rate_limit, 1);
        tokens := least(cap, coalesce(q.rate_tokens, cap)
                             + q.rate_limit * greatest(extract(epoch FROM now_ts - coalesce(q.rate_at, now_ts)), 0));
        allow := least(allow, floor(tokens)::integer);
    END IF;
    IF q.max_running IS NOT NULL AND allow > 0 THEN
        -- Running jobs whose lease holds (an expired one is rescued by the
        -- claim), read from the job_lease index, at most max_running.
        SELECT count(*) INTO busy FROM (
            SELECT 1 FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.state = 'running' AND j.lease_expires_at > now_ts
             LIMIT q.max_running) r;
        allow := least(allow, q.max_running - busy);
    END IF;
    got := 0;
    IF allow > 0 THEN
        RETURN QUERY SELECT * FROM {{schema}}._job_claim(p_queue, allow, p_lease, p_worker, p_max_bytes, p_async);
        GET DIAGNOSTICS got = ROW_COUNT;
    END IF;
    IF q.rate_limit IS NOT NULL THEN
        UPDATE {{schema}}.queue qq SET rate_tokens = tokens - got, rate_at = now_ts WHERE qq.queue_id = q.queue_id;
    END IF;
END $function$;

-- job_claim leases up to p_limit claimable jobs of a queue to the caller, in
-- one statement: highest priority first, then oldest run_at, then oldest id
-- (in a fair queue: the lowest virtual start tag, then oldest id,
-- 024_fair_share.up.sql; priority does not order a fair queue's jobs). Each claimed job is 'running', its attempt counted and its lease_token
-- incremented; the lease lasts p_lease (default the queue's) on the
-- database clock. Rows other claimers hold are skipped (SKIP LOCKED), so
-- claimers never wait on each other. Expired leases of the queue are rescued
-- first. Returns no rows when nothing is claimable. Its arguments are
-- job_claim()'s, which checked them.
CREATE OR REPLACE FUNCTION {{schema}}._job_claim(p_queue text, p_limit integer DEFAULT 1, p_lease interval DEFAULT NULL::interval, p_worker text DEFAULT NULL::text, p_max_bytes bigint DEFAULT NULL::bigint, p_async boolean DEFAULT false)
 RETURNS TABLE(id bigint, queue text, kind text, payload bytea, priority integer, attempt integer, max_attempts integer, lease_token bigint, lease_expires_at timestamp with time zone, run_at timestamp with time zone, enqueued_at timestamp with time zone, attempted_at timestamp with time zone, unique_key text, errors jsonb, timeout interval)
 LANGUAGE plpgsql
 SET enable_bitmapscan TO 'off'
 SET enable_indexscan TO 'off'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    q        {{schema}}.queue := {{schema}}._queue(p_queue);
    now_ts   timestamptz := clock_timestamp();
    now_s    bigint := floor(extract(epoch FROM now_ts))::bigint;
    expires  timestamptz;
    -- Session settings: the position ("priority|run_at in microseconds|id")
    -- and the second of the last full read and of the last lease probe.
    tag      text := md5({{schema_lit}} || '/' || q.queue_id);
    pos_name text := 'pgmsg_claim.p' || tag;
    full_name text := 'pgmsg_claim.f' || tag;
    probe_name text := 'pgmsg_claim.r' || tag;
    lag_name text := 'pgmsg_claim.l' || tag;
    lag_st   text;
    fpos     double precision;
    pos      text[] := string_to_array(nullif(current_setting(pos_name, true), ''), '|');
    h_pri    smallint;
    h_run    timestamptz;
    h_id     bigint;
    ids      bigint[];
    tids     tid[];
    pris     smallint[];
    runs     timestamptz[];
    sizes    bigint[];
    n        integer;
    cum      bigint := 0;
    token0   bigint;
    ftags    double precision[];
BEGIN
    IF p_async THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    expires := now_ts + coalesce(p_lease, q.lease);
    -- Expired leases: one probe of the small job_lease index, at most once
    -- a second per session.
    IF coalesce(nullif(current_setting(probe_name, true), '')::bigint, 0) <> now_s THEN
        PERFORM set_config(probe_name, now_s::text, false);
        IF EXISTS (SELECT 1 FROM {{schema}}.job j
                   WHERE j.queue_id = q.queue_id AND j.state = 'running' AND j.lease_expires_at <= now_ts) THEN
            PERFORM {{schema}}._rescue(q.queue_id, now_ts, 1000);
        END IF;
    END IF;

    IF q.fair THEN
        -- A fair queue (fair share across tenants): its tagged jobs in tag
        -- order (job_fair), from the session's lagged position when it
        -- read the whole index this second (_fair_claim_from), then from
        -- the start, then any job left untagged (enqueued while the queue
        -- became fair) in the usual order. Each read runs only when those
        -- before it found too few.
        IF coalesce(nullif(current_setting(full_name, true), '')::bigint, 0) <> now_s THEN
            PERFORM set_config(full_name, now_s::text, false);
            pos := NULL;
        ELSE
            SELECT fc.state, fc.pos INTO lag_st, fpos
              FROM {{schema}}._fair_claim_from(current_setting(lag_name, true),
                                               floor(extract(epoch FROM now_ts) * 1000)::bigint,
                                               CASE WHEN cardinality(pos) = 1 THEN pos[1]::double precision END) fc;
            PERFORM set_config(lag_name, lag_st, false);
            pos := CASE WHEN fpos IS NOT NULL THEN ARRAY[fpos::text] END;
        END IF;
        WITH fp AS (
            SELECT j.id, j.priority, j.run_at, j.fair_tag AS t, 0 AS b, CASE WHEN p_max_bytes IS NOT NULL THEN
                   (SELECT octet_length(pl.payload)::bigint FROM {{schema}}.job_payload pl WHERE pl.id = j.id) END AS n, j.ctid AS c FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.fair_tag IS NOT NULL AND j.state IN ('available', 'scheduled', 'retrying')
               AND cardinality(pos) = 1 AND j.fair_tag >= pos[1]::double precision AND j.run_at <= now_ts
             ORDER BY j.fair_tag, j.id
             LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), fr AS (
            SELECT j.id, j.priority, j.run_at, j.fair_tag AS t, 1 AS b, CASE WHEN p_max_bytes IS NOT NULL THEN
                   (SELECT octet_length(pl.payload)::bigint FROM {{schema}}.job_payload pl WHERE pl.id = j.id) END AS n, j.ctid AS c FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.fair_tag IS NOT NULL AND j.state IN ('available', 'scheduled', 'retrying')
               AND j.run_at <= now_ts
             ORDER BY j.fair_tag, j.id
             LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), fu AS (
            SELECT j.id, j.priority, j.run_at, NULL::double precision AS t, 2 AS b, CASE WHEN p_max_bytes IS NOT NULL THEN
                   (SELECT octet_length(pl.payload)::bigint FROM {{schema}}.job_payload pl WHERE pl.id = j.id) END AS n, j.ctid AS c FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.fair_tag IS NULL AND j.state IN ('available', 'scheduled', 'retrying')
               AND j.run_at <= now_ts
             ORDER BY j.priority DESC, j.run_at, j.id
             LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), x AS (
            SELECT fp.* FROM fp
            UNION ALL SELECT fr.* FROM fr WHERE fr.id NOT IN (SELECT fp.id FROM fp)
            UNION ALL SELECT fu.* FROM fu
            LIMIT p_limit
        )
        SELECT array_agg(x.id ORDER BY x.b, x.t, x.priority DESC, x.run_at, x.id),
               array_agg(x.priority ORDER BY x.b, x.t, x.priority DESC, x.run_at, x.id),
               array_agg(x.run_at ORDER BY x.b, x.t, x.priority DESC, x.run_at, x.id),
               array_agg(x.n ORDER BY x.b, x.t, x.priority DESC, x.run_at, x.id),
               (array_agg(x.t ORDER BY x.b, x.t, x.priority DESC, x.run_at, x.id) FILTER (WHERE x.t IS NOT NULL)),
               array_agg(x.c ORDER BY x.b, x.t, x.priority DESC, x.run_at, x.id)
          INTO ids, pris, runs, sizes, ftags, tids
          FROM x;
    ELSIF cardinality(pos) = 3 AND coalesce(nullif(current_setting(full_name, true), '')::bigint, 0) = now_s THEN
        h_pri := pos[1]::smallint;
        h_run := to_timestamp(pos[2]::bigint / 1000000) + (pos[2]::bigint % 1000000) * interval '1 microsecond';
        h_id := pos[3]::bigint;
        -- Three ordered reads of the index, run one after the other only
        -- as far as needed (a CTE is read as the statement asks for rows).
        WITH hi AS (
            SELECT j.id, j.priority, j.run_at, CASE WHEN p_max_bytes IS NOT NULL THEN
                   (SELECT octet_length(pl.payload)::bigint FROM {{schema}}.job_payload pl WHERE pl.id = j.id) END AS n, j.ctid AS c FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
               AND j.priority > h_pri AND j.run_at <= now_ts
             ORDER BY j.priority DESC, j.run_at, j.id
             LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), eq AS (
            SELECT j.id, j.priority, j.run_at, CASE WHEN p_max_bytes IS NOT NULL THEN
                   (SELECT octet_length(pl.payload)::bigint FROM {{schema}}.job_payload pl WHERE pl.id = j.id) END AS n, j.ctid AS c FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
               AND j.priority = h_pri AND (j.run_at, j.id) > (h_run, h_id) AND j.run_at <= now_ts
             ORDER BY j.run_at, j.id
             LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), lo AS (
            SELECT j.id, j.priority, j.run_at, CASE WHEN p_max_bytes IS NOT NULL THEN
                   (SELECT octet_length(pl.payload)::bigint FROM {{schema}}.job_payload pl WHERE pl.id = j.id) END AS n, j.ctid AS c FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
               AND j.priority < h_pri AND j.run_at <= now_ts
             ORDER BY j.priority DESC, j.run_at, j.id
             LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), x AS (
            SELECT hi.*, 1 AS b FROM hi UNION ALL SELECT eq.*, 2 FROM eq UNION ALL SELECT lo.*, 3 FROM lo
            LIMIT p_limit
        )
        SELECT array_agg(x.id ORDER BY x.b, x.priority DESC, x.run_at, x.id),
               array_agg(x.priority ORDER BY x.b, x.priority DESC, x.run_at, x.id),
               array_agg(x.run_at ORDER BY x.b, x.priority DESC, x.run_at, x.id),
               array_agg(x.n ORDER BY x.b, x.priority DESC, x.run_at, x.id),
               array_agg(x.c ORDER BY x.b, x.priority DESC, x.run_at, x.id)
          INTO ids, pris, runs, sizes, tids
          FROM x;
    END IF;
    IF NOT q.fair AND coalesce(cardinality(ids), 0) < p_limit THEN
        -- The whole index in claim order. Rows the positioned read locked
        -- are ours, so they are found again where they belong.
        PERFORM set_config(full_name, now_s::text, false);
        SELECT array_agg(c.id ORDER BY c.priority DESC, c.run_at, c.id),
               array_agg(c.priority ORDER BY c.priority DESC, c.run_at, c.id),
               array_agg(c.run_at ORDER BY c.priority DESC, c.run_at, c.id),
               array_agg(c.n ORDER BY c.priority DESC, c.run_at, c.id),
               array_agg(c.c ORDER BY c.priority DESC, c.run_at, c.id)
          INTO ids, pris, runs, sizes, tids
          FROM (SELECT j.id, j.priority, j.run_at, CASE WHEN p_max_bytes IS NOT NULL THEN
                   (SELECT octet_length(pl.payload)::bigint FROM {{schema}}.job_payload pl WHERE pl.id = j.id) END AS n, j.ctid AS c FROM {{schema}}.job j
                 WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
                   AND j.run_at <= now_ts
                 ORDER BY j.priority DESC, j.run_at, j.id
                 LIMIT p_limit FOR UPDATE SKIP LOCKED) c;
    END IF;
    n := coalesce(cardinality(ids), 0);
    IF n = 0 THEN
        RETURN;
    END IF;
    -- The byte cap: the longest prefix, in claim order, whose payloads fit,
    -- and at least the first job. Rows cut stay as they were (locked only
    -- until this transaction ends).
    IF p_max_bytes IS NOT NULL THEN
        FOR i IN 1 .. n LOOP
            cum := cum + coalesce(sizes[i], 0);
            IF cum > p_max_bytes AND i > 1 THEN
                n := i - 1;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    -- One random draw per claim (gen_random_uuid, some 12 us, was one per
    -- job): job k of the claim gets token0 + k, wrapped into [1, 2^53-1].
    -- Every job of a claim goes to the same claimer, so knowing one of its
    -- tokens tells nothing about another claim's.
    token0 := {{schema}}._lease_token();
    IF q.fair THEN
        -- The fair position: the largest tag claimed (a byte cap's cut
        -- rows are at most a claim's, found again by the next full read).
        IF cardinality(ftags) > 0 THEN
            PERFORM set_config(pos_name, (SELECT max(u.t) FROM unnest(ftags[1:n]) u(t))::text, false);
        END IF;
    ELSE
        PERFORM set_config(pos_name, pris[n] || '|' || (extract(epoch FROM runs[n]) * 1000000)::bigint || '|' || ids[n], false);
    END IF;
    -- The claim's time is read again here, after the statements that
    -- chose the jobs took their snapshots, not kept from the call's
    -- start: a job that became claimable while the call waited (a
    -- sequence's next job once its head's completion committed, a
    -- workflow's dependent) must not be stamped as started before that
    -- (the chaos checker's sequence and dependency invariants compare
    -- attempted_at with the predecessor's finished_at). The Go claim
    -- statement reads it in-statement likewise.
    now_ts := clock_timestamp();
    expires := now_ts + coalesce(p_lease, q.lease);
    -- The claimed rows by the ctids the reads locked them at (a locked row
    -- keeps its ctid until this update), and their payloads one by one: with
    -- index scans disabled (SET above), a TID scan is the one access to job
    -- not disabled (and the generic plans pinned: the disabled paths' costs
    -- would have every call planned again). A queue vacuumed or analyzed while empty has statistics
    -- of 0 rows in thousands of pages, and the planner joined the claimed
    -- ids to full scans of job_pkey and job_payload_pkey instead
    -- (internal/store TestJobHotPathsWithEmptyStatistics).
    RETURN QUERY
    WITH u AS (
        UPDATE {{schema}}.job j
           SET
               {{sql job_claim_set(token0, expires, now_ts, p_worker)}}
          FROM unnest(ids[1:n], tids[1:n]) WITH ORDINALITY AS k(id, tid, ord)
         WHERE j.ctid = k.tid AND j.id = k.id
        RETURNING k.ord, j.id, j.kind, j.priority, j.attempt, j.max_attempts, j.lease_token,
                  j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.unique_key, j.errors, j.timeout
    )
    SELECT u.id, q.name, u.kind, (SELECT pl.payload FROM {{schema}}.job_payload pl WHERE pl.id = u.id),
           u.priority::integer, u.attempt, u.max_attempts, u.lease_token,
           u.lease_expires_at, u.run_at, u.enqueued_at, u.attempted_at, u.unique_key, u.errors,
           coalesce(u.timeout, q.job_timeout)
    FROM u
    ORDER BY u.ord;
END $function$;

-- _rescue makes up to p_limit jobs of a queue whose lease expired claimable
-- again (their attempt counted; a job out of attempts goes dead), recording
-- the expiry in the job's errors. Rows locked by someone else are skipped.
-- A job that goes dead moves its limit key or its sequence on (trigger
-- job_state_after), under the key's lock, which the trigger takes row by
-- row in the order the UPDATE meets the rows: so
-- that two rescues (or a rescue and an enqueue) of jobs of several keys
-- cannot deadlock, the locks are taken here first, in the order every
-- other path takes them (limit keys, then sequences, each in lock key
-- order), and the triggers find them held.
CREATE OR REPLACE FUNCTION {{schema}}._rescue(p_queue_id integer, p_now timestamp with time zone, p_limit integer)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    n   integer;
    ids bigint[];
BEGIN
    SELECT array_agg(r.id) INTO ids FROM (
        SELECT j.id FROM {{schema}}.job j
        WHERE j.queue_id = p_queue_id AND j.state = 'running' AND j.lease_expires_at <= p_now
        ORDER BY j.lease_expires_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED) r;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(l.h)
       FROM (SELECT DISTINCT hashtextextended({{schema_lit}} || '.limit.' || p_queue_id || '.' || j.limit_key, 0) AS h
               FROM {{schema}}.job j
              WHERE j.id = ANY (ids) AND j.limit_key IS NOT NULL AND j.attempt >= j.max_attempts) l
      ORDER BY l.h;
    PERFORM pg_advisory_xact_lock(l.h)
       FROM (SELECT DISTINCT hashtextextended({{schema_lit}} || '.sequence.' || p_queue_id || '.' || j.sequence_key, 0) AS h
               FROM {{schema}}.job j
              WHERE j.id = ANY (ids) AND j.sequence_key IS NOT NULL AND j.attempt >= j.max_attempts) l
      ORDER BY l.h;
    UPDATE {{schema}}.job j
       SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'dead' ELSE 'available' END,
           finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN p_now END,
           run_at = p_now, lease_expires_at = NULL, worker = NULL,
           errors = coalesce(j.errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempt, 'at', p_now,
               'error', format('lease expired at %s (worker %s stopped without completing the job)',
                               j.lease_expires_at, coalesce(j.worker, 'unnamed'))))
     WHERE j.id = ANY (ids);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $function$;

-- job_rescue rescues up to p_limit expired leases of one queue (or of every
-- queue) and returns how many. job_claim already does this for its queue;
-- this is for maintenance and psql.
CREATE OR REPLACE FUNCTION {{schema}}.job_rescue(p_queue text DEFAULT NULL::text, p_limit integer DEFAULT 1000)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    now_ts timestamptz := clock_timestamp();
    total  integer := 0;
    qid    integer;
BEGIN
    FOR qid IN SELECT q.queue_id FROM {{schema}}.queue q WHERE p_queue IS NULL OR q.name = p_queue ORDER BY q.queue_id LOOP
        total := total + {{schema}}._rescue(qid, now_ts, p_limit);
    END LOOP;
    IF p_queue IS NOT NULL AND NOT FOUND THEN
        PERFORM {{schema}}._queue(p_queue);
    END IF;
    RETURN total;
END $function$;

-- _not_held raises the error for a job the caller does not hold: PM107 if
-- no such job exists anywhere, else PM106 naming its current state.
CREATE OR REPLACE FUNCTION {{schema}}._not_held(p_id bigint, p_token bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    st text;
BEGIN
    SELECT j.state INTO st FROM {{schema}}.job j WHERE j.id = p_id;
    IF NOT FOUND THEN
        SELECT a.status INTO st FROM {{schema}}.job_archive a WHERE a.id = p_id;
        IF NOT FOUND THEN
            PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
        END IF;
        PERFORM {{schema}}._raise('PM106', format('job %s is not held by the lease presented: it is archived (%s)', p_id, st));
    END IF;
    IF st = 'running' THEN
        PERFORM {{schema}}._raise('PM106', format('job %s is not held by the lease presented: it is running under another lease', p_id));
    END IF;
    PERFORM {{schema}}._raise('PM106', format('job %s is not held by the lease presented: it is %s', p_id, st));
END $function$;

-- job_extend_many pushes the lease of every held job of the arrays to now +
-- p_lease (default its queue's lease) and returns those extended with their
-- new expiry; jobs not held are not returned. The worker pool's heartbeat.
CREATE OR REPLACE FUNCTION {{schema}}.job_extend_many(p_ids bigint[], p_tokens bigint[], p_lease interval DEFAULT NULL::interval)
 RETURNS TABLE(id bigint, lease_expires_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    now_ts timestamptz := clock_timestamp();
BEGIN
    IF p_lease IS NOT NULL AND (p_lease <= interval '0' OR p_lease > interval '366 days') THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive and at most 366 days');
    END IF;
    RETURN QUERY
    UPDATE {{schema}}.job j
       SET lease_expires_at = now_ts + coalesce(p_lease, q.lease)
      FROM unnest(p_ids, p_tokens) AS u(id, token), {{schema}}.queue q
     WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running' AND q.queue_id = j.queue_id
    RETURNING j.id, j.lease_expires_at;
END $function$;

-- job_extend extends one held job's lease; PM106/PM107 if not held.
CREATE OR REPLACE FUNCTION {{schema}}.job_extend(p_id bigint, p_lease_token bigint, p_lease interval DEFAULT NULL::interval)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    expires timestamptz;
BEGIN
    SELECT e.lease_expires_at INTO expires FROM {{schema}}.job_extend_many(ARRAY[p_id], ARRAY[p_lease_token], p_lease) e;
    IF NOT FOUND THEN
        PERFORM {{schema}}._not_held(p_id, p_lease_token);
    END IF;
    RETURN expires;
END $function$;

-- ---------------------------------------------------------------------------
-- Finishing a job: completion, failure and retries, snooze, cancel
-- ---------------------------------------------------------------------------

-- _job_document_check raises PM004 when a job's progress or result is
-- larger than 64 KiB (as JSON text): they are kept in the job's row, read
-- with it, and meant to be small. Returns true otherwise.
CREATE OR REPLACE FUNCTION {{schema}}._job_document_check(p_what text, p_doc jsonb)
 RETURNS boolean
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_doc IS NOT NULL AND octet_length(p_doc::text) > 65536 THEN
        PERFORM {{schema}}._raise('PM004', format('job %s is %s bytes as JSON, more than 65536', p_what,
                                                  octet_length(p_doc::text)));
    END IF;
    RETURN true;
END $function$;

-- _job_log_clip bounds one attempt's log to 1 MiB (1048576 bytes of UTF-8):
-- a longer one keeps its first characters up to the bound, followed by a
-- line that says it was cut. Clients cut at their own, smaller bound first
-- (the Go worker at WorkerOpts.MaxLogBytes, 64 KiB by default).
CREATE OR REPLACE FUNCTION {{schema}}._job_log_clip(p_log text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    s text := p_log;
BEGIN
    IF octet_length(s) <= 1048576 THEN
        RETURN s;
    END IF;
    s := left(s, 1048576);
    -- Each character is at least a byte: cutting the excess in characters
    -- removes at least the excess in bytes, so this ends in a few turns.
    WHILE octet_length(s) > 1048576 LOOP
        s := left(s, length(s) - (octet_length(s) - 1048576));
    END LOOP;
    RETURN s || E'\n[pgmsg: log truncated at 1048576 bytes]';
END $function$;

-- job_complete_many archives (status completed) every job of the arrays
-- still held under its token, in one statement, with its result (p_results,
-- by position; NULL or shorter: none; at most 64 KiB each, PM004) and what
-- its handler logged during the attempt (p_logs, by position; NULL or
-- shorter: nothing; see _job_log_clip), and returns their ids. Jobs not
-- held are left as they are and simply not returned (their logs are not
-- kept).
CREATE OR REPLACE FUNCTION {{schema}}.job_complete_many(p_ids bigint[], p_tokens bigint[], p_results jsonb[] DEFAULT NULL::jsonb[], p_logs text[] DEFAULT NULL::text[])
 RETURNS TABLE(id bigint)
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    WITH u AS (
        SELECT u.id, u.token, u.result, u.log FROM unnest(p_ids, p_tokens, p_results, p_logs) AS u(id, token, result, log)
         WHERE {{schema}}._job_document_check('result', u.result)
    ), d AS (
        DELETE FROM {{schema}}.job j
        USING u
        WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running'
        RETURNING j.*, u.result, u.log
    ), a AS (
        INSERT INTO {{schema}}.job_archive (id, queue_id, status, priority, attempt, max_attempts, enqueued_at,
                                            attempted_at, finished_at, kind, unique_key, errors, progress, result,
                                            tags, metadata, sequence_key, depends_on, workflow_id, batch_id)
        SELECT d.id, d.queue_id, 'completed', d.priority, d.attempt, d.max_attempts, d.enqueued_at,
               d.attempted_at, clock_timestamp(), d.kind, d.unique_key, d.errors, d.progress, d.result,
               d.tags, d.metadata, d.sequence_key, d.depends_on, d.workflow_id, d.batch_id
        FROM d
        RETURNING job_archive.id
    ), l AS (
        INSERT INTO {{schema}}.job_log (job_id, attempt, at, outcome, log)
        SELECT d.id, d.attempt, clock_timestamp(), 'completed', {{schema}}._job_log_clip(d.log)
        FROM d WHERE d.log IS NOT NULL AND d.log <> ''
    )
    SELECT a.id FROM a
$function$;

-- job_complete archives one held job, with its handler's result (a JSON
-- document of at most 64 KiB, or NULL) and what the attempt logged (p_log,
-- NULL: nothing); PM106/PM107 if not held.
CREATE OR REPLACE FUNCTION {{schema}}.job_complete(p_id bigint, p_lease_token bigint, p_result jsonb DEFAULT NULL::jsonb, p_log text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM 1 FROM {{schema}}.job_complete_many(ARRAY[p_id], ARRAY[p_lease_token], ARRAY[p_result], ARRAY[p_log]);
    IF NOT FOUND THEN
        PERFORM {{schema}}._not_held(p_id, p_lease_token);
    END IF;
END $function$;

-- job_progress records a running job's progress (a JSON document of at
-- most 64 KiB; NULL clears it), visible in job_get while it runs and kept
-- in the archive; PM106/PM107 if the job is not held under the token.
CREATE OR REPLACE FUNCTION {{schema}}.job_progress(p_id bigint, p_lease_token bigint, p_progress jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM {{schema}}._job_document_check('progress', p_progress);
    UPDATE {{schema}}.job j SET progress = p_progress
     WHERE j.id = p_id AND j.lease_token = p_lease_token AND j.state = 'running';
    IF NOT FOUND THEN
        PERFORM {{schema}}._not_held(p_id, p_lease_token);
    END IF;
END $function$;

-- _backoff: retry_backoff * 2^(attempt-1), capped at retry_backoff_max, then
-- +-10% jitter so that jobs failing together do not retry together.
CREATE OR REPLACE FUNCTION {{schema}}._backoff(p_base interval, p_max interval, p_attempt integer)
 RETURNS interval
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT make_interval(secs => least(extract(epoch FROM p_max)::double precision,
                                       extract(epoch FROM p_base)::double precision
                                           * power(2::double precision, least(greatest(p_attempt - 1, 0), 60)))
                                 * (0.9 + 0.2 * random()))
$function$;

-- job_fail records p_error for the held attempt and either schedules a
-- retry ('retrying', after p_retry_in or else the queue's backoff) or, when
-- the job is out of attempts or p_dead is set, moves it to the dead-letter
-- state ('dead'). p_log (NULL: none) is what the handler logged during the
-- attempt, kept with it (job_logs). Returns the job's new state and run_at.
CREATE OR REPLACE FUNCTION {{schema}}.job_fail(p_id bigint, p_lease_token bigint, p_error text, p_retry_in interval DEFAULT NULL::interval, p_dead boolean DEFAULT false, p_log text DEFAULT NULL::text)
 RETURNS TABLE(state text, run_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    j      {{schema}}.job;
    q      {{schema}}.queue;
    now_ts timestamptz := clock_timestamp();
    dead   boolean;
BEGIN
    IF p_retry_in IS NOT NULL AND p_retry_in < interval '0' THEN
        PERFORM {{schema}}._raise('PM104', 'retry delay must not be negative');
    END IF;
    IF {{schema}}._delay_too_long(now_ts, p_retry_in) THEN
        PERFORM {{schema}}._raise('PM104', 'retry delay too long: the job would run after the UTC year 9999');
    END IF;
    SELECT * INTO j FROM {{schema}}.job x WHERE x.id = p_id AND x.lease_token = p_lease_token AND x.state = 'running'
    FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM {{schema}}._not_held(p_id, p_lease_token);
    END IF;
    SELECT * INTO q FROM {{schema}}.queue x WHERE x.queue_id = j.queue_id;
    dead := coalesce(p_dead, false) OR j.attempt >= j.max_attempts;
    IF p_log IS NOT NULL AND p_log <> '' THEN
        INSERT INTO {{schema}}.job_log (job_id, attempt, at, outcome, log)
        VALUES (p_id, j.attempt, now_ts, CASE WHEN dead THEN 'dead' ELSE 'retrying' END, {{schema}}._job_log_clip(p_log));
    END IF;
    RETURN QUERY
    UPDATE {{schema}}.job x
       SET state = CASE WHEN dead THEN 'dead' ELSE 'retrying' END,
           run_at = CASE WHEN dead THEN x.run_at
                         ELSE now_ts + coalesce(p_retry_in, {{schema}}._backoff(q.retry_backoff, q.retry_backoff_max, j.attempt)) END,
           finalized_at = CASE WHEN dead THEN now_ts END,
           lease_expires_at = NULL, worker = NULL,
           errors = coalesce(x.errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempt, 'at', now_ts, 'error', left(coalesce(p_error, ''), 10000)))
     WHERE x.id = p_id
    RETURNING x.state, x.run_at;
END $function$;

-- job_snooze puts a held job back to wait p_delay (0: claimable at once, a
-- release) without counting the attempt, keeping what its handler logged
-- (p_log, NULL: none) as a 'snoozed' entry of the attempt. Returns the new
-- run_at.
CREATE OR REPLACE FUNCTION {{schema}}.job_snooze(p_id bigint, p_lease_token bigint, p_delay interval DEFAULT '00:00:00'::interval, p_log text DEFAULT NULL::text)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    now_ts timestamptz := clock_timestamp();
    v_run  timestamptz;
    v_q    integer;
BEGIN
    IF p_delay IS NULL OR p_delay < interval '0' THEN
        PERFORM {{schema}}._raise('PM104', 'snooze delay must not be negative');
    END IF;
    IF {{schema}}._delay_too_long(now_ts, p_delay) THEN
        PERFORM {{schema}}._raise('PM104', 'snooze delay too long: the job would run after the UTC year 9999');
    END IF;
    UPDATE {{schema}}.job j
       SET state = CASE WHEN p_delay > interval '0' THEN 'scheduled' ELSE 'available' END,
           attempt = j.attempt - 1, run_at = now_ts + p_delay, lease_expires_at = NULL, worker = NULL
     WHERE j.id = p_id AND j.lease_token = p_lease_token AND j.state = 'running'
    RETURNING j.run_at, j.queue_id INTO v_run, v_q;
    IF NOT FOUND THEN
        PERFORM {{schema}}._not_held(p_id, p_lease_token);
    END IF;
    IF p_log IS NOT NULL AND p_log <> '' THEN
        INSERT INTO {{schema}}.job_log (job_id, attempt, at, outcome, log)
        SELECT p_id, j.attempt + 1, now_ts, 'snoozed', {{schema}}._job_log_clip(p_log)
          FROM {{schema}}.job j WHERE j.id = p_id;
    END IF;
    IF p_delay = interval '0' THEN
        PERFORM pg_notify({{schema_lit}} || '_log', 'queue:' || (SELECT q.name FROM {{schema}}.queue q WHERE q.queue_id = v_q));
    END IF;
    RETURN v_run;
END $function$;

-- job_cancel archives a job (status cancelled) whatever its state: waiting,
-- running (the worker's completion is then rejected) or dead. Returns false
-- if the job had already finished (is archived); PM107 if it never existed.
CREATE OR REPLACE FUNCTION {{schema}}.job_cancel(p_id bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    done boolean;
BEGIN
    -- For the trigger job_sequence_left: a cancelled head holds its sequence.
    PERFORM set_config('pgmsg.job_cancel', 'on', true);
    WITH d AS (
        DELETE FROM {{schema}}.job j WHERE j.id = p_id RETURNING j.*
    )
    INSERT INTO {{schema}}.job_archive (id, queue_id, status, priority, attempt, max_attempts, enqueued_at,
                                        attempted_at, finished_at, kind, unique_key, errors, progress, tags, metadata,
                                        sequence_key, depends_on, workflow_id, batch_id)
    SELECT d.id, d.queue_id, 'cancelled', d.priority, d.attempt, d.max_attempts, d.enqueued_at,
           d.attempted_at, clock_timestamp(), d.kind, d.unique_key, d.errors, d.progress, d.tags, d.metadata,
           d.sequence_key, d.depends_on, d.workflow_id, d.batch_id
    FROM d;
    done := FOUND;
    PERFORM set_config('pgmsg.job_cancel', '', true);
    IF done THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM {{schema}}.job_archive a WHERE a.id = p_id) THEN
        RETURN false;
    END IF;
    PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
    RETURN false;
END $function$;

-- job_retry makes a waiting job claimable now ("retry now"): a
-- scheduled job, or one waiting for its retry backoff, becomes available
-- at once, keeping its attempts; idle workers of its queue are woken. An
-- available job stays as it is. A running, dead or finished job is refused
-- with PM110 (dead jobs are requeued with dead_requeue), an unknown id with
-- PM107. Returns the job's state afterwards.
CREATE OR REPLACE FUNCTION {{schema}}.job_retry(p_id bigint)
 RETURNS text
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_state text;
    v_queue text;
BEGIN
    SELECT j.state, q.name INTO v_state, v_queue
      FROM {{schema}}.job j JOIN {{schema}}.queue q ON q.queue_id = j.queue_id
     WHERE j.id = p_id
       FOR UPDATE OF j;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM {{schema}}.job_archive a WHERE a.id = p_id) THEN
            PERFORM {{schema}}._raise('PM110', format('job %s is finished: it cannot be retried', p_id));
        END IF;
        PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
    END IF;
    IF v_state IN ('scheduled', 'retrying') THEN
        UPDATE {{schema}}.job j SET state = 'available', run_at = least(j.run_at, clock_timestamp())
         WHERE j.id = p_id;
        PERFORM pg_notify({{schema_lit}} || '_log', 'queue:' || v_queue);
        RETURN 'available';
    ELSIF v_state = 'available' THEN
        RETURN v_state;
    END IF;
    PERFORM {{schema}}._raise('PM110', format('job %s is %s: only a scheduled or retrying job can be retried now%s', p_id, v_state,
        CASE WHEN v_state = 'dead' THEN ' (requeue dead jobs with dead_requeue)' ELSE '' END));
    RETURN v_state;
END $function$;

-- job_get returns one job wherever it is: live (state available, scheduled,
-- retrying, running, dead or pending) or archived (state completed or
-- cancelled), with its dependencies (depends_on, NULL: none) and, while it
-- waits for them (pending), how many have not completed yet
-- (deps_waiting), its workflow, sequence key, limit key (NULL once
-- archived: the archive keeps none) and batch (each NULL: none). PM107 if
-- there is no such job.
CREATE OR REPLACE FUNCTION {{schema}}.job_get(p_id bigint)
 RETURNS TABLE(id bigint, queue text, state text, kind text, payload bytea, priority integer, attempt integer, max_attempts integer, lease_token bigint, lease_expires_at timestamp with time zone, run_at timestamp with time zone, enqueued_at timestamp with time zone, attempted_at timestamp with time zone, finished_at timestamp with time zone, worker text, unique_key text, errors jsonb, timeout interval, progress jsonb, result jsonb, tags text[], metadata jsonb, depends_on bigint[], deps_waiting integer, workflow_id bigint, sequence_key text, limit_key text, batch_id bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT j.id, q.name, j.state, j.kind, (SELECT pl.payload FROM {{schema}}.job_payload pl WHERE pl.id = j.id), j.priority::integer, j.attempt, j.max_attempts, j.lease_token,
           j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.finalized_at, j.worker, j.unique_key, j.errors,
           coalesce(j.timeout, q.job_timeout), j.progress, NULL::jsonb, j.tags, j.metadata, j.depends_on,
           CASE WHEN j.state = 'pending' THEN j.deps_waiting END, j.workflow_id, j.sequence_key, j.limit_key, j.batch_id
    FROM {{schema}}.job j JOIN {{schema}}.queue q ON q.queue_id = j.queue_id
    WHERE j.id = p_id
    UNION ALL
    SELECT a.id, q.name, a.status, a.kind, (SELECT pl.payload FROM {{schema}}.job_payload pl WHERE pl.id = a.id), a.priority::integer, a.attempt, a.max_attempts, NULL::bigint,
           NULL::timestamptz, NULL::timestamptz, a.enqueued_at, a.attempted_at, a.finished_at, NULL::text,
           a.unique_key, a.errors, NULL::interval, a.progress, a.result, a.tags, a.metadata, a.depends_on,
           NULL::integer, a.workflow_id, a.sequence_key, NULL::text, a.batch_id
    FROM {{schema}}.job_archive a JOIN {{schema}}.queue q ON q.queue_id = a.queue_id
    WHERE a.id = p_id;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
    END IF;
END $function$;

-- job_list pages through a queue's jobs, live and archived, by id, oldest
-- first (p_order 'asc', the default) or newest first ('desc'; anything else
-- is PM004), filtered by state, kind, tag and enqueue time [p_since,
-- p_until) (each NULL: any), at most p_limit (0..1000, PM004 otherwise),
-- with job_get's columns. p_after_id is the cursor, in the listing's order:
-- the last id of the previous page (0 or NULL: from the start); ascending,
-- only larger ids follow it, descending only smaller ones. Each table is
-- read through its (queue_id, id) index (job_queue_id, job_archive_queue_id)
-- from the cursor on, in either direction, stopping at the limit; the
-- filters are checked on the rows read.
CREATE OR REPLACE FUNCTION {{schema}}.job_list(p_queue text, p_state text DEFAULT NULL::text, p_kind text DEFAULT NULL::text, p_since timestamp with time zone DEFAULT NULL::timestamp with time zone, p_until timestamp with time zone DEFAULT NULL::timestamp with time zone, p_limit integer DEFAULT 100, p_after_id bigint DEFAULT 0, p_tag text DEFAULT NULL::text, p_order text DEFAULT 'asc'::text)
 RETURNS TABLE(id bigint, queue text, state text, kind text, payload bytea, priority integer, attempt integer, max_attempts integer, lease_token bigint, lease_expires_at timestamp with time zone, run_at timestamp with time zone, enqueued_at timestamp with time zone, attempted_at timestamp with time zone, finished_at timestamp with time zone, worker text, unique_key text, errors jsonb, timeout interval, progress jsonb, result jsonb, tags text[], metadata jsonb, depends_on bigint[], deps_waiting integer, workflow_id bigint, sequence_key text, limit_key text, batch_id bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    q     {{schema}}.queue := {{schema}}._queue(p_queue);
    after bigint := coalesce(p_after_id, 0);
    live  boolean := p_state IS NULL OR p_state IN ('available', 'scheduled', 'retrying', 'running', 'dead', 'pending');
    done  boolean := p_state IS NULL OR p_state IN ('completed', 'cancelled');
BEGIN
    IF NOT (live OR done) THEN
        PERFORM {{schema}}._raise('PM004', format('unknown job state %s (available, scheduled, retrying, running, dead, pending, completed or cancelled)',
                                                  quote_literal(p_state)));
    END IF;
    IF p_limit IS NULL OR p_limit < 0 OR p_limit > 1000 THEN
        PERFORM {{schema}}._raise('PM004', format('limit must be between 0 and 1000, got %s', coalesce(p_limit::text, 'NULL')));
    END IF;
    IF p_order IS NULL OR p_order NOT IN ('asc', 'desc') THEN
        PERFORM {{schema}}._raise('PM004', format('order must be asc or desc, got %s', coalesce(quote_literal(p_order), 'NULL')));
    END IF;
    IF p_order = 'asc' THEN
        RETURN QUERY
        SELECT x.* FROM (
            (SELECT j.id, q.name, j.state, j.kind, (SELECT pl.payload FROM {{schema}}.job_payload pl WHERE pl.id = j.id),
                    j.priority::integer, j.attempt, j.max_attempts, j.lease_token, j.lease_expires_at, j.run_at, j.enqueued_at,
                    j.attempted_at, j.finalized_at, j.worker, j.unique_key, j.errors, coalesce(j.timeout, q.job_timeout),
                    j.progress, NULL::jsonb, j.tags, j.metadata, j.depends_on,
                    CASE WHEN j.state = 'pending' THEN j.deps_waiting END, j.workflow_id, j.sequence_key, j.limit_key, j.batch_id
               FROM {{schema}}.job j
              WHERE live AND j.queue_id = q.queue_id AND j.id > after AND (p_state IS NULL OR j.state = p_state)
                AND (p_kind IS NULL OR j.kind = p_kind) AND (p_tag IS NULL OR j.tags @> ARRAY[p_tag])
                AND (p_since IS NULL OR j.enqueued_at >= p_since) AND (p_until IS NULL OR j.enqueued_at < p_until)
              ORDER BY j.queue_id, j.id
              LIMIT p_limit)
            UNION ALL
            (SELECT a.id, q.name, a.status, a.kind, (SELECT pl.payload FROM {{schema}}.job_payload pl WHERE pl.id = a.id),
                    a.priority::integer, a.attempt, a.max_attempts, NULL::bigint, NULL::timestamptz, NULL::timestamptz,
                    a.enqueued_at, a.attempted_at, a.finished_at, NULL::text, a.unique_key, a.errors, NULL::interval,
                    a.progress, a.result, a.tags, a.metadata, a.depends_on,
                    NULL::integer, a.workflow_id, a.sequence_key, NULL::text, a.batch_id
               FROM {{schema}}.job_archive a
              WHERE done AND a.queue_id = q.queue_id AND a.id > after AND (p_state IS NULL OR a.status = p_state)
                AND (p_kind IS NULL OR a.kind = p_kind) AND (p_tag IS NULL OR a.tags @> ARRAY[p_tag])
                AND (p_since IS NULL OR a.enqueued_at >= p_since) AND (p_until IS NULL OR a.enqueued_at < p_until)
              ORDER BY a.queue_id, a.id
              LIMIT p_limit)
        ) x
        ORDER BY x.id
        LIMIT p_limit;
    ELSE
        -- Newest first: the cursor bounds from above (none when 0).
        IF after <= 0 THEN
            after := 9223372036854775807;
        END IF;
        RETURN QUERY
        SELECT x.* FROM (
            (SELECT j.id, q.name, j.state, j.kind, (SELECT pl.payload FROM {{schema}}.job_payload pl WHERE pl.id = j.id),
                    j.priority::integer, j.attempt, j.max_attempts, j.lease_token, j.lease_expires_at, j.run_at, j.enqueued_at,
                    j.attempted_at, j.finalized_at, j.worker, j.unique_key, j.errors, coalesce(j.timeout, q.job_timeout),
                    j.progress, NULL::jsonb, j.tags, j.metadata, j.depends_on,
                    CASE WHEN j.state = 'pending' THEN j.deps_waiting END, j.workflow_id, j.sequence_key, j.limit_key, j.batch_id
               FROM {{schema}}.job j
              WHERE live AND j.queue_id = q.queue_id AND j.id < after AND (p_state IS NULL OR j.state = p_state)
                AND (p_kind IS NULL OR j.kind = p_kind) AND (p_tag IS NULL OR j.tags @> ARRAY[p_tag])
                AND (p_since IS NULL OR j.enqueued_at >= p_since) AND (p_until IS NULL OR j.enqueued_at < p_until)
              ORDER BY j.queue_id DESC, j.id DESC
              LIMIT p_limit)
            UNION ALL
            (SELECT a.id, q.name, a.status, a.kind, (SELECT pl.payload FROM {{schema}}.job_payload pl WHERE pl.id = a.id),
                    a.priority::integer, a.attempt, a.max_attempts, NULL::bigint, NULL::timestamptz, NULL::timestamptz,
                    a.enqueued_at, a.attempted_at, a.finished_at, NULL::text, a.unique_key, a.errors, NULL::interval,
                    a.progress, a.result, a.tags, a.metadata, a.depends_on,
                    NULL::integer, a.workflow_id, a.sequence_key, NULL::text, a.batch_id
               FROM {{schema}}.job_archive a
              WHERE done AND a.queue_id = q.queue_id AND a.id < after AND (p_state IS NULL OR a.status = p_state)
                AND (p_kind IS NULL OR a.kind = p_kind) AND (p_tag IS NULL OR a.tags @> ARRAY[p_tag])
                AND (p_since IS NULL OR a.enqueued_at >= p_since) AND (p_until IS NULL OR a.enqueued_at < p_until)
              ORDER BY a.queue_id DESC, a.id DESC
              LIMIT p_limit)
        ) x
        ORDER BY x.id DESC
        LIMIT p_limit;
    END IF;
END $function$;

-- ---------------------------------------------------------------------------
-- Sequences (the job_sequence table): one job of a key at a time
-- ---------------------------------------------------------------------------

-- A sequence's changes are serialised by a transaction-level advisory lock
-- on hashtextextended('<schema>.sequence.<queue id>.<key>', 0) (written out
-- where taken: a call of a SQL function from PL/pgSQL is not inlined and
-- cost a tenth of a completion): the enqueuers of its jobs,
-- the trigger that moves it on when its head leaves, holds and resumes.
-- The lock is taken by one statement and the sequence read by the next,
-- which sees what the lock's previous holder committed. A sequence has no
-- row of its own unless it is held (job_sequence).

-- _sequence_enqueue checks a batch's sequence keys (1 to 200 bytes; a
-- sequence_continue needs a key: PM004), locks each key's sequence (in
-- lock key order, so concurrent batches cannot deadlock on each other),
-- and returns which of the batch's jobs wait ('pending') behind their
-- sequence's head: all of a key's jobs but the first when the sequence
-- has no head, no pending job and is not held, else all of them.
CREATE OR REPLACE FUNCTION {{schema}}._sequence_enqueue(p_queue_id integer, p_keys text[], p_continues boolean[])
 RETURNS boolean[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    pend boolean[];
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_keys) u(k) WHERE u.k IS NOT NULL AND (u.k = '' OR octet_length(u.k) > 200)) THEN
        PERFORM {{schema}}._raise('PM004', 'sequence_key must be 1 to 200 bytes');
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_keys, p_continues) u(k, r) WHERE u.k IS NULL AND u.r) THEN
        PERFORM {{schema}}._raise('PM004', 'sequence_continue needs a sequence_key');
    END IF;
    PERFORM pg_advisory_xact_lock(l.h)
       FROM (SELECT DISTINCT hashtextextended({{schema_lit}} || '.sequence.' || p_queue_id || '.' || u.k, 0) AS h
               FROM unnest(p_keys) u(k) WHERE u.k IS NOT NULL) l
      ORDER BY l.h;
    SELECT array_agg(CASE WHEN w.k IS NULL THEN false ELSE w.rn > 1 OR b.busy END ORDER BY w.ord) INTO pend
      FROM (SELECT u.k, u.ord, row_number() OVER (PARTITION BY u.k ORDER BY u.ord) AS rn
              FROM unnest(p_keys) WITH ORDINALITY AS u(k, ord)) w
      LEFT JOIN LATERAL (
          SELECT EXISTS (SELECT 1 FROM {{schema}}.job_sequence s
                          WHERE s.queue_id = p_queue_id AND s.sequence_key = w.k)
                 OR EXISTS (SELECT 1 FROM {{schema}}.job x
                             WHERE x.queue_id = p_queue_id AND x.sequence_key = w.k
                               AND x.state IN ('available', 'scheduled', 'retrying', 'running'))
                 OR EXISTS (SELECT 1 FROM {{schema}}.job x
                             WHERE x.queue_id = p_queue_id AND x.sequence_key = w.k AND x.state = 'pending') AS busy
           WHERE w.rn = 1
      ) b ON true;
    RETURN pend;
END $function$;

-- _sequence_advance gives a sequence its next head, under its lock: when
-- it is not held and no job of it is waiting to run or running, its
-- pending job with the lowest id becomes available (scheduled if its
-- run_at is still ahead) and the queue's idle workers are woken. p_left:
-- the caller's job was the head and just left (a sequence has one head,
-- so there is no other to look for). Returns the new head's id, NULL if
-- none.
CREATE OR REPLACE FUNCTION {{schema}}._sequence_advance(p_queue_id integer, p_key text, p_left boolean DEFAULT false)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    nxt_id bigint;
    woke   text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.sequence.' || p_queue_id || '.' || p_key, 0));
    -- One statement (each costs its executor's start-up, per job): a
    -- pending job being cancelled meanwhile is not found, and its trigger
    -- moves the sequence on once that transaction ends.
    WITH n AS (
        UPDATE {{schema}}.job x
           SET state = CASE WHEN x.run_at > clock_timestamp() THEN 'scheduled' ELSE 'available' END
         WHERE x.id = (SELECT y.id FROM {{schema}}.job y
                        WHERE y.queue_id = p_queue_id AND y.sequence_key = p_key AND y.state = 'pending'
                        ORDER BY y.id LIMIT 1)
           AND x.state = 'pending'
           AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_sequence s WHERE s.queue_id = p_queue_id AND s.sequence_key = p_key)
           AND (p_left OR NOT EXISTS (SELECT 1 FROM {{schema}}.job h
                                       WHERE h.queue_id = p_queue_id AND h.sequence_key = p_key
                                         AND h.state IN ('available', 'scheduled', 'retrying', 'running')))
        RETURNING x.id, x.state
    )
    SELECT n.id, w.w INTO nxt_id, woke
      FROM n LEFT JOIN LATERAL (
          SELECT pg_notify({{schema_lit}} || '_log', 'queue:' || q.name)::text AS w FROM {{schema}}.queue q
           WHERE q.queue_id = p_queue_id AND n.state = 'available') w ON true;
    RETURN nxt_id;
END $function$;

-- _sequence_hold holds a sequence for the job p_job_id that failed
-- (p_reason 'dead' or 'cancelled'): its pending jobs wait until
-- sequence_resume(), or dead_requeue() of that job.
CREATE OR REPLACE FUNCTION {{schema}}._sequence_hold(p_queue_id integer, p_key text, p_job_id bigint, p_reason text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.sequence.' || p_queue_id || '.' || p_key, 0));
    INSERT INTO {{schema}}.job_sequence AS s (queue_id, sequence_key, held_job_id, held_at, held_reason)
    VALUES (p_queue_id, p_key, p_job_id, clock_timestamp(), p_reason)
    ON CONFLICT (queue_id, sequence_key) DO UPDATE
       SET held_job_id = EXCLUDED.held_job_id, held_at = EXCLUDED.held_at, held_reason = EXCLUDED.held_reason;
END $function$;

-- _job_sequence_left (trigger job_sequence_left, once after each statement
-- that deletes jobs: completions, cancels, purges of dead jobs, a queue's
-- deletion) moves on the sequences of the deleted jobs that had one, all
-- at once: a head cancelled without sequence_continue holds its sequence;
-- every other sequence touched, not held and left without a head, gets its
-- next pending job; the keys of deleted jobs with a limit key admit their
-- next (_key_limit_admit); batches and workflows settle theirs. A
-- statement that deleted only plain jobs (no batch, dependents, limit key
-- or sequence: every completion of a plain queue) costs one scan of its
-- deleted rows (the transition table gone) and returns: the four scans and
-- aggregates below cost a completion of 120 plain jobs 0.23 ms of its
-- 2.2 ms, the one scan 0.08 ms. A job has a sequence or a limit key, not
-- both. A trigger per row cost a completion of a sequence's job several
-- times the completion itself (a PL/pgSQL call and three statements per
-- job).
CREATE OR REPLACE FUNCTION {{schema}}._job_sequence_left()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM gone g
                    WHERE g.batch_id IS NOT NULL OR g.has_dependents OR g.limit_key IS NOT NULL
                       OR g.sequence_key IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    -- Batches: the deleted jobs of batches that were not final yet (dead
    -- ones were counted off when they went dead) are counted off, as
    -- completed or (cancelled, deleted) not (_batch_settle).
    PERFORM {{schema}}._batch_settle(s.b, s.j, s.h)
       FROM (SELECT array_agg(g.batch_id ORDER BY g.id) AS b, array_agg(g.id ORDER BY g.id) AS j,
                    array_agg(CASE WHEN (SELECT a.status FROM {{schema}}.job_archive a WHERE a.id = g.id) = 'completed'
                                   THEN 'completed' ELSE 'cancelled' END ORDER BY g.id) AS h
               FROM gone g WHERE g.batch_id IS NOT NULL AND g.state <> 'dead') s
      WHERE s.j IS NOT NULL;
    -- Workflows: the deleted jobs that others depend on settle their
    -- edges (_deps_settle): completed ones (archived so by this statement)
    -- release their dependents, the others (cancelled, deleted) cancel
    -- them. Dead ones settled theirs when they went dead.
    PERFORM {{schema}}._deps_settle(s.done, s.failed, NULL)
       FROM (SELECT array_agg(g.id) FILTER (WHERE g.status = 'completed') AS done,
                    array_agg(g.id) FILTER (WHERE g.status IS DISTINCT FROM 'completed') AS failed
               FROM (SELECT g.id, (SELECT a.status FROM {{schema}}.job_archive a WHERE a.id = g.id) AS status
                       FROM gone g WHERE g.has_dependents AND g.state <> 'dead') g) s
      WHERE s.done IS NOT NULL OR s.failed IS NOT NULL;
    -- Per-key limits first (their locks before the sequences', as
    -- enqueues take them): the keys of the deleted jobs admit their next.
    PERFORM {{schema}}._key_limit_admit(g.queue_id, array_agg(DISTINCT g.limit_key), false)
       FROM gone g WHERE g.limit_key IS NOT NULL
      GROUP BY g.queue_id ORDER BY g.queue_id;
    -- The sequences' locks, in lock key order (as enqueues take them);
    -- none (FOUND false) for a statement that deleted no job of a
    -- sequence, which ends here.
    PERFORM pg_advisory_xact_lock(l.h)
       FROM (SELECT DISTINCT hashtextextended({{schema_lit}} || '.sequence.' || g.queue_id || '.' || g.sequence_key, 0) AS h
               FROM gone g WHERE g.sequence_key IS NOT NULL) l
      ORDER BY l.h;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- Only job_cancel() archives jobs as cancelled, and it says so for its
    -- transaction: completions skip reading the archive.
    IF current_setting('pgmsg.job_cancel', true) = 'on' THEN
        INSERT INTO {{schema}}.job_sequence AS s (queue_id, sequence_key, held_job_id, held_at, held_reason)
        SELECT DISTINCT ON (g.queue_id, g.sequence_key) g.queue_id, g.sequence_key, g.id, clock_timestamp(), 'cancelled'
          FROM gone g JOIN {{schema}}.job_archive a ON a.id = g.id AND a.status = 'cancelled'
         WHERE g.sequence_key IS NOT NULL AND g.state NOT IN ('dead', 'pending') AND NOT g.sequence_continue
         ORDER BY g.queue_id, g.sequence_key, g.id
        ON CONFLICT (queue_id, sequence_key) DO UPDATE
           SET held_job_id = EXCLUDED.held_job_id, held_at = EXCLUDED.held_at, held_reason = EXCLUDED.held_reason;
    END IF;
    -- Each touched sequence that is not held and has no head gets its next
    -- pending job, in one statement. Lateral reads with LIMIT keep every
    -- lookup an index probe and the ids go in as one array (the transition
    -- table has no statistics, and a hash join would read the whole job
    -- table). A pending job being cancelled meanwhile is not found: its
    -- own statement's trigger moves its sequence on. A sequence whose
    -- deleted job was its head (every completion) has no other head: the
    -- probe for one, which walks the key's pending jobs in the index, is
    -- skipped (as _sequence_advance's p_left).
    --
    -- No wake-up: a NOTIFY makes its transaction's commit take a lock
    -- that serialises every notifying commit of the database, and the
    -- completions of a busy queue would queue on it (the Go worker that
    -- finished a sequence's job claims again at once; docs/sql-api.md,
    -- Sequences).
    UPDATE {{schema}}.job x
       SET state = CASE WHEN x.run_at > clock_timestamp() THEN 'scheduled' ELSE 'available' END
     -- upper(): so that the planner cannot read the state through the
     -- partial index job_sequence_pending (all of the queue's pending
     -- jobs, AND-ed with the ids' probes of the primary key).
     WHERE upper(x.state) = 'PENDING' AND x.id = ANY (ARRAY(
        SELECT p.id
          FROM (SELECT g.queue_id, g.sequence_key,
                       bool_or(g.state IN ('available', 'scheduled', 'retrying', 'running')) AS head_left
                  FROM gone g WHERE g.sequence_key IS NOT NULL
                 GROUP BY g.queue_id, g.sequence_key) t
          LEFT JOIN LATERAL (SELECT 1 AS one FROM {{schema}}.job_sequence s
                              WHERE s.queue_id = t.queue_id AND s.sequence_key = t.sequence_key LIMIT 1) held ON true
          LEFT JOIN LATERAL (SELECT 1 AS one FROM {{schema}}.job h
                              WHERE NOT t.head_left AND h.queue_id = t.queue_id AND h.sequence_key = t.sequence_key
                                AND h.state IN ('available', 'scheduled', 'retrying', 'running') LIMIT 1) head ON true
          CROSS JOIN LATERAL (SELECT y.id FROM {{schema}}.job y
                               WHERE y.queue_id = t.queue_id AND y.sequence_key = t.sequence_key AND y.state = 'pending'
                               ORDER BY y.id LIMIT 1) p
         WHERE held.one IS NULL AND head.one IS NULL));
    RETURN NULL;
END $function$;

-- sequence_resume resumes a held sequence of a queue: the job that held
-- it stays where it is (dead, or cancelled in the archive) and the
-- sequence's next pending job runs. Returns false if the sequence was not
-- held (nothing changes). PM101 unknown queue, PM004 a key that is not 1 to
-- 200 bytes.
CREATE OR REPLACE FUNCTION {{schema}}.sequence_resume(p_queue text, p_sequence_key text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_queue);
BEGIN
    IF p_sequence_key IS NULL OR p_sequence_key = '' OR octet_length(p_sequence_key) > 200 THEN
        PERFORM {{schema}}._raise('PM004', 'sequence_key must be 1 to 200 bytes');
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.sequence.' || q.queue_id || '.' || p_sequence_key, 0));
    DELETE FROM {{schema}}.job_sequence s WHERE s.queue_id = q.queue_id AND s.sequence_key = p_sequence_key;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM {{schema}}._sequence_advance(q.queue_id, p_sequence_key);
    RETURN true;
END $function$;

-- sequence_list lists a queue's sequences that have a head or are held,
-- by key after p_after_key (keyset paging), at most p_limit (1 to 10,000):
-- the head (the job that runs or runs next; NULL while held), how many jobs
-- wait behind it, and what holds the sequence. p_held_only: held ones only.
CREATE OR REPLACE FUNCTION {{schema}}.sequence_list(p_queue text, p_held_only boolean DEFAULT false, p_limit integer DEFAULT 100, p_after_key text DEFAULT NULL::text)
 RETURNS TABLE(sequence_key text, head_id bigint, head_state text, pending bigint, held_job_id bigint, held_at timestamp with time zone, held_reason text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_queue);
BEGIN
    {{sql list_limit_check(p_limit)}}
    RETURN QUERY
    WITH k AS (
        (SELECT x.sequence_key AS k FROM {{schema}}.job x
          WHERE x.queue_id = q.queue_id AND x.sequence_key IS NOT NULL AND NOT coalesce(p_held_only, false)
            AND x.state IN ('available', 'scheduled', 'retrying', 'running')
            AND (p_after_key IS NULL OR x.sequence_key > p_after_key)
          ORDER BY 1 LIMIT p_limit)
        UNION
        (SELECT s.sequence_key FROM {{schema}}.job_sequence s
          WHERE s.queue_id = q.queue_id AND (p_after_key IS NULL OR s.sequence_key > p_after_key)
          ORDER BY 1 LIMIT p_limit)
    )
    SELECT k.k, h.id, h.state, p.n, s.held_job_id, s.held_at, s.held_reason
      FROM k
      LEFT JOIN {{schema}}.job_sequence s ON s.queue_id = q.queue_id AND s.sequence_key = k.k
      LEFT JOIN LATERAL (
          SELECT x.id, x.state FROM {{schema}}.job x
           WHERE x.queue_id = q.queue_id AND x.sequence_key = k.k
             AND x.state IN ('available', 'scheduled', 'retrying', 'running')
           ORDER BY x.id LIMIT 1) h ON true
      CROSS JOIN LATERAL (
          SELECT count(*) AS n FROM {{schema}}.job x
           WHERE x.queue_id = q.queue_id AND x.sequence_key = k.k AND x.state = 'pending') p
     ORDER BY k.k
     LIMIT p_limit;
END $function$;

-- ---------------------------------------------------------------------------
-- Per-key limits (queue key_limit, job limit_key): at most key_limit jobs
-- of a key at once
-- ---------------------------------------------------------------------------

-- A key's jobs are admitted (available, scheduled, retrying, running: in
-- the claim's index) while fewer than the queue's key_limit of them are;
-- the others wait as 'pending', as a sequence's jobs behind its head do,
-- and are admitted in job id order as admitted ones leave (completed,
-- cancelled, dead). A key's changes are serialised by a transaction-level
-- advisory lock on hashtextextended('<schema>.limit.<queue id>.<key>', 0),
-- taken by one statement and the key read by the next (as sequences do),
-- always before any sequence's lock.

-- _key_limit_keys returns the limit key of each job of a batch (an array
-- as long as p_payloads): the one given, else the queue's key_field of
-- the job's JSON payload (a string as it is, another scalar as its JSON
-- text). PM004: a queue without a key_limit, a key that is not 1 to 200
-- bytes, a job with a sequence key too; PM113: a job of a queue with a
-- key_field that has no key (no such field, null or "", or a payload that
-- is not JSON).
CREATE OR REPLACE FUNCTION {{schema}}._key_limit_keys(q {{schema}}.queue, p_payloads bytea[], p_keys text[], p_sequence_keys text[])
 RETURNS text[]
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    out     text[];
    missing bigint;
BEGIN
    IF q.key_limit IS NULL THEN
        PERFORM {{schema}}._raise('PM004', format('queue %s has no key_limit: a limit_key needs one', quote_literal(q.name)));
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_keys) u(k) WHERE u.k = '' OR octet_length(u.k) > 200) THEN
        PERFORM {{schema}}._raise('PM004', 'limit_key must be 1 to 200 bytes');
    END IF;
    IF q.key_field IS NULL THEN
        SELECT array_agg(u.k ORDER BY u.ord) INTO out FROM unnest(p_payloads, p_keys) WITH ORDINALITY AS u(p, k, ord);
    ELSE
        -- One subtransaction per batch, not per job: a payload that is
        -- not JSON fails the batch's parse.
        BEGIN
            SELECT array_agg(coalesce(u.k, nullif(convert_from(u.p, 'UTF8')::jsonb ->> q.key_field, '')) ORDER BY u.ord)
              INTO out FROM unnest(p_payloads, p_keys) WITH ORDINALITY AS u(p, k, ord);
        EXCEPTION WHEN data_exception THEN
            PERFORM {{schema}}._raise('PM113', format(
                'limit key missing: a job without a limit_key has a payload that is not JSON, and queue %s takes the key from its field %s',
                quote_literal(q.name), quote_literal(q.key_field)));
        END;
        SELECT min(u.ord) INTO missing FROM unnest(out) WITH ORDINALITY AS u(k, ord) WHERE u.k IS NULL;
        IF missing IS NOT NULL THEN
            PERFORM {{schema}}._raise('PM113', format(
                'limit key missing: job %s has no limit_key and its payload no field %s (queue %s limits by it)',
                missing - 1, quote_literal(q.key_field), quote_literal(q.name)));
        END IF;
        IF EXISTS (SELECT 1 FROM unnest(out) u(k) WHERE octet_length(u.k) > 200) THEN
            PERFORM {{schema}}._raise('PM004', format('limit key (field %s) must be at most 200 bytes', quote_literal(q.key_field)));
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(out, p_sequence_keys) u(k, s) WHERE u.k IS NOT NULL AND u.s IS NOT NULL) THEN
        PERFORM {{schema}}._raise('PM004', format('a job has a sequence_key or a limit key, not both (queue %s has a key_limit)', quote_literal(q.name)));
    END IF;
    RETURN out;
END $function$;

-- _key_limit_enqueue locks the keys of a batch (in lock key order, so
-- concurrent batches cannot deadlock on each other) and returns which of
-- its jobs wait ('pending'): a key's jobs beyond the room its admitted
-- jobs leave under the queue's key_limit.
CREATE OR REPLACE FUNCTION {{schema}}._key_limit_enqueue(q {{schema}}.queue, p_keys text[])
 RETURNS boolean[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    pend boolean[];
BEGIN
    PERFORM pg_advisory_xact_lock(l.h)
       FROM (SELECT DISTINCT hashtextextended({{schema_lit}} || '.limit.' || q.queue_id || '.' || u.k, 0) AS h
               FROM unnest(p_keys) u(k) WHERE u.k IS NOT NULL) l
      ORDER BY l.h;
    WITH w AS (
        SELECT u.k, u.ord, row_number() OVER (PARTITION BY u.k ORDER BY u.ord) AS rn
          FROM unnest(p_keys) WITH ORDINALITY AS u(k, ord)
    ), r AS (
        SELECT d.k, q.key_limit - (SELECT count(*) FROM (
                   SELECT 1 FROM {{schema}}.job x
                    WHERE x.queue_id = q.queue_id AND x.limit_key = d.k
                      AND x.state IN ('available', 'scheduled', 'retrying', 'running')
                    LIMIT q.key_limit) c) AS room
          FROM (SELECT DISTINCT w.k FROM w WHERE w.k IS NOT NULL) d
    )
    SELECT array_agg(coalesce(w.rn > r.room, false) ORDER BY w.ord) INTO pend
      FROM w LEFT JOIN r ON r.k = w.k;
    RETURN pend;
END $function$;

-- _key_limit_admit admits, for each key of p_keys, its pending jobs with
-- the lowest ids that fit under the queue's key_limit (all of them once
-- the queue has none): available, or scheduled if their run_at is still
-- ahead. p_wake: a NOTIFY wakes the queue's idle workers when a job became
-- available (not from completions, whose commits a NOTIFY would serialise:
-- a Go worker that finished a job claims again at once).
CREATE OR REPLACE FUNCTION {{schema}}._key_limit_admit(p_queue_id integer, p_keys text[], p_wake boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    woke boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(l.h)
       FROM (SELECT DISTINCT hashtextextended({{schema_lit}} || '.limit.' || p_queue_id || '.' || u.k, 0) AS h
               FROM unnest(p_keys) u(k) WHERE u.k IS NOT NULL) l
      ORDER BY l.h;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- upper(): so that the planner cannot read the state through a
    -- partial index of all the queue's pending jobs (as sequences do).
    WITH a AS (
        UPDATE {{schema}}.job x
           SET state = CASE WHEN x.run_at > clock_timestamp() THEN 'scheduled' ELSE 'available' END
         WHERE upper(x.state) = 'PENDING' AND x.id = ANY (ARRAY(
            SELECT p.id
              FROM (SELECT DISTINCT u.k FROM unnest(p_keys) u(k) WHERE u.k IS NOT NULL) t
             CROSS JOIN (SELECT qq.key_limit FROM {{schema}}.queue qq WHERE qq.queue_id = p_queue_id) q
             CROSS JOIN LATERAL (SELECT count(*) AS n FROM (
                     SELECT 1 FROM {{schema}}.job h
                      WHERE h.queue_id = p_queue_id AND h.limit_key = t.k
                        AND h.state IN ('available', 'scheduled', 'retrying', 'running')
                      LIMIT coalesce(q.key_limit, 0)) c) b
             CROSS JOIN LATERAL (SELECT y.id FROM {{schema}}.job y
                                  WHERE y.queue_id = p_queue_id AND y.limit_key = t.k AND y.state = 'pending'
                                  ORDER BY y.id
                                  LIMIT CASE WHEN q.key_limit IS NULL THEN NULL ELSE greatest(q.key_limit - b.n, 0) END) p))
        RETURNING x.state
    )
    SELECT bool_or(a.state = 'available') INTO woke FROM a;
    IF p_wake AND woke THEN
        PERFORM pg_notify({{schema_lit}} || '_log', 'queue:' || q.name) FROM {{schema}}.queue q WHERE q.queue_id = p_queue_id;
    END IF;
END $function$;

-- key_limit_list lists the keys of a queue's jobs with a limit key that
-- are admitted or pending, by key after p_after_key (keyset paging), at
-- most p_limit (1 to 10,000): how many of each key's jobs run, wait to
-- run (admitted: available, scheduled or retrying) and wait for a place
-- (pending). Each key is found by an index probe of job_limit_admitted and
-- job_limit_pending, so a page costs its keys, not the queue's backlog
-- (the counts read each key's jobs). PM101 unknown queue, PM004 a bad
-- limit.
CREATE OR REPLACE FUNCTION {{schema}}.key_limit_list(p_queue text, p_limit integer DEFAULT 100, p_after_key text DEFAULT NULL::text)
 RETURNS TABLE(limit_key text, running bigint, waiting bigint, pending bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_queue);
BEGIN
    {{sql list_limit_check(p_limit)}}
    RETURN QUERY
    WITH RECURSIVE k AS (
        SELECT n.k, 1 AS i FROM (SELECT {{schema}}._key_limit_next(q.queue_id, coalesce(p_after_key, '')) AS k) n
         WHERE n.k IS NOT NULL
        UNION ALL
        SELECT n.k, k.i + 1 FROM k CROSS JOIN LATERAL (SELECT {{schema}}._key_limit_next(q.queue_id, k.k) AS k) n
         WHERE n.k IS NOT NULL AND k.i < p_limit
    )
    SELECT k.k, c.running, c.waiting, p.pending
      FROM k
     CROSS JOIN LATERAL (
         SELECT count(*) FILTER (WHERE x.state = 'running') AS running,
                count(*) FILTER (WHERE x.state <> 'running') AS waiting
           FROM {{schema}}.job x
          WHERE x.queue_id = q.queue_id AND x.limit_key = k.k
            AND x.state IN ('available', 'scheduled', 'retrying', 'running')) c
     CROSS JOIN LATERAL (
         SELECT count(*) AS pending FROM {{schema}}.job x
          WHERE x.queue_id = q.queue_id AND x.limit_key = k.k AND x.state = 'pending') p
     ORDER BY k.k;
END $function$;

-- _key_limit_next returns the first limit key after p_after among a
-- queue's admitted and pending jobs (NULL: none): one probe of each
-- partial index.
CREATE OR REPLACE FUNCTION {{schema}}._key_limit_next(p_queue_id integer, p_after text)
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT least(
        (SELECT x.limit_key FROM {{schema}}.job x
          WHERE x.queue_id = p_queue_id AND x.limit_key IS NOT NULL AND x.limit_key > p_after
            AND x.state IN ('available', 'scheduled', 'retrying', 'running')
          ORDER BY x.limit_key LIMIT 1),
        (SELECT x.limit_key FROM {{schema}}.job x
          WHERE x.queue_id = p_queue_id AND x.limit_key IS NOT NULL AND x.limit_key > p_after AND x.state = 'pending'
          ORDER BY x.limit_key LIMIT 1))
$function$;

-- ---------------------------------------------------------------------------
-- Fair share across tenants (024_fair_share.up.sql)
-- ---------------------------------------------------------------------------

-- _tenant_check refuses a tenant name that is not 1 to 200 of
-- A-Z a-z 0-9 . _ : / = @ + - (PM118). NULL passes (no tenant).
CREATE OR REPLACE FUNCTION {{schema}}._tenant_check(p_tenant text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_tenant IS NOT NULL AND p_tenant !~ '^[A-Za-z0-9._:/=@+-]{1,200}$' THEN
        PERFORM {{schema}}._raise('PM118', format('tenant %s: a tenant is 1 to 200 of A-Z a-z 0-9 . _ : / = @ + -',
                                                  left(quote_literal(p_tenant), 210)));
    END IF;
END $function$;

-- _fair_claim_from is where a session's next positioned read of a fair
-- queue starts, and the session's new lagged state (kept by _job_claim in
-- a session setting), from its state p_state, the time p_now_ms (epoch
-- milliseconds) and p_cur, the largest tag its last claim took (NULL:
-- none yet). A job is tagged at the queue's virtual time when its enqueue
-- starts, and claims go on while it runs: a read from the latest tag
-- claimed would miss the job of an enqueue that took longer than the
-- claims since (a straggler) until the read of the whole index each
-- second. So the read starts at the largest tag claimed one to two steps
-- of 100 ms ago, and one claim per 100 ms reads from the one of one to
-- two steps of a second ago (a deep read; the whole index while there is
-- none that old). NULL: read the whole index. The same rule as the Go
-- client's direct claims (internal/queue/claim.go, claimFairLag and
-- claimFairDeepLag). The state is "f_at|f_mid|f_old|d_at|d_mid|d_old|
-- d_read", '' for none: at each step (f every 100 ms, d every second) the
-- tag of the step before becomes old and the current one mid.
CREATE OR REPLACE FUNCTION {{schema}}._fair_claim_from(p_state text, p_now_ms bigint, p_cur double precision,
                                                      OUT state text, OUT pos double precision)
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    s      text[] := string_to_array(coalesce(p_state, ''), '|');
    f_at   bigint;
    f_mid  double precision;
    f_old  double precision;
    d_at   bigint;
    d_mid  double precision;
    d_old  double precision;
    d_read bigint;
BEGIN
    IF cardinality(s) = 7 THEN
        f_at := nullif(s[1], '')::bigint; f_mid := nullif(s[2], '')::double precision;
        f_old := nullif(s[3], '')::double precision; d_at := nullif(s[4], '')::bigint;
        d_mid := nullif(s[5], '')::double precision; d_old := nullif(s[6], '')::double precision;
        d_read := nullif(s[7], '')::bigint;
    END IF;
    IF f_at IS NULL OR p_now_ms - f_at >= 100 THEN
        f_old := f_mid; f_mid := p_cur; f_at := p_now_ms;
    END IF;
    IF d_at IS NULL OR p_now_ms - d_at >= 1000 THEN
        d_old := d_mid; d_mid := p_cur; d_at := p_now_ms;
    END IF;
    pos := f_old;
    IF d_read IS NULL OR p_now_ms - d_read >= 100 THEN
        d_read := p_now_ms;
        IF d_old IS NULL THEN
            pos := NULL;
        ELSIF pos IS NOT NULL AND d_old < pos THEN
            pos := d_old;
        END IF;
    END IF;
    state := array_to_string(ARRAY[f_at::text, coalesce(f_mid::text, ''), coalesce(f_old::text, ''), d_at::text,
                                   coalesce(d_mid::text, ''), coalesce(d_old::text, ''), d_read::text], '|');
END $function$;

-- _fair_virtual_time is a fair queue's virtual time: the largest tag of
-- its running jobs (job_fair_running), or the tag of the first job
-- waiting after it if that is larger. Claims start their reads at the
-- largest tag they claimed, which is running, or was and is now at most
-- the first waiting one: so a job tagged here is found by the next claim
-- (and the read from the running tag crosses only the entries claimed
-- since). When none runs: the head of its waiting jobs (job_fair, due
-- jobs); else, when none waits, the largest start tag its tenants were
-- handed (the last finish tag less one job, of tenants that enqueued);
-- else 0.
CREATE OR REPLACE FUNCTION {{schema}}._fair_virtual_time(p_queue_id integer)
 RETURNS double precision
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    r double precision;
    h double precision;
BEGIN
    SELECT j.fair_tag INTO r FROM {{schema}}.job j
     WHERE j.queue_id = p_queue_id AND j.fair_tag IS NOT NULL AND j.state = 'running'
     ORDER BY j.fair_tag DESC LIMIT 1;
    SELECT j.fair_tag INTO h FROM {{schema}}.job j
     WHERE j.queue_id = p_queue_id AND j.fair_tag IS NOT NULL AND j.state IN ('available', 'scheduled', 'retrying')
       AND j.fair_tag >= coalesce(r, '-Infinity') AND j.run_at <= clock_timestamp()
     ORDER BY j.fair_tag, j.id LIMIT 1;
    IF r IS NOT NULL OR h IS NOT NULL THEN
        RETURN greatest(r, h);
    END IF;
    RETURN coalesce((SELECT max(t.finish - 1 / t.weight) FROM {{schema}}.job_tenant t
                      WHERE t.queue_id = p_queue_id AND t.enqueued > 0), 0);
END $function$;

-- _fair_enqueue tags a batch of p_n jobs of the queue q whose tenants are
-- p_tenants (NULL entries, or a NULL array: the default tenant ''):
-- tenants is each job's tenant, tags its virtual start tag. A tenant's
-- jobs in the batch start at max(the queue's virtual time, the tenant's
-- finish tag) and follow each other 1/weight apart; the tenant's row
-- (job_tenant, created with weight 1) keeps the new finish tag. The rows
-- are locked in tenant order, so batches cannot deadlock on each other,
-- and only the batch's tenants are locked. The first job naming a tenant
-- makes the queue fair (queue.fair): the jobs waiting in it already
-- become the default tenant's, tagged 0 (the head).
CREATE OR REPLACE FUNCTION {{schema}}._fair_enqueue(q {{schema}}.queue, p_tenants text[], p_n integer, OUT tenants text[], OUT tags double precision[])
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v double precision;
BEGIN
    PERFORM {{schema}}._tenant_check(u.t) FROM unnest(p_tenants) u(t) WHERE u.t IS NOT NULL;
    -- (unnest, not p_tenants[i]: a subscript of a text array walks it)
    tenants := ARRAY(SELECT coalesce(u.t, '') FROM generate_series(1, p_n) g(i)
                       LEFT JOIN unnest(p_tenants) WITH ORDINALITY u(t, o) ON u.o = g.i ORDER BY g.i);
    IF NOT q.fair THEN
        UPDATE {{schema}}.queue qq SET fair = true WHERE qq.queue_id = q.queue_id AND NOT qq.fair;
        IF FOUND THEN
            UPDATE {{schema}}.job j SET tenant = '', fair_tag = 0
             WHERE j.queue_id = q.queue_id AND j.fair_tag IS NULL
               AND j.state IN ('available', 'scheduled', 'retrying', 'pending');
        END IF;
    END IF;
    v := {{schema}}._fair_virtual_time(q.queue_id);
    WITH c AS (
        SELECT u.t, count(*) AS cnt FROM unnest(tenants) u(t) GROUP BY u.t
    ), up AS (
        INSERT INTO {{schema}}.job_tenant AS jt (queue_id, tenant, finish, enqueued)
        SELECT q.queue_id, c.t, v + c.cnt, c.cnt FROM c ORDER BY c.t
        ON CONFLICT (queue_id, tenant) DO UPDATE
           SET finish = greatest(jt.finish, v) + excluded.enqueued / jt.weight, enqueued = jt.enqueued + excluded.enqueued
        RETURNING jt.tenant, jt.finish, jt.weight
    )
    SELECT array_agg(up.finish - (c.cnt - r.k) / up.weight ORDER BY r.ord) INTO tags
      FROM (SELECT u.t, u.ord, row_number() OVER (PARTITION BY u.t ORDER BY u.ord) - 1 AS k
              FROM unnest(tenants) WITH ORDINALITY u(t, ord)) r
      JOIN c ON c.t = r.t
      JOIN up ON up.tenant = r.t;
END $function$;

-- tenant_weight_set sets a tenant's weight in a queue (1 until set): its
-- share of the queue's claims among the tenants with jobs waiting is
-- weight / the sum of their weights. It applies to the tenant's jobs
-- enqueued afterwards. PM101 unknown queue, PM118 a bad tenant name,
-- PM119 a weight that is not from 0.001 to 1,000,000.
CREATE OR REPLACE FUNCTION {{schema}}.tenant_weight_set(p_queue text, p_tenant text, p_weight double precision)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_queue);
BEGIN
    IF p_tenant IS NULL THEN
        PERFORM {{schema}}._raise('PM118', 'tenant must not be NULL');
    END IF;
    PERFORM {{schema}}._tenant_check(p_tenant);
    IF p_weight IS NULL OR p_weight = 'NaN'::double precision OR p_weight < 0.001 OR p_weight > 1000000 THEN
        PERFORM {{schema}}._raise('PM119', format('weight must be from 0.001 to 1000000, got %s', coalesce(p_weight::text, 'NULL')));
    END IF;
    INSERT INTO {{schema}}.job_tenant AS jt (queue_id, tenant, weight, finish)
    VALUES (q.queue_id, p_tenant, p_weight, {{schema}}._fair_virtual_time(q.queue_id))
    ON CONFLICT (queue_id, tenant) DO UPDATE SET weight = excluded.weight;
END $function$;

-- tenant_list lists a queue's tenants by name after p_after_tenant
-- (keyset paging), at most p_limit (1 to 10,000): each one's weight, jobs
-- enqueued in all, jobs waiting (available, scheduled, retrying, pending:
-- a count of the tenant's jobs, so a page costs the queue's backlog, as
-- queue_stats() does), its finish tag and the queue's virtual time (the
-- tenant's lead over the queue, in jobs at weight 1, is their difference).
-- PM101 unknown queue, PM004 a bad limit.
CREATE OR REPLACE FUNCTION {{schema}}.tenant_list(p_queue text, p_limit integer DEFAULT 100, p_after_tenant text DEFAULT NULL::text)
 RETURNS TABLE(tenant text, weight double precision, enqueued bigint, waiting bigint, finish_tag double precision, virtual_time double precision)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_queue);
    v double precision;
BEGIN
    {{sql list_limit_check(p_limit)}}
    v := {{schema}}._fair_virtual_time(q.queue_id);
    RETURN QUERY
    WITH t AS (
        SELECT t.tenant, t.weight, t.enqueued, t.finish FROM {{schema}}.job_tenant t
         WHERE t.queue_id = q.queue_id AND (p_after_tenant IS NULL OR t.tenant > p_after_tenant)
         ORDER BY t.tenant LIMIT p_limit
    )
    SELECT t.tenant, t.weight, t.enqueued, coalesce(w.n, 0), t.finish, v
      FROM t
      LEFT JOIN (SELECT j.tenant, count(*) AS n FROM {{schema}}.job j
                  WHERE j.queue_id = q.queue_id AND j.tenant IN (SELECT t.tenant FROM t)
                    AND j.state IN ('available', 'scheduled', 'retrying', 'pending')
                  GROUP BY j.tenant) w ON w.tenant = t.tenant
     ORDER BY t.tenant;
END $function$;

-- ---------------------------------------------------------------------------
-- Workflows (job_dependency): jobs that wait for other jobs to complete
-- ---------------------------------------------------------------------------

-- A job enqueued with dependencies waits as 'pending' (as a sequence's
-- jobs behind their head do) until all of them completed, counted down in
-- its deps_waiting. The edges not yet settled are job_dependency's rows;
-- a dependency's leaving (the trigger job_sequence_left: completed,
-- cancelled, deleted) or going dead (job_state_after) settles them in its
-- own transaction (_deps_settle). An enqueue locks each existing
-- dependency's row (marking it has_dependents), so a dependency cannot
-- leave between the enqueue's look at it and the edge's commit: its
-- leaving waits for the enqueue, and its trigger's next statement sees the
-- edge. Settlements of one dependent lock its row (in id order, so
-- concurrent ones cannot deadlock) and the count goes down once per edge,
-- whatever order the dependencies finish in.

-- _deps_enqueue checks and resolves a batch's dependencies (p_depends_on:
-- per job a JSON array of job ids of the queue and names, p_names, of jobs
-- of the batch; ids are the batch's ids, drawn already), locks the
-- existing dependencies still live and returns the edges: e_ord the
-- dependent's position (1-based), e_dep the dependency's id, e_how what
-- the dependency is now ('new': a job of the batch, 'live', 'completed',
-- 'cancelled', 'dead'); named whether each job of the batch is a
-- dependency of another; wf the workflow id of the batch's jobs with
-- names or dependencies. PM004: a name that is not 1 to 200 bytes or twice
-- in the batch, an entry that is not a job id or a name, a job with
-- dependencies and a unique key, sequence key or limit key; PM114 a
-- dependency that does not exist; PM115 one in another queue; PM116 a
-- dependency cycle among the batch's jobs; PM117 a job with more than 1000
-- dependencies.
CREATE OR REPLACE FUNCTION {{schema}}._deps_enqueue(q {{schema}}.queue, p_ids bigint[], p_names text[], p_depends_on jsonb[], p_unique_keys text[], p_sequence_keys text[], p_limit_keys text[], OUT e_ord integer[], OUT e_dep bigint[], OUT e_how text[], OUT named boolean[], OUT wf bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    n       integer := cardinality(p_ids);
    bad     text;
    bad_ord bigint;
    ext     bigint[];
    live    bigint[];
    ej      integer[];
    ed      integer[];
    left_n  integer;
    prev_n  integer;
    x_ord   integer[];
    x_dord  integer[];
    x_id    bigint[];
    x_nm    text[];
    names   jsonb;
    d       integer;
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_names) u(nm) WHERE u.nm IS NOT NULL AND (u.nm = '' OR octet_length(u.nm) > 200)) THEN
        PERFORM {{schema}}._raise('PM004', 'a job''s name must be 1 to 200 bytes');
    END IF;
    SELECT u.nm INTO bad FROM unnest(p_names) u(nm) WHERE u.nm IS NOT NULL GROUP BY u.nm HAVING count(*) > 1 LIMIT 1;
    IF FOUND THEN
        PERFORM {{schema}}._raise('PM004', format('job name %s is given to more than one job of the batch', quote_literal(bad)));
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_depends_on) u(d) WHERE u.d IS NOT NULL AND jsonb_typeof(u.d) <> 'array') THEN
        PERFORM {{schema}}._raise('PM004', 'depends_on must be a JSON array of job ids and names');
    END IF;
    SELECT u.ord - 1 INTO bad_ord FROM unnest(p_depends_on) WITH ORDINALITY u(d, ord)
     WHERE u.d IS NOT NULL AND jsonb_array_length(u.d) > 1000 LIMIT 1;
    IF FOUND THEN
        PERFORM {{schema}}._raise('PM117', format('job %s has more than 1000 dependencies', bad_ord));
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_depends_on) u(d), jsonb_array_elements(u.d) e(v)
                WHERE u.d IS NOT NULL
                  AND NOT (jsonb_typeof(e.v) = 'string' OR (jsonb_typeof(e.v) = 'number' AND (e.v #>> '{}')::numeric > 0
                           AND (e.v #>> '{}')::numeric <= 9223372036854775807 AND (e.v #>> '{}')::numeric = trunc((e.v #>> '{}')::numeric)))) THEN
        PERFORM {{schema}}._raise('PM004', 'a dependency is a job id (a positive integer) or the name of a job of the batch (a string)');
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_depends_on, p_unique_keys, p_sequence_keys, p_limit_keys) u(d, uk, sk, lk)
                WHERE u.d IS NOT NULL AND jsonb_array_length(u.d) > 0 AND (u.uk IS NOT NULL OR u.sk IS NOT NULL OR u.lk IS NOT NULL))
       OR EXISTS (SELECT 1 FROM unnest(p_names, p_unique_keys) u(nm, uk) WHERE u.nm IS NOT NULL AND u.uk IS NOT NULL) THEN
        PERFORM {{schema}}._raise('PM004', 'a job with dependencies or a name has no unique_key, sequence_key or limit key');
    END IF;
    -- Names to positions: one lookup per edge, whatever the planner
    -- would make of a join of two unnests.
    SELECT coalesce(jsonb_object_agg(u.nm, u.ord), '{}') INTO names
      FROM unnest(p_names) WITH ORDINALITY u(nm, ord) WHERE u.nm IS NOT NULL;
    -- The batch's edges, each dependency once per job: x_ord the
    -- dependent, x_dord the dependency's position when it is a name, x_id
    -- its id when it is an id.
    SELECT array_agg(y.ord), array_agg(y.dord), array_agg(y.id), array_agg(y.nm) INTO x_ord, x_dord, x_id, x_nm
      FROM (SELECT DISTINCT u.ord::integer AS ord, CASE WHEN jsonb_typeof(e.v) = 'string' THEN (names ->> (e.v #>> '{}'))::integer END AS dord,
                   CASE WHEN jsonb_typeof(e.v) = 'number' THEN (e.v #>> '{}')::bigint END AS id,
                   CASE WHEN jsonb_typeof(e.v) = 'string' THEN e.v #>> '{}' END AS nm
              FROM unnest(p_depends_on) WITH ORDINALITY u(d, ord)
             CROSS JOIN LATERAL jsonb_array_elements(u.d) e(v)
             WHERE u.d IS NOT NULL) y;
    SELECT x.nm, x.ord - 1 INTO bad, bad_ord FROM unnest(x_ord, x_dord, x_id, x_nm) x(ord, dord, id, nm) WHERE x.nm IS NOT NULL AND x.dord IS NULL LIMIT 1;
    IF FOUND THEN
        PERFORM {{schema}}._raise('PM114', format('unknown dependency: job %s depends on %s, the name of no job of the batch',
                                                  bad_ord, quote_literal(bad)));
    END IF;
    -- Cycles: only through names, and only when one points forward (at
    -- the job itself or a later one); then the edges whose dependency has
    -- none left are peeled off until none is, and those left are cycles.
    IF EXISTS (SELECT 1 FROM unnest(x_ord, x_dord, x_id, x_nm) x(ord, dord, id, nm) WHERE x.dord >= x.ord) THEN
        SELECT array_agg(x.ord), array_agg(x.dord) INTO ej, ed FROM unnest(x_ord, x_dord, x_id, x_nm) x(ord, dord, id, nm) WHERE x.dord IS NOT NULL;
        prev_n := -1;
        left_n := cardinality(ej);
        WHILE left_n > 0 AND left_n <> prev_n LOOP
            prev_n := left_n;
            SELECT array_agg(u.j), array_agg(u.d) INTO ej, ed
              FROM unnest(ej, ed) u(j, d) WHERE u.d = ANY (ej);
            left_n := coalesce(cardinality(ej), 0);
        END LOOP;
        IF left_n > 0 THEN
            PERFORM {{schema}}._raise('PM116', format('dependency cycle among the jobs %s of the batch',
                (SELECT string_agg(coalesce(quote_literal(p_names[s.j]), (s.j - 1)::text), ', ' ORDER BY s.j)
                   FROM (SELECT DISTINCT u.j FROM unnest(ej) u(j) ORDER BY 1 LIMIT 10) s)));
        END IF;
    END IF;
    -- Existing dependencies: the live ones locked in id order (their
    -- leaving waits for this transaction) and marked, the others looked
    -- up in the archive.
    SELECT array_agg(DISTINCT x.id ORDER BY x.id) INTO ext FROM unnest(x_ord, x_dord, x_id, x_nm) x(ord, dord, id, nm) WHERE x.id IS NOT NULL;
    IF ext IS NOT NULL THEN
        SELECT array_agg(s.id) INTO live
          FROM (SELECT j.id FROM {{schema}}.job j WHERE j.id = ANY (ext) ORDER BY j.id FOR NO KEY UPDATE) s;
        SELECT d.id INTO bad_ord FROM unnest(ext) d(id)
         WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.job j WHERE j.id = d.id AND j.queue_id = q.queue_id)
           AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_archive a WHERE a.id = d.id AND a.queue_id = q.queue_id)
         LIMIT 1;
        IF FOUND THEN
            IF EXISTS (SELECT 1 FROM {{schema}}.job j WHERE j.id = bad_ord)
               OR EXISTS (SELECT 1 FROM {{schema}}.job_archive a WHERE a.id = bad_ord) THEN
                PERFORM {{schema}}._raise('PM115', format('dependency %s is a job of another queue than %s',
                                                          bad_ord, quote_literal(q.name)));
            END IF;
            PERFORM {{schema}}._raise('PM114', format('unknown dependency: no job has the id %s', bad_ord));
        END IF;
        SELECT min(w.wf) INTO wf FROM (
            SELECT j.workflow_id AS wf FROM {{schema}}.job j WHERE j.id = ANY (ext)
            UNION ALL SELECT a.workflow_id FROM {{schema}}.job_archive a WHERE a.id = ANY (ext)) w;
        wf := coalesce(wf, ext[1]);
        UPDATE {{schema}}.job j SET has_dependents = true, workflow_id = coalesce(j.workflow_id, wf)
         WHERE j.id = ANY (live) AND (j.has_dependents IS NOT TRUE OR j.workflow_id IS NULL);
    END IF;
    IF wf IS NULL THEN
        SELECT p_ids[min(u.ord)] INTO wf FROM unnest(p_names, p_depends_on) WITH ORDINALITY u(nm, d, ord)
         WHERE u.nm IS NOT NULL OR (u.d IS NOT NULL AND jsonb_array_length(u.d) > 0);
    END IF;
    SELECT array_agg(x.ord::integer ORDER BY x.ord, x.dep), array_agg(x.dep ORDER BY x.ord, x.dep),
           array_agg(x.how ORDER BY x.ord, x.dep)
      INTO e_ord, e_dep, e_how
      FROM (SELECT e.ord, coalesce(e.id, p_ids[e.dord]) AS dep,
                   CASE WHEN e.dord IS NOT NULL THEN 'new'
                        WHEN j.state = 'dead' THEN 'dead'
                        WHEN j.id IS NOT NULL THEN 'live'
                        ELSE a.status END AS how
              FROM unnest(x_ord, x_dord, x_id, x_nm) e(ord, dord, id, nm)
              LEFT JOIN {{schema}}.job j ON j.id = e.id
              LEFT JOIN {{schema}}.job_archive a ON j.id IS NULL AND a.id = e.id) x;
    named := array_fill(false, ARRAY[n]);
    FOREACH d IN ARRAY coalesce(x_dord, '{}') LOOP
        IF d IS NOT NULL THEN
            named[d] := true;
        END IF;
    END LOOP;
END $function$;

-- _deps_settle settles the edges out of jobs that completed (p_done),
-- were cancelled or deleted (p_cancelled) or went dead (p_dead), in the
-- transaction that finished them: each waiting dependent counts them off
-- (deps_waiting) and becomes available (scheduled if its run_at is still
-- ahead) when none is left to wait for; a dependent with a dependency
-- that failed, and that it does not ignore (deps_ignore_cancelled,
-- deps_ignore_dead), is cancelled, and so are, at once, the waiting jobs
-- that depend on it, recursively, unless they ignore cancelled
-- dependencies (their count goes down instead, from the trigger of the
-- cancelling statement). No wake-up, as for sequences: a Go worker that
-- finished a job claims again at once.
CREATE OR REPLACE FUNCTION {{schema}}._deps_settle(p_done bigint[], p_cancelled bigint[], p_dead bigint[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    jids   bigint[];
    hows   text[];
    doomed bigint[];
    now_ts timestamptz;
BEGIN
    WITH e AS (
        DELETE FROM {{schema}}.job_dependency d
         WHERE d.dep_id = ANY (coalesce(p_done, '{}') || coalesce(p_cancelled, '{}') || coalesce(p_dead, '{}'))
        RETURNING d.job_id, CASE WHEN d.dep_id = ANY (p_done) THEN 'done'
                                 WHEN d.dep_id = ANY (p_dead) THEN 'dead' ELSE 'cancelled' END AS how
    )
    SELECT array_agg(e.job_id ORDER BY e.job_id), array_agg(e.how ORDER BY e.job_id) INTO jids, hows FROM e;
    IF jids IS NULL THEN
        RETURN;
    END IF;
    -- The dependents, locked in id order; the next statements see their
    -- latest state and count.
    PERFORM 1 FROM {{schema}}.job x WHERE x.id = ANY (jids) ORDER BY x.id FOR NO KEY UPDATE;
    now_ts := clock_timestamp();
    -- Dependents whose every settled edge counts as done.
    UPDATE {{schema}}.job x
       SET deps_waiting = x.deps_waiting - c.n,
           state = CASE WHEN x.deps_waiting - c.n > 0 THEN 'pending'
                        WHEN x.run_at > now_ts THEN 'scheduled' ELSE 'available' END
      FROM (SELECT u.j, count(*)::integer AS n
              FROM unnest(jids, hows) u(j, how) JOIN {{schema}}.job y ON y.id = u.j
             WHERE y.state = 'pending'
             GROUP BY u.j
            HAVING bool_and(u.how = 'done' OR (u.how = 'cancelled' AND y.deps_ignore_cancelled)
                            OR (u.how = 'dead' AND y.deps_ignore_dead))) c
     WHERE x.id = c.j AND x.state = 'pending';
    -- The others, and what waits on them without ignoring cancelled jobs.
    WITH RECURSIVE c(id) AS (
        SELECT u.j FROM unnest(jids, hows) u(j, how) JOIN {{schema}}.job y ON y.id = u.j
         WHERE y.state = 'pending'
           AND NOT (u.how = 'done' OR (u.how = 'cancelled' AND y.deps_ignore_cancelled)
                    OR (u.how = 'dead' AND y.deps_ignore_dead))
        UNION
        SELECT d.job_id FROM c JOIN {{schema}}.job_dependency d ON d.dep_id = c.id
          JOIN {{schema}}.job y ON y.id = d.job_id
         WHERE y.state = 'pending' AND NOT y.deps_ignore_cancelled
    )
    SELECT array_agg(c.id ORDER BY c.id) INTO doomed FROM c;
    IF doomed IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM {{schema}}.job x WHERE x.id = ANY (doomed) ORDER BY x.id FOR NO KEY UPDATE;
    -- Archived as cancelled; this statement's trigger settles their own
    -- edges (as cancelled ones).
    WITH d AS (
        DELETE FROM {{schema}}.job j WHERE j.id = ANY (doomed) AND j.state = 'pending' RETURNING j.*
    )
    INSERT INTO {{schema}}.job_archive (id, queue_id, status, priority, attempt, max_attempts, enqueued_at,
                                        attempted_at, finished_at, kind, unique_key, errors, progress, tags, metadata,
                                        sequence_key, depends_on, workflow_id, batch_id)
    SELECT d.id, d.queue_id, 'cancelled', d.priority, d.attempt, d.max_attempts, d.enqueued_at,
           d.attempted_at, clock_timestamp(), d.kind, d.unique_key,
           coalesce(d.errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'attempt', d.attempt, 'at', clock_timestamp(),
               'error', 'cancelled: a dependency was cancelled, deleted or went dead')),
           d.progress, d.tags, d.metadata, d.sequence_key, d.depends_on, d.workflow_id, d.batch_id
    FROM d;
END $function$;

-- workflow_get returns the jobs of p_id's workflow (the jobs enqueued
-- with names or dependencies together, and those enqueued depending on
-- them), live and archived, by id, at most p_limit (1 to 100,000, PM004),
-- each with its state, dependencies and how many of them it still waits
-- for (NULL: none, or it is not waiting). A job outside any workflow is
-- its own. PM107 unknown job.
CREATE OR REPLACE FUNCTION {{schema}}.workflow_get(p_id bigint, p_limit integer DEFAULT 10000)
 RETURNS TABLE(id bigint, workflow_id bigint, queue text, state text, kind text, depends_on bigint[], deps_waiting integer, deps_ignore_cancelled boolean, deps_ignore_dead boolean, enqueued_at timestamp with time zone, attempted_at timestamp with time zone, finished_at timestamp with time zone)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    wf  bigint;
    hit boolean;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 100000 THEN
        PERFORM {{schema}}._raise('PM004', format('limit must be from 1 to 100000, got %s', coalesce(p_limit::text, 'NULL')));
    END IF;
    SELECT coalesce(j.workflow_id, j.id) INTO wf FROM {{schema}}.job j WHERE j.id = p_id;
    hit := FOUND;
    IF NOT hit THEN
        SELECT coalesce(a.workflow_id, a.id) INTO wf FROM {{schema}}.job_archive a WHERE a.id = p_id;
        hit := FOUND;
    END IF;
    IF NOT hit THEN
        PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
    END IF;
    RETURN QUERY
    SELECT x.* FROM (
        SELECT j.id, j.workflow_id, q.name, j.state, j.kind, j.depends_on,
               CASE WHEN j.state = 'pending' THEN j.deps_waiting END, j.deps_ignore_cancelled, j.deps_ignore_dead,
               j.enqueued_at, j.attempted_at, j.finalized_at
          FROM {{schema}}.job j JOIN {{schema}}.queue q ON q.queue_id = j.queue_id
         WHERE j.workflow_id = wf OR j.id = wf
        UNION ALL
        SELECT a.id, a.workflow_id, q.name, a.status, a.kind, a.depends_on, NULL::integer, NULL::boolean, NULL::boolean,
               a.enqueued_at, a.attempted_at, a.finished_at
          FROM {{schema}}.job_archive a JOIN {{schema}}.queue q ON q.queue_id = a.queue_id
         WHERE a.workflow_id = wf OR a.id = wf
    ) x
    ORDER BY x.id
    LIMIT p_limit;
END $function$;

-- ---------------------------------------------------------------------------
-- Batches (jobs enqueued together, with callbacks)
-- ---------------------------------------------------------------------------

-- _batch_callback_check checks a batch's callback p_spec (p_what names it
-- in the message): NULL (none) or a JSON object with a "kind" (1 to 200
-- bytes) and optionally "args" (any JSON value, the callback job's payload
-- as JSON text, at most 1 MiB), "queue" (a queue name; default the batch's
-- queue), "priority" (-32768..32767) and "metadata" (an object of at most
-- 64 KiB), nothing else. PM120 otherwise. Returns p_spec.
CREATE OR REPLACE FUNCTION {{schema}}._batch_callback_check(p_what text, p_spec jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    bad text;
BEGIN
    IF p_spec IS NULL OR jsonb_typeof(p_spec) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(p_spec) <> 'object' THEN
        bad := 'must be a JSON object';
    ELSIF EXISTS (SELECT 1 FROM jsonb_object_keys(p_spec) k
                   WHERE k NOT IN ('kind', 'args', 'queue', 'priority', 'metadata')) THEN
        bad := 'has a key other than kind, args, queue, priority and metadata';
    ELSIF jsonb_typeof(p_spec->'kind') IS DISTINCT FROM 'string' OR p_spec->>'kind' = ''
          OR octet_length(p_spec->>'kind') > 200 THEN
        bad := 'needs a kind of 1 to 200 bytes';
    ELSIF p_spec ? 'queue' AND (jsonb_typeof(p_spec->'queue') <> 'string'
                                OR (p_spec->>'queue') !~ '^[A-Za-z0-9._-]{1,200}$') THEN
        bad := format('has an invalid queue name %s: use 1-200 letters, digits, ".", "_" or "-"',
                      left((p_spec->'queue')::text, 60));
    ELSIF p_spec ? 'priority' AND (jsonb_typeof(p_spec->'priority') <> 'number'
                                   OR (p_spec->>'priority')::numeric NOT BETWEEN -32768 AND 32767
                                   OR (p_spec->>'priority')::numeric <> trunc((p_spec->>'priority')::numeric)) THEN
        bad := 'has a priority that is not an integer from -32768 to 32767';
    ELSIF p_spec ? 'metadata' AND (jsonb_typeof(p_spec->'metadata') <> 'object'
                                   OR octet_length((p_spec->'metadata')::text) > 65536) THEN
        bad := 'has metadata that is not a JSON object of at most 64 KiB';
    ELSIF octet_length(coalesce(p_spec->'args', 'null')::text) > 1048576 THEN
        bad := 'has args larger than 1 MiB as JSON';
    END IF;
    IF bad IS NOT NULL THEN
        PERFORM {{schema}}._raise('PM120', format('invalid batch callback %s: %s', p_what, bad));
    END IF;
    RETURN p_spec;
END $function$;

-- job_enqueue_batch enqueues a batch of jobs into p_queue, as enqueue_many
-- does (same arguments, same checks, all or nothing), and makes them one
-- batch: once every job of it is final, the callbacks given are enqueued,
-- each exactly once (see _batch_finish): p_on_complete when all completed,
-- p_on_discard when at least one was cancelled (or deleted) or went dead,
-- p_on_finished in either case. Each is checked first
-- (_batch_callback_check, PM120). An empty batch is PM010. A duplicate (an
-- existing job returned for a unique key) is not a member; a batch without
-- a new job, or whose jobs were all cancelled at once (a dependency that
-- failed already), is finished at once. Returns the batch's id with each
-- job's row of enqueue_many, in input order.
CREATE OR REPLACE FUNCTION {{schema}}.job_enqueue_batch(p_queue text, p_payloads bytea[], p_kinds text[] DEFAULT NULL::text[], p_priorities integer[] DEFAULT NULL::integer[], p_run_ats timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_delays interval[] DEFAULT NULL::interval[], p_max_attempts integer[] DEFAULT NULL::integer[], p_unique_keys text[] DEFAULT NULL::text[], p_create_queue boolean DEFAULT true, p_timeouts interval[] DEFAULT NULL::interval[], p_tags jsonb[] DEFAULT NULL::jsonb[], p_metadata jsonb[] DEFAULT NULL::jsonb[], p_unique_fors interval[] DEFAULT NULL::interval[], p_sequence_keys text[] DEFAULT NULL::text[], p_sequence_continues boolean[] DEFAULT NULL::boolean[], p_limit_keys text[] DEFAULT NULL::text[], p_names text[] DEFAULT NULL::text[], p_depends_on jsonb[] DEFAULT NULL::jsonb[], p_deps_ignore_cancelled boolean[] DEFAULT NULL::boolean[], p_deps_ignore_dead boolean[] DEFAULT NULL::boolean[], p_tenants text[] DEFAULT NULL::text[], p_on_complete jsonb DEFAULT NULL::jsonb, p_on_discard jsonb DEFAULT NULL::jsonb, p_on_finished jsonb DEFAULT NULL::jsonb)
 RETURNS TABLE(batch_id bigint, id bigint, duplicate boolean, state text, run_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    oc     jsonb := {{schema}}._batch_callback_check('on_complete', p_on_complete);
    od     jsonb := {{schema}}._batch_callback_check('on_discard', p_on_discard);
    ofn    jsonb := {{schema}}._batch_callback_check('on_finished', p_on_finished);
    b      bigint;
    ids    bigint[];
    dups   boolean[];
    states text[];
    runs   timestamptz[];
    qid    integer;
    live   bigint[];
    gone   bigint[];
    nslots integer;
BEGIN
    IF coalesce(cardinality(p_payloads), 0) = 0 THEN
        PERFORM {{schema}}._raise('PM010', 'empty batch: a batch needs at least one job');
    END IF;
    SELECT array_agg(e.id ORDER BY e.ord), array_agg(e.duplicate ORDER BY e.ord),
           array_agg(e.state ORDER BY e.ord), array_agg(e.run_at ORDER BY e.ord)
      INTO ids, dups, states, runs
      FROM {{schema}}.enqueue_many(p_queue, p_payloads, p_kinds, p_priorities, p_run_ats, p_delays, p_max_attempts,
                                   p_unique_keys, p_create_queue, p_timeouts, p_tags, p_metadata, p_unique_fors,
                                   p_sequence_keys, p_sequence_continues, p_limit_keys, p_names, p_depends_on,
                                   p_deps_ignore_cancelled, p_deps_ignore_dead, p_tenants)
           WITH ORDINALITY AS e(id, duplicate, state, run_at, ord);
    SELECT q.queue_id INTO qid FROM {{schema}}.queue q WHERE q.name = p_queue;
    -- The members: the new jobs, live, or archived at once (cancelled).
    live := ARRAY(SELECT DISTINCT u.i FROM unnest(ids, dups, states) u(i, d, s)
                   WHERE NOT u.d AND u.s NOT IN ('completed', 'cancelled'));
    gone := ARRAY(SELECT DISTINCT u.i FROM unnest(ids, dups, states) u(i, d, s)
                   WHERE NOT u.d AND u.s IN ('completed', 'cancelled'));
    nslots := least(greatest(cardinality(live) + cardinality(gone), 1), 16);
    b := nextval('{{schema}}.job_id_seq');
    INSERT INTO {{schema}}.job_batch (batch_id, queue_id, total, slots, created_at, on_complete, on_discard, on_finished)
    VALUES (b, qid, cardinality(live) + cardinality(gone), nslots, clock_timestamp(), oc, od, ofn);
    INSERT INTO {{schema}}.job_batch_slot (batch_id, slot, remaining, cancelled)
    SELECT b, s.slot, count(l.i)::integer, 0
      FROM generate_series(0, nslots - 1) s(slot)
      LEFT JOIN unnest(live) l(i) ON l.i % nslots = s.slot
     GROUP BY s.slot;
    IF cardinality(gone) > 0 THEN
        UPDATE {{schema}}.job_batch_slot s SET cancelled = c.n
          FROM (SELECT g.i % nslots AS slot, count(*)::integer AS n FROM unnest(gone) g(i) GROUP BY 1) c
         WHERE s.batch_id = b AND s.slot = c.slot;
    END IF;
    UPDATE {{schema}}.job j SET batch_id = b WHERE j.id = ANY (live);
    IF cardinality(live) = 0 THEN
        PERFORM {{schema}}._batch_finish(b);
    END IF;
    RETURN QUERY SELECT b, u.i, u.d, u.s, u.r FROM unnest(ids, dups, states, runs) WITH ORDINALITY u(i, d, s, r, ord)
                  ORDER BY u.ord;
END $function$;

-- _batch_callback enqueues batch p_b's callback p_which ('complete',
-- 'discard' or 'finished') as p_spec says, if given, into its queue
-- (created if need be; the batch's by default), with the batch in its
-- metadata under "batch": {"id", "callback", "total", "completed",
-- "cancelled", "dead"}. Returns the job's id, NULL without a spec.
CREATE OR REPLACE FUNCTION {{schema}}._batch_callback(p_b {{schema}}.job_batch, p_which text, p_spec jsonb, p_counts jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    jid bigint;
BEGIN
    IF p_spec IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT e.id INTO jid
      FROM {{schema}}.enqueue_many(
               coalesce(p_spec->>'queue', (SELECT q.name FROM {{schema}}.queue q WHERE q.queue_id = p_b.queue_id)),
               ARRAY[CASE WHEN p_spec ? 'args' THEN convert_to((p_spec->'args')::text, 'UTF8') ELSE '\x'::bytea END],
               p_kinds => ARRAY[p_spec->>'kind'],
               p_priorities => ARRAY[coalesce((p_spec->>'priority')::integer, 0)],
               p_metadata => ARRAY[coalesce(p_spec->'metadata', '{}'::jsonb) || jsonb_build_object('batch',
                   jsonb_build_object('id', p_b.batch_id, 'callback', p_which) || p_counts)]) e;
    RETURN jid;
END $function$;

-- _batch_finish finishes batch p_batch if it is not finished yet and
-- every job of it is final (each slot's remaining is 0): it enqueues its
-- callbacks (on_complete when every job completed, else on_discard; then
-- on_finished) and records when, the counts, and their job ids. The caller
-- holds the batch's row (locked in this transaction, so this statement's
-- snapshot sees every transaction that locked it before).
CREATE OR REPLACE FUNCTION {{schema}}._batch_finish(p_batch bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    bt     {{schema}}.job_batch;
    open_n bigint;
    c      jsonb;
    cj     bigint;
    dj     bigint;
    fj     bigint;
BEGIN
    SELECT * INTO bt FROM {{schema}}.job_batch x WHERE x.batch_id = p_batch;
    IF NOT FOUND OR bt.finished_at IS NOT NULL THEN
        RETURN;
    END IF;
    SELECT sum(s.remaining), jsonb_build_object('total', bt.total, 'completed', sum(s.completed),
                                                'cancelled', sum(s.cancelled), 'dead', sum(s.dead))
      INTO open_n, c
      FROM {{schema}}.job_batch_slot s WHERE s.batch_id = p_batch;
    IF open_n > 0 THEN
        RETURN;
    END IF;
    IF (c->>'cancelled')::bigint = 0 AND (c->>'dead')::bigint = 0 THEN
        cj := {{schema}}._batch_callback(bt, 'complete', bt.on_complete, c);
    ELSE
        dj := {{schema}}._batch_callback(bt, 'discard', bt.on_discard, c);
    END IF;
    fj := {{schema}}._batch_callback(bt, 'finished', bt.on_finished, c);
    UPDATE {{schema}}.job_batch x
       SET finished_at = clock_timestamp(), final_counts = c,
           complete_job_id = cj, discard_job_id = dj, finished_job_id = fj
     WHERE x.batch_id = p_batch;
END $function$;

-- _batch_settle counts off the jobs p_jobs of the batches p_batches (by
-- position) that became final (p_hows 'completed', 'cancelled', 'dead') or
-- live again ('requeued': a dead job requeued), in the transaction that
-- changed them: each job's slot (its id modulo the batch's slots) is
-- updated, the slots locked in (batch, slot) order. A transaction that
-- brings a slot to 0 then locks the batch's row (batches in id order) and
-- finishes the batch if every slot is at 0 (_batch_finish). Exactly once:
-- the row lock orders the transactions that zeroed a slot, and the last
-- to commit reads every other slot after they committed (a new snapshot
-- per statement, READ COMMITTED), so it sees them all at 0; finished_at,
-- set under the lock, keeps the others from finishing it again. Under
-- REPEATABLE READ the row's update makes a later locker fail (40001) and
-- retry instead of reading old slots. Workers completing jobs of other
-- slots of a batch do not wait on each other.
CREATE OR REPLACE FUNCTION {{schema}}._batch_settle(p_batches bigint[], p_jobs bigint[], p_hows text[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    db     bigint[];
    ds     integer[];
    dfin   integer[];
    dc     integer[];
    dx     integer[];
    dd     integer[];
    zeroed bigint[];
    bid    bigint;
BEGIN
    SELECT array_agg(d.b ORDER BY d.b, d.slot), array_agg(d.slot ORDER BY d.b, d.slot),
           array_agg(d.fin ORDER BY d.b, d.slot), array_agg(d.c ORDER BY d.b, d.slot),
           array_agg(d.x ORDER BY d.b, d.slot), array_agg(d.dd ORDER BY d.b, d.slot)
      INTO db, ds, dfin, dc, dx, dd
      FROM (SELECT u.b, (u.j % s.slots)::integer AS slot,
                   (count(*) FILTER (WHERE u.h <> 'requeued') - count(*) FILTER (WHERE u.h = 'requeued'))::integer AS fin,
                   count(*) FILTER (WHERE u.h = 'completed')::integer AS c,
                   count(*) FILTER (WHERE u.h = 'cancelled')::integer AS x,
                   (count(*) FILTER (WHERE u.h = 'dead') - count(*) FILTER (WHERE u.h = 'requeued'))::integer AS dd
              FROM unnest(p_batches, p_jobs, p_hows) u(b, j, h)
              JOIN {{schema}}.job_batch s ON s.batch_id = u.b
             GROUP BY u.b, (u.j % s.slots)) d;
    IF db IS NULL THEN
        RETURN;
    END IF;
    -- Several slots are locked in order first (the UPDATE's order is the
    -- plan's); one (a completion's) needs no statement of its own.
    IF cardinality(db) > 1 THEN
        PERFORM 1 FROM {{schema}}.job_batch_slot s JOIN unnest(db, ds) u(b, sl) ON s.batch_id = u.b AND s.slot = u.sl
         ORDER BY s.batch_id, s.slot FOR NO KEY UPDATE OF s;
    END IF;
    WITH upd AS (
        UPDATE {{schema}}.job_batch_slot s
           SET remaining = s.remaining - u.fin, completed = s.completed + u.c,
               cancelled = s.cancelled + u.x, dead = s.dead + u.dd
          FROM unnest(db, ds, dfin, dc, dx, dd) u(b, sl, fin, c, x, dd)
         WHERE s.batch_id = u.b AND s.slot = u.sl
        RETURNING s.batch_id, s.remaining, u.fin
    )
    SELECT array_agg(DISTINCT upd.batch_id ORDER BY upd.batch_id) INTO zeroed
      FROM upd WHERE upd.remaining = 0 AND upd.fin > 0;
    IF zeroed IS NULL THEN
        RETURN;
    END IF;
    FOREACH bid IN ARRAY zeroed LOOP
        UPDATE {{schema}}.job_batch x SET finished_at = x.finished_at WHERE x.batch_id = bid;
        PERFORM {{schema}}._batch_finish(bid);
    END LOOP;
END $function$;

-- batch_get returns batch p_id: its queue and size, its live jobs by
-- state, its final ones by how they ended (completed, cancelled or
-- deleted, dead: counted when they became final, so pruning the archive
-- or purging dead jobs changes nothing), its callbacks as given, and once
-- every job was final when, and the ids of the callback jobs enqueued.
-- PM121 unknown batch.
CREATE OR REPLACE FUNCTION {{schema}}.batch_get(p_id bigint)
 RETURNS TABLE(batch_id bigint, queue text, total integer, created_at timestamp with time zone, pending bigint, available bigint, scheduled bigint, retrying bigint, running bigint, completed bigint, cancelled bigint, dead bigint, finished_at timestamp with time zone, on_complete jsonb, on_discard jsonb, on_finished jsonb, complete_job_id bigint, discard_job_id bigint, finished_job_id bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT b.batch_id, q.name, b.total, b.created_at, l.pending, l.available, l.scheduled, l.retrying, l.running,
           s.completed, s.cancelled, s.dead, b.finished_at, b.on_complete, b.on_discard, b.on_finished,
           b.complete_job_id, b.discard_job_id, b.finished_job_id
      FROM {{schema}}.job_batch b
      JOIN {{schema}}.queue q ON q.queue_id = b.queue_id
     CROSS JOIN LATERAL (
         SELECT count(*) FILTER (WHERE j.state = 'pending') AS pending,
                count(*) FILTER (WHERE j.state = 'available') AS available,
                count(*) FILTER (WHERE j.state = 'scheduled') AS scheduled,
                count(*) FILTER (WHERE j.state = 'retrying') AS retrying,
                count(*) FILTER (WHERE j.state = 'running') AS running
           FROM {{schema}}.job j WHERE j.batch_id = b.batch_id) l
     CROSS JOIN LATERAL (
         SELECT sum(x.completed)::bigint AS completed, sum(x.cancelled)::bigint AS cancelled,
                sum(x.dead)::bigint AS dead
           FROM {{schema}}.job_batch_slot x WHERE x.batch_id = b.batch_id) s
     WHERE b.batch_id = p_id;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM121', format('unknown batch %s', coalesce(p_id::text, 'NULL')));
    END IF;
END $function$;

-- ---------------------------------------------------------------------------
-- Dead letters and the archive
-- ---------------------------------------------------------------------------

-- dead_list pages through a queue's dead jobs by id (after p_after_id),
-- optionally only those of one kind. A negative p_limit is refused (PM004),
-- as by dead_requeue and dead_purge (and a negative p_older_than by
-- dead_purge): a purge must not read a typo as "all".
CREATE OR REPLACE FUNCTION {{schema}}.dead_list(p_queue text, p_kind text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_after_id bigint DEFAULT 0)
 RETURNS TABLE(id bigint, queue text, state text, kind text, payload bytea, priority integer, attempt integer, max_attempts integer, lease_token bigint, lease_expires_at timestamp with time zone, run_at timestamp with time zone, enqueued_at timestamp with time zone, attempted_at timestamp with time zone, finished_at timestamp with time zone, worker text, unique_key text, errors jsonb, tags text[], metadata jsonb)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_queue);
BEGIN
    IF p_limit < 0 THEN
        PERFORM {{schema}}._raise('PM004', format('limit must not be negative, got %s', p_limit));
    END IF;
    RETURN QUERY
    SELECT j.id, q.name, j.state, j.kind, (SELECT pl.payload FROM {{schema}}.job_payload pl WHERE pl.id = j.id), j.priority::integer, j.attempt, j.max_attempts, j.lease_token,
           j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.finalized_at, j.worker, j.unique_key, j.errors,
           j.tags, j.metadata
    FROM {{schema}}.job j
    WHERE j.queue_id = q.queue_id AND j.state = 'dead' AND j.id > coalesce(p_after_id, 0)
      AND (p_kind IS NULL OR j.kind = p_kind)
    ORDER BY j.id
    LIMIT greatest(coalesce(p_limit, 100), 0);
END $function$;

-- dead_requeue makes dead jobs of a queue available again with their
-- attempts reset (their error history is kept): the jobs in p_ids, or all
-- dead jobs (of p_kind, if given) when p_ids is NULL, at most p_limit per
-- call. A dead job whose unique key is now taken by a live job stays dead.
-- Returns how many were requeued.
CREATE OR REPLACE FUNCTION {{schema}}.dead_requeue(p_queue text, p_ids bigint[] DEFAULT NULL::bigint[], p_kind text DEFAULT NULL::text, p_limit integer DEFAULT 10000)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q      {{schema}}.queue := {{schema}}._queue(p_queue);
    now_ts timestamptz := clock_timestamp();
    n      integer;
BEGIN
    IF p_limit < 0 THEN
        PERFORM {{schema}}._raise('PM004', format('limit must not be negative, got %s', p_limit));
    END IF;
    WITH r AS (
        SELECT j.id FROM {{schema}}.job j
        WHERE j.queue_id = q.queue_id AND j.state = 'dead'
          AND (p_ids IS NULL OR j.id = ANY (p_ids))
          AND (p_kind IS NULL OR j.kind = p_kind)
          AND (j.unique_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM {{schema}}.job l
                WHERE l.queue_id = j.queue_id AND l.unique_key = j.unique_key AND l.state <> 'dead'))
        ORDER BY j.id
        LIMIT greatest(coalesce(p_limit, 10000), 0)
        FOR UPDATE SKIP LOCKED
    )
    UPDATE {{schema}}.job j
       SET state = 'available', attempt = 0, run_at = now_ts, finalized_at = NULL
      FROM r
     WHERE j.id = r.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM pg_notify({{schema_lit}} || '_log', 'queue:' || q.name);
    END IF;
    RETURN n;
END $function$;

-- dead_purge deletes dead jobs of a queue for good: those in p_ids, or all
-- (of p_kind; dead for longer than p_older_than) when p_ids is NULL, at most
-- p_limit per call so it never holds many locks. Returns how many.
CREATE OR REPLACE FUNCTION {{schema}}.dead_purge(p_queue text, p_ids bigint[] DEFAULT NULL::bigint[], p_kind text DEFAULT NULL::text, p_older_than interval DEFAULT NULL::interval, p_limit integer DEFAULT 10000)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_queue);
    n integer;
BEGIN
    IF p_limit < 0 THEN
        PERFORM {{schema}}._raise('PM004', format('limit must not be negative, got %s', p_limit));
    END IF;
    IF p_older_than < interval '0' THEN
        PERFORM {{schema}}._raise('PM004', format('older than must not be negative, got %s', p_older_than));
    END IF;
    WITH d AS (
    DELETE FROM {{schema}}.job j
    WHERE j.id IN (
        SELECT x.id FROM {{schema}}.job x
        WHERE x.queue_id = q.queue_id AND x.state = 'dead'
          AND (p_ids IS NULL OR x.id = ANY (p_ids))
          AND (p_kind IS NULL OR x.kind = p_kind)
          AND (p_older_than IS NULL OR x.finalized_at < clock_timestamp() - p_older_than)
        ORDER BY x.id
        LIMIT greatest(coalesce(p_limit, 10000), 0)
        FOR UPDATE SKIP LOCKED)
    RETURNING j.id
    ), p AS (
        DELETE FROM {{schema}}.job_payload pl USING d WHERE pl.id = d.id
    ), l AS (
        DELETE FROM {{schema}}.job_log l USING d WHERE l.job_id = d.id
    ), st AS (
        DELETE FROM {{schema}}.job_step st USING d WHERE st.job_id = d.id
    )
    SELECT count(*) INTO n FROM d;
    RETURN n;
END $function$;

-- dead_prune deletes at most p_limit dead jobs that went dead longer ago
-- than their queue's dead_retention, of one queue or of every queue that
-- has one, and returns how many (maintenance's queue.dead_prune). Queues
-- without dead_retention keep their dead jobs. Call it until it returns
-- less than p_limit, as archive_prune.
CREATE OR REPLACE FUNCTION {{schema}}.dead_prune(p_queue text DEFAULT NULL::text, p_limit integer DEFAULT 1000)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    now_ts timestamptz := clock_timestamp();
    left_n integer := greatest(coalesce(p_limit, 1000), 0);
    n      integer;
    total  integer := 0;
    q      {{schema}}.queue;
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM {{schema}}._queue(p_queue);
    END IF;
    FOR q IN SELECT * FROM {{schema}}.queue x
              WHERE (p_queue IS NULL OR x.name = p_queue) AND x.dead_retention IS NOT NULL
              ORDER BY x.queue_id LOOP
        EXIT WHEN left_n = 0;
        WITH d AS (
            DELETE FROM {{schema}}.job j
            WHERE j.id IN (
                SELECT x.id FROM {{schema}}.job x
                WHERE x.queue_id = q.queue_id AND x.state = 'dead'
                  AND x.finalized_at < now_ts - q.dead_retention
                ORDER BY x.id
                LIMIT left_n
                FOR UPDATE SKIP LOCKED)
            RETURNING j.id
        ), p AS (
            DELETE FROM {{schema}}.job_payload pl USING d WHERE pl.id = d.id
        ), l AS (
            DELETE FROM {{schema}}.job_log l USING d WHERE l.job_id = d.id
        ), st AS (
            DELETE FROM {{schema}}.job_step st USING d WHERE st.job_id = d.id
        )
        SELECT count(*) INTO n FROM d;
        total := total + n;
        left_n := left_n - n;
    END LOOP;
    RETURN total;
END $function$;

-- job_unique_prune deletes the uniqueness windows (job_unique) that have
-- passed, at most p_limit, oldest first; maintenance runs it. Returns how
-- many. A passed window makes nothing a duplicate: enqueues compute the
-- current window's key.
CREATE OR REPLACE FUNCTION {{schema}}.job_unique_prune(p_limit integer DEFAULT 10000)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    n integer;
BEGIN
    WITH d AS (
        DELETE FROM {{schema}}.job_unique ju
         WHERE ctid = ANY (ARRAY(SELECT x.ctid FROM {{schema}}.job_unique x WHERE x.expires_at <= now()
                                  ORDER BY x.expires_at LIMIT greatest(coalesce(p_limit, 10000), 1)
                                  FOR UPDATE SKIP LOCKED))
        RETURNING 1
    )
    SELECT count(*) INTO n FROM d;
    RETURN n;
END $function$;

-- archive_prune deletes at most p_limit archived jobs finished longer ago
-- than p_older_than (default: each queue's archive_retention), of one queue
-- or of all, and returns how many; batches finished as long ago go too. Call it until it returns less than
-- p_limit: each call is one short transaction, so pruning never holds long
-- locks or a long snapshot.
--   Index Scan using job_archive_finished (queue_id = $1 AND finished_at < $2)
CREATE OR REPLACE FUNCTION {{schema}}.archive_prune(p_queue text DEFAULT NULL::text, p_older_than interval DEFAULT NULL::interval, p_limit integer DEFAULT 1000)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    now_ts timestamptz := clock_timestamp();
    left_n integer := greatest(coalesce(p_limit, 1000), 0);
    n      integer;
    total  integer := 0;
    q      {{schema}}.queue;
BEGIN
    IF p_older_than IS NOT NULL AND p_older_than < interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'older_than must not be negative');
    END IF;
    IF p_queue IS NOT NULL THEN
        PERFORM {{schema}}._queue(p_queue);
    END IF;
    FOR q IN SELECT * FROM {{schema}}.queue x WHERE p_queue IS NULL OR x.name = p_queue ORDER BY x.queue_id LOOP
        EXIT WHEN left_n = 0;
        WITH d AS (
            DELETE FROM {{schema}}.job_archive a
            WHERE a.ctid = ANY (ARRAY(
                SELECT x.ctid FROM {{schema}}.job_archive x
                WHERE x.queue_id = q.queue_id AND x.finished_at < now_ts - coalesce(p_older_than, q.archive_retention)
                ORDER BY x.finished_at
                LIMIT left_n))
            RETURNING a.id
        ), p AS (
            DELETE FROM {{schema}}.job_payload pl USING d WHERE pl.id = d.id
        ), l AS (
            DELETE FROM {{schema}}.job_log l USING d WHERE l.job_id = d.id
        ), st AS (
            DELETE FROM {{schema}}.job_step st USING d WHERE st.job_id = d.id
        )
        SELECT count(*) INTO n FROM d;
        total := total + n;
        left_n := left_n - n;
        -- Batches finished as long ago go too (their slots with them), at
        -- most p_limit per queue; they are not counted.
        DELETE FROM {{schema}}.job_batch b
         WHERE b.batch_id = ANY (ARRAY(
            SELECT x.batch_id FROM {{schema}}.job_batch x
             WHERE x.queue_id = q.queue_id AND x.finished_at < now_ts - coalesce(p_older_than, q.archive_retention)
             ORDER BY x.finished_at
             LIMIT greatest(coalesce(p_limit, 1000), 0)));
    END LOOP;
    RETURN total;
END $function$;

-- ---------------------------------------------------------------------------
-- Job logs and resumable steps (job_log, job_step; job_steps.go)
-- ---------------------------------------------------------------------------

-- _job_known raises PM107 unless p_id is a job, live (job) or finished
-- (job_archive): job_logs' and job_steps' check, as _topic is the
-- topics' one.
CREATE OR REPLACE FUNCTION {{schema}}._job_known(p_id bigint)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {{schema}}.job j WHERE j.id = p_id)
       AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_archive a WHERE a.id = p_id) THEN
        PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
    END IF;
END $function$;

-- job_logs returns what a job's handlers logged, one row per attempt that
-- logged something, oldest first: the attempt, when it finished, its
-- outcome (completed, retrying, dead or snoozed; a snoozed attempt is not
-- counted, so the next run has the same attempt number) and the log text.
-- Logs are kept as long as the job (archive_prune, dead_purge,
-- dead_prune, queue_delete). PM107 if there is no such job.
CREATE OR REPLACE FUNCTION {{schema}}.job_logs(p_id bigint)
 RETURNS TABLE(attempt integer, at timestamp with time zone, outcome text, log text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    PERFORM {{schema}}._job_known(p_id);
    RETURN QUERY
    SELECT l.attempt, l.at, l.outcome, l.log FROM {{schema}}.job_log l
     WHERE l.job_id = p_id ORDER BY l.at, l.attempt;
END $function$;

-- job_step_save records that the step p_name of a held job completed, with
-- its output (a JSON document of at most 64 KiB as JSON text, or NULL), at
-- once and whatever becomes of the attempt: the next attempt skips the step
-- and gets p_output back (job_steps). The lease check is the completion's
-- (lease token and state running; PM106/PM107 otherwise), under a share
-- lock of the job's row, so a worker that lost its lease cannot record a
-- step. A step name is 1 to 200 characters of A-Z a-z 0-9 . _ - : / (PM122);
-- an output over 64 KiB, or a 1001st step of a job, is PM123. Saving a
-- name again replaces its output.
CREATE OR REPLACE FUNCTION {{schema}}.job_step_save(p_id bigint, p_lease_token bigint, p_name text, p_output jsonb DEFAULT NULL::jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_attempt integer;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9._:/-]{1,200}$' THEN
        PERFORM {{schema}}._raise('PM122', format('invalid step name %s: 1 to 200 of A-Z a-z 0-9 . _ - : /',
                                                  coalesce(quote_literal(left(p_name, 210)), 'NULL')));
    END IF;
    IF p_output IS NOT NULL AND octet_length(p_output::text) > 65536 THEN
        PERFORM {{schema}}._raise('PM123', format('output of step %s is %s bytes as JSON, more than 65536', p_name,
                                                  octet_length(p_output::text)));
    END IF;
    SELECT j.attempt INTO v_attempt FROM {{schema}}.job j
     WHERE j.id = p_id AND j.lease_token = p_lease_token AND j.state = 'running'
       FOR SHARE;
    IF NOT FOUND THEN
        PERFORM {{schema}}._not_held(p_id, p_lease_token);
    END IF;
    IF (SELECT count(*) FROM (SELECT 1 FROM {{schema}}.job_step st WHERE st.job_id = p_id AND st.name <> p_name
                               LIMIT 1000) x) >= 1000 THEN
        PERFORM {{schema}}._raise('PM123', format('job %s has 1000 steps already, the most a job may record', p_id));
    END IF;
    INSERT INTO {{schema}}.job_step (job_id, name, attempt, at, output)
    VALUES (p_id, p_name, v_attempt, clock_timestamp(), p_output)
    ON CONFLICT (job_id, name) DO UPDATE SET attempt = excluded.attempt, at = excluded.at, output = excluded.output;
END $function$;

-- job_steps returns the steps a job recorded (job_step_save), in the order
-- they completed: name, the attempt that completed it, when, and its
-- output. PM107 if there is no such job.
CREATE OR REPLACE FUNCTION {{schema}}.job_steps(p_id bigint)
 RETURNS TABLE(name text, attempt integer, at timestamp with time zone, output jsonb)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    PERFORM {{schema}}._job_known(p_id);
    RETURN QUERY
    SELECT st.name, st.attempt, st.at, st.output FROM {{schema}}.job_step st
     WHERE st.job_id = p_id ORDER BY st.at, st.name;
END $function$;

-- ---------------------------------------------------------------------------
-- Periodic jobs (periodic_job; periodic.go)
-- ---------------------------------------------------------------------------

-- _cron_field parses one field of a cron expression into its sorted
-- values: *, a value, a range a-b, lists of those with ",", and steps
-- (*/n, a-b/n, a/n: from a to the field's maximum). p_names (JAN..DEC,
-- SUN..SAT) may stand for values, name i meaning p_name_base + i. PM112
-- when malformed or out of [p_lo, p_hi].
CREATE OR REPLACE FUNCTION {{schema}}._cron_field(p_field text, p_what text, p_lo integer, p_hi integer, p_names text[] DEFAULT NULL::text[], p_name_base integer DEFAULT 0)
 RETURNS integer[]
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    part text;
    m    text[];
    a    integer;
    b    integer;
    step integer;
    vals integer[] := '{}';
    bad  text := format('invalid cron %s field %s: use *, a value from %s to %s%s, a range a-b, a step /n, or a list of those',
                        p_what, left(quote_literal(p_field), 60), p_lo, p_hi,
                        CASE WHEN p_names IS NULL THEN '' ELSE format(' (or %s to %s)', p_names[1], p_names[cardinality(p_names)]) END);
BEGIN
    FOREACH part IN ARRAY string_to_array(upper(p_field), ',') LOOP
        m := regexp_match(part, '^(\*|[0-9]{1,2}|[A-Z]{3})(?:-([0-9]{1,2}|[A-Z]{3}))?(?:/([0-9]{1,2}))?$');
        IF m IS NULL OR (m[1] = '*' AND m[2] IS NOT NULL) THEN
            PERFORM {{schema}}._raise('PM112', bad);
        END IF;
        IF m[1] = '*' THEN
            a := p_lo;
            b := p_hi;
        ELSE
            a := CASE WHEN m[1] ~ '^[0-9]' THEN m[1]::integer ELSE array_position(p_names, m[1]) + p_name_base END;
            b := CASE WHEN m[2] IS NULL THEN CASE WHEN m[3] IS NULL THEN a ELSE p_hi END
                      WHEN m[2] ~ '^[0-9]' THEN m[2]::integer ELSE array_position(p_names, m[2]) + p_name_base END;
        END IF;
        step := coalesce(m[3]::integer, 1);
        IF a IS NULL OR b IS NULL OR a < p_lo OR b > p_hi OR a > b OR step < 1 THEN
            PERFORM {{schema}}._raise('PM112', bad);
        END IF;
        vals := vals || ARRAY(SELECT generate_series(a, b, step));
    END LOOP;
    RETURN ARRAY(SELECT DISTINCT v FROM unnest(vals) v ORDER BY v);
END $function$;

-- _periodic_next returns a schedule's first tick after p_after:
--   - five cron fields (minute hour day-of-month month day-of-week; names
--     JAN..DEC and SUN..SAT; 0 or 7 is Sunday) read in the time zone
--     p_tz: when both day fields are restricted (neither starts with *), a
--     day matching either runs, as in Vixie cron; a local time that a
--     daylight-saving change skips runs when PostgreSQL maps it (an hour
--     later), and one that happens twice runs once;
--   - @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly;
--   - @every <interval> (1 second to 366 days, no months or years): ticks
--     at p_anchor + k * interval.
-- PM112 when the schedule is malformed or never fires (30 2 * ... on
-- February 30th); the time zone is assumed valid (_periodic_check).
CREATE OR REPLACE FUNCTION {{schema}}._periodic_next(p_schedule text, p_tz text, p_after timestamp with time zone, p_anchor timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    s        text := lower(btrim(coalesce(p_schedule, '')));
    f        text[];
    every    interval;
    secs     numeric;
    k        numeric;
    mins     integer[];
    hrs      integer[];
    doms     integer[];
    mons     integer[];
    dows     integer[];
    any_day  boolean;
    t        timestamp;
    stop_at  timestamp;
    nxt      integer;
    day_ok   boolean;
    r        timestamptz;
BEGIN
    IF s LIKE '@every %' THEN
        BEGIN
            every := btrim(substr(s, 8))::interval;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow
                       OR invalid_parameter_value OR syntax_error THEN
            PERFORM {{schema}}._raise('PM112', format('invalid interval in schedule %s: write @every 90s, @every 5 minutes or @every 1h30m', left(quote_literal(p_schedule), 80)));
        END;
        IF every < interval '1 second' OR every > interval '366 days' OR extract(month FROM every) <> 0
           OR extract(year FROM every) <> 0 THEN
            PERFORM {{schema}}._raise('PM112', format('@every needs an interval from 1 second to 366 days, without months or years, got %s', left(quote_literal(p_schedule), 80)));
        END IF;
        secs := extract(epoch FROM every);
        k := greatest(floor(extract(epoch FROM p_after - p_anchor) / secs) + 1, 0);
        RETURN p_anchor + make_interval(secs => (k * secs)::double precision);
    END IF;
    s := CASE s WHEN '@yearly' THEN '0 0 1 1 *' WHEN '@annually' THEN '0 0 1 1 *' WHEN '@monthly' THEN '0 0 1 * *'
                WHEN '@weekly' THEN '0 0 * * 0' WHEN '@daily' THEN '0 0 * * *' WHEN '@midnight' THEN '0 0 * * *'
                WHEN '@hourly' THEN '0 * * * *' ELSE s END;
    f := regexp_split_to_array(s, '\s+');
    IF cardinality(f) <> 5 OR s LIKE '@%' THEN
        PERFORM {{schema}}._raise('PM112', format('invalid schedule %s: give five cron fields (minute hour day month weekday), @hourly, @daily, @weekly, @monthly, @yearly or @every <interval>', left(quote_literal(p_schedule), 80)));
    END IF;
    mins := {{schema}}._cron_field(f[1], 'minute', 0, 59);
    hrs := {{schema}}._cron_field(f[2], 'hour', 0, 23);
    doms := {{schema}}._cron_field(f[3], 'day-of-month', 1, 31);
    mons := {{schema}}._cron_field(f[4], 'month', 1, 12,
                                   '{JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC}', 0);
    dows := ARRAY(SELECT DISTINCT v % 7 FROM unnest({{schema}}._cron_field(f[5], 'day-of-week', 0, 7,
                                   '{SUN,MON,TUE,WED,THU,FRI,SAT}', -1)) v ORDER BY 1);
    any_day := f[3] LIKE '*%' OR f[5] LIKE '*%';
    t := date_trunc('minute', p_after AT TIME ZONE p_tz) + interval '1 minute';
    stop_at := t + interval '8 years';
    LOOP
        IF t > stop_at THEN
            PERFORM {{schema}}._raise('PM112', format('schedule %s never fires', left(quote_literal(p_schedule), 80)));
        END IF;
        IF NOT extract(month FROM t)::integer = ANY (mons) THEN
            t := date_trunc('month', t) + interval '1 month';
            CONTINUE;
        END IF;
        day_ok := CASE WHEN any_day THEN extract(day FROM t)::integer = ANY (doms) AND extract(dow FROM t)::integer = ANY (dows)
                       ELSE extract(day FROM t)::integer = ANY (doms) OR extract(dow FROM t)::integer = ANY (dows) END;
        IF NOT day_ok THEN
            t := date_trunc('day', t) + interval '1 day';
            CONTINUE;
        END IF;
        IF NOT extract(hour FROM t)::integer = ANY (hrs) THEN
            SELECT min(h) INTO nxt FROM unnest(hrs) h WHERE h > extract(hour FROM t);
            t := CASE WHEN nxt IS NULL THEN date_trunc('day', t) + interval '1 day'
                      ELSE date_trunc('day', t) + make_interval(hours => nxt) END;
            CONTINUE;
        END IF;
        IF NOT extract(minute FROM t)::integer = ANY (mins) THEN
            SELECT min(x) INTO nxt FROM unnest(mins) x WHERE x > extract(minute FROM t);
            t := CASE WHEN nxt IS NULL THEN date_trunc('hour', t) + interval '1 hour'
                      ELSE date_trunc('hour', t) + make_interval(mins => nxt) END;
            CONTINUE;
        END IF;
        r := t AT TIME ZONE p_tz;
        IF r > p_after THEN
            RETURN r;
        END IF;
        t := t + interval '1 minute';
    END LOOP;
END $function$;

-- _time_zone_check raises PM112 unless p_tz is a time zone PostgreSQL
-- knows (an IANA name such as Europe/Paris).
CREATE OR REPLACE FUNCTION {{schema}}._time_zone_check(p_tz text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_tz IS NULL OR octet_length(p_tz) > 100 THEN
        PERFORM {{schema}}._raise('PM112', 'time zone must be an IANA name such as UTC or Europe/Paris');
    END IF;
    BEGIN
        PERFORM now() AT TIME ZONE p_tz;
    EXCEPTION WHEN invalid_parameter_value THEN
        PERFORM {{schema}}._raise('PM112', format('unknown time zone %s: use an IANA name such as UTC or Europe/Paris',
                                                  left(quote_literal(p_tz), 100)));
    END;
END $function$;

-- _periodic_check refuses a periodic job's definition before it is
-- stored: the name (PM003), the time zone and the schedule (PM112), and
-- the job itself, by enqueueing it into the queue and rolling that back
-- (enqueue_many is the one home of a job's rules: PM103, PM105, PM004).
-- Returns the first tick after p_now.
CREATE OR REPLACE FUNCTION {{schema}}._periodic_check(p_queue text, p_name text, p_schedule text, p_time_zone text, p_payload bytea, p_kind text, p_priority integer, p_max_attempts integer, p_timeout interval, p_tags jsonb, p_metadata jsonb, p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM {{schema}}._check_name('periodic job', p_name);
    PERFORM {{schema}}._time_zone_check(p_time_zone);
    IF octet_length(p_schedule) > 200 THEN
        PERFORM {{schema}}._raise('PM112', 'schedule must be at most 200 bytes');
    END IF;
    BEGIN
        PERFORM {{schema}}.enqueue_many(p_queue, ARRAY[coalesce(p_payload, ''::bytea)], ARRAY[p_kind], ARRAY[p_priority],
                                        NULL, NULL, ARRAY[p_max_attempts], NULL, false, ARRAY[p_timeout],
                                        ARRAY[p_tags], ARRAY[p_metadata]);
        RAISE EXCEPTION USING ERRCODE = 'PMZ99', MESSAGE = 'rolled back';
    EXCEPTION WHEN SQLSTATE 'PMZ99' OR SQLSTATE 'PM109' THEN
        NULL; -- valid (a full queue is no reason to refuse a schedule)
    END;
    RETURN {{schema}}._periodic_next(p_schedule, p_time_zone, p_now, p_now);
END $function$;

-- periodic_add adds a periodic job to a queue, or replaces the one of the
-- same name: each tick of p_schedule (see _periodic_next) in p_time_zone
-- enqueues p_payload with the job settings given (kind, priority,
-- max_attempts and timeout NULL: the queue's; tags a JSON array, metadata
-- a JSON object). The next tick is computed from now; with p_run_on_start
-- a job is enqueued at once (on the leader's next pass, within a second
-- or so) and then on the schedule. Adding a definition identical to the
-- stored one changes nothing (applications may add theirs at every start).
-- The queue must exist (PM101). Returns the periodic job, as periodic_list.
CREATE OR REPLACE FUNCTION {{schema}}.periodic_add(p_queue text, p_name text, p_schedule text, p_payload bytea DEFAULT '\x'::bytea, p_kind text DEFAULT NULL::text, p_time_zone text DEFAULT 'UTC'::text, p_priority integer DEFAULT 0, p_max_attempts integer DEFAULT NULL::integer, p_timeout interval DEFAULT NULL::interval, p_tags jsonb DEFAULT NULL::jsonb, p_metadata jsonb DEFAULT NULL::jsonb, p_run_on_start boolean DEFAULT false)
 RETURNS TABLE(queue text, name text, schedule text, time_zone text, payload bytea, kind text, priority integer, max_attempts integer, timeout interval, tags text[], metadata jsonb, run_on_start boolean, defined_at timestamp with time zone, next_run_at timestamp with time zone, last_run_at timestamp with time zone, last_job_id bigint, last_error text)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    q     {{schema}}.queue := {{schema}}._queue(p_queue);
    now_  timestamptz := clock_timestamp();
    first timestamptz;
    tg    text[];
    old   {{schema}}.periodic_job;
BEGIN
    first := {{schema}}._periodic_check(p_queue, p_name, p_schedule, p_time_zone, p_payload, p_kind, p_priority,
                                        p_max_attempts, p_timeout, p_tags, p_metadata, now_);
    tg := {{schema}}._job_tags(p_tags);
    SELECT * INTO old FROM {{schema}}.periodic_job pj WHERE pj.queue_id = q.queue_id AND pj.name = p_name FOR UPDATE;
    IF NOT FOUND OR (old.schedule, old.time_zone, old.payload, old.kind, old.priority, old.max_attempts, old.timeout,
                     old.tags, old.metadata, old.run_on_start)
                    IS DISTINCT FROM
                    (p_schedule, p_time_zone, coalesce(p_payload, ''::bytea), p_kind, p_priority::smallint, p_max_attempts,
                     p_timeout, tg, p_metadata, coalesce(p_run_on_start, false)) THEN
        INSERT INTO {{schema}}.periodic_job AS pj (queue_id, name, schedule, time_zone, payload, kind, priority, max_attempts,
                                                  timeout, tags, metadata, run_on_start, defined_at, next_run_at)
        VALUES (q.queue_id, p_name, p_schedule, p_time_zone, coalesce(p_payload, ''::bytea), p_kind, p_priority,
                p_max_attempts, p_timeout, tg, p_metadata, coalesce(p_run_on_start, false), now_,
                CASE WHEN p_run_on_start THEN now_ ELSE first END)
        ON CONFLICT (queue_id, name) DO UPDATE
           SET schedule = EXCLUDED.schedule, time_zone = EXCLUDED.time_zone, payload = EXCLUDED.payload,
               kind = EXCLUDED.kind, priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
               timeout = EXCLUDED.timeout, tags = EXCLUDED.tags, metadata = EXCLUDED.metadata,
               run_on_start = EXCLUDED.run_on_start, defined_at = EXCLUDED.defined_at,
               next_run_at = EXCLUDED.next_run_at, last_error = NULL;
    END IF;
    RETURN QUERY SELECT * FROM {{schema}}.periodic_list(p_queue) l WHERE l.name = p_name;
END $function$;

-- periodic_remove deletes a queue's periodic job; jobs it enqueued stay.
-- PM101 for an unknown queue, PM111 for an unknown periodic job.
CREATE OR REPLACE FUNCTION {{schema}}.periodic_remove(p_queue text, p_name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q {{schema}}.queue;
BEGIN
    -- Bad names are PM003 whether or not the queue exists.
    PERFORM {{schema}}._check_name('queue', p_queue);
    PERFORM {{schema}}._check_name('periodic job', p_name);
    q := {{schema}}._queue(p_queue);
    DELETE FROM {{schema}}.periodic_job pj WHERE pj.queue_id = q.queue_id AND pj.name = p_name;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM111', format('unknown periodic job %s in queue %s',
                                                  left(quote_literal(coalesce(p_name, '')), 210), quote_literal(q.name)));
    END IF;
END $function$;

-- periodic_list returns the periodic jobs of a queue (PM101 if unknown,
-- PM003 for a name no queue can have),
-- or of every queue with NULL, by queue and name.
CREATE OR REPLACE FUNCTION {{schema}}.periodic_list(p_queue text DEFAULT NULL::text)
 RETURNS TABLE(queue text, name text, schedule text, time_zone text, payload bytea, kind text, priority integer, max_attempts integer, timeout interval, tags text[], metadata jsonb, run_on_start boolean, defined_at timestamp with time zone, next_run_at timestamp with time zone, last_run_at timestamp with time zone, last_job_id bigint, last_error text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    qid integer;
BEGIN
    IF p_queue IS NOT NULL THEN
        qid := ({{schema}}._queue(p_queue)).queue_id;
    END IF;
    RETURN QUERY
    SELECT q.name, pj.name, pj.schedule, pj.time_zone, pj.payload, pj.kind, pj.priority::integer, pj.max_attempts,
           pj.timeout, pj.tags, pj.metadata, pj.run_on_start, pj.defined_at, pj.next_run_at, pj.last_run_at,
           pj.last_job_id, pj.last_error
      FROM {{schema}}.periodic_job pj JOIN {{schema}}.queue q ON q.queue_id = pj.queue_id
     WHERE qid IS NULL OR pj.queue_id = qid
     ORDER BY q.name, pj.name;
END $function$;

-- periodic_preview returns the next p_count ticks of a schedule after
-- p_after (PM112 for a bad schedule or time zone), to check one before
-- adding it.
CREATE OR REPLACE FUNCTION {{schema}}.periodic_preview(p_schedule text, p_time_zone text DEFAULT 'UTC'::text, p_after timestamp with time zone DEFAULT now(), p_count integer DEFAULT 5)
 RETURNS SETOF timestamp with time zone
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t timestamptz := p_after;
BEGIN
    IF p_count IS NULL OR p_count < 1 OR p_count > 1000 THEN
        PERFORM {{schema}}._raise('PM004', 'count must be from 1 to 1000');
    END IF;
    PERFORM {{schema}}._time_zone_check(p_time_zone);
    FOR i IN 1..p_count LOOP
        t := {{schema}}._periodic_next(p_schedule, p_time_zone, t, p_after);
        RETURN NEXT t;
    END LOOP;
END $function$;

-- periodic_enqueue_due enqueues the due periodic jobs (next_run_at passed),
-- at most p_limit, and moves each one's next_run_at to its first tick
-- after now, in the same transaction, with the row locked (SKIP LOCKED:
-- concurrent callers share the work and never enqueue a tick twice).
-- Ticks missed while nothing called it are coalesced into one job, for
-- the first of them. Each job's unique key is periodic:<name>@<tick, UTC>,
-- so it can be found. A tick that cannot be enqueued (the queue is full,
-- its max_payload_bytes has shrunk below the payload) stays due, with the
-- reason in last_error and the result row, and is tried again on the next
-- call. A tick whose payload lacks the limit key of a queue with a
-- key_field (PM113: every tick would be refused until the periodic job's
-- payload or the queue's key_field changes) is skipped: last_error says
-- so and next_run_at moves on, so that the job is not tried at every
-- call and does not hold its place among the first p_limit due ones.
-- Returns one row per periodic job handled.
CREATE OR REPLACE FUNCTION {{schema}}.periodic_enqueue_due(p_limit integer DEFAULT 100)
 RETURNS TABLE(queue text, name text, tick timestamp with time zone, job_id bigint, duplicate boolean, next_run_at timestamp with time zone, error text)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p     record;
    jid   bigint;
    dup   boolean;
    now_  timestamptz := clock_timestamp();
    nxt   timestamptz;
    err   text;
    skip  boolean;
BEGIN
    FOR p IN
        SELECT pj.*, q.name AS queue_name, q.key_field AS queue_key_field FROM {{schema}}.periodic_job pj
          JOIN {{schema}}.queue q ON q.queue_id = pj.queue_id
         WHERE pj.next_run_at <= now_
         ORDER BY pj.next_run_at
         LIMIT greatest(coalesce(p_limit, 100), 1)
           FOR UPDATE OF pj SKIP LOCKED
    LOOP
        err := NULL;
        jid := NULL;
        dup := false;
        skip := false;
        BEGIN
            SELECT e.id, e.duplicate INTO jid, dup
              FROM {{schema}}.enqueue_many(p.queue_name, ARRAY[p.payload], ARRAY[p.kind], ARRAY[p.priority::integer],
                                           NULL, NULL, ARRAY[p.max_attempts],
                                           ARRAY['periodic:' || p.name || '@'
                                                 || to_char(p.next_run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')],
                                           false, ARRAY[p.timeout],
                                           ARRAY[CASE WHEN p.tags IS NULL THEN NULL ELSE to_jsonb(p.tags) END],
                                           ARRAY[p.metadata]) e;
        EXCEPTION WHEN SQLSTATE 'PM113' THEN
            err := format('limit key missing: the payload has no field %s (or is not JSON), which queue %s takes each job''s limit key from; tick skipped',
                          quote_literal(p.queue_key_field), quote_literal(p.queue_name));
            skip := true;
        WHEN SQLSTATE 'PM109' OR SQLSTATE 'PM103' OR SQLSTATE 'PM004' OR SQLSTATE 'PM105' THEN
            err := SQLERRM;
        END;
        IF err IS NULL THEN
            nxt := {{schema}}._periodic_next(p.schedule, p.time_zone, now_, p.defined_at);
            UPDATE {{schema}}.periodic_job pj
               SET next_run_at = nxt, last_run_at = p.next_run_at, last_job_id = jid, last_error = NULL
             WHERE pj.queue_id = p.queue_id AND pj.name = p.name;
        ELSIF skip THEN
            nxt := {{schema}}._periodic_next(p.schedule, p.time_zone, now_, p.defined_at);
            UPDATE {{schema}}.periodic_job pj SET next_run_at = nxt, last_error = left(err, 1000)
             WHERE pj.queue_id = p.queue_id AND pj.name = p.name;
        ELSE
            nxt := p.next_run_at;
            UPDATE {{schema}}.periodic_job pj SET last_error = left(err, 1000)
             WHERE pj.queue_id = p.queue_id AND pj.name = p.name;
        END IF;
        queue := p.queue_name;
        name := p.name;
        tick := p.next_run_at;
        job_id := jid;
        duplicate := coalesce(dup, false);
        next_run_at := nxt;
        error := err;
        RETURN NEXT;
    END LOOP;
END $function$;

-- The triggers of the sequences, per-key limits, workflows, batches and
-- fair queues (the migrator drops them before the functions).
-- job_sequence_left moves the first four on when jobs are deleted.
CREATE OR REPLACE TRIGGER job_sequence_left AFTER DELETE ON {{schema}}.job
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}._job_sequence_left();

-- A job's state changes that the sequences, per-key limits, workflows,
-- batches and fair queues follow: two row triggers on UPDATE OF state,
-- one before and one after, whose WHEN is false for every change the
-- claims and retries of a plain job make. They were seven triggers, one
-- per feature, each with its own WHEN: on every claim (available ->
-- running, the hottest UPDATE) PostgreSQL evaluated seven conditions and
-- set up the triggers' state for each row, which cost a claim of a plain
-- job about 20 % more than with no trigger (PL/pgSQL loops of UPDATEs of
-- 50 jobs on copies of the job table: 2 triggers 0.4 % to 7 % over none,
-- 7 triggers 16 % to 25 %). Each branch below is one of the former
-- triggers, in their firing order (PostgreSQL fires a table's triggers in
-- name order), each testing the row as the former trigger's WHEN did:
-- before, on NEW as the branches above it left it.
--
-- _job_state_before:
--   job_fair_retag: tags a job of a fair queue that becomes claimable
--     again (retried, snoozed, rescued, requeued from dead, or admitted
--     from pending behind its sequence, key limit or dependencies) at the
--     queue's virtual time: it is claimed next, as a job its tenant
--     enqueued now would be at the least, and the claims' positioned
--     reads (which start at the last tag they claimed) find it. Its
--     tenant is not charged again.
--   job_limit_requeue (a dead job with a limit key is requeued): the job
--     waits as pending when its key is at the queue's key_limit.
--   job_sequence_requeue (a dead job of a sequence is requeued): a job
--     that holds its sequence resumes it and runs next; a job whose
--     sequence has a head, or is held by another job, waits as pending
--     (and, with the lowest id, runs next).
CREATE OR REPLACE FUNCTION {{schema}}._job_state_before()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    lim integer;
BEGIN
    IF NEW.fair_tag IS NOT NULL AND OLD.state NOT IN ('available', 'scheduled', 'retrying')
       AND NEW.state IN ('available', 'scheduled', 'retrying') THEN
        NEW.fair_tag := {{schema}}._fair_virtual_time(NEW.queue_id);
    END IF;
    IF NEW.limit_key IS NOT NULL AND OLD.state = 'dead' AND NEW.state <> 'dead' THEN
        PERFORM pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.limit.' || NEW.queue_id || '.' || NEW.limit_key, 0));
        SELECT q.key_limit INTO lim FROM {{schema}}.queue q WHERE q.queue_id = NEW.queue_id;
        IF lim <= (SELECT count(*) FROM (
                       SELECT 1 FROM {{schema}}.job x
                        WHERE x.queue_id = NEW.queue_id AND x.limit_key = NEW.limit_key AND x.id <> NEW.id
                          AND x.state IN ('available', 'scheduled', 'retrying', 'running')
                        LIMIT lim) c) THEN
            NEW.state := 'pending';
        END IF;
    END IF;
    IF NEW.sequence_key IS NOT NULL AND OLD.state = 'dead' AND NEW.state <> 'dead' THEN
        PERFORM pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.sequence.' || NEW.queue_id || '.' || NEW.sequence_key, 0));
        DELETE FROM {{schema}}.job_sequence s
         WHERE s.queue_id = NEW.queue_id AND s.sequence_key = NEW.sequence_key AND s.held_job_id = NEW.id;
        IF EXISTS (SELECT 1 FROM {{schema}}.job_sequence s
                    WHERE s.queue_id = NEW.queue_id AND s.sequence_key = NEW.sequence_key)
           OR EXISTS (SELECT 1 FROM {{schema}}.job x
                       WHERE x.queue_id = NEW.queue_id AND x.sequence_key = NEW.sequence_key AND x.id <> NEW.id
                         AND x.state IN ('available', 'scheduled', 'retrying', 'running')) THEN
            NEW.state := 'pending';
        END IF;
    END IF;
    RETURN NEW;
END $function$;

-- _job_state_after:
--   job_batch_dead (a job of a batch went dead, or a dead one was
--     requeued): counts it off its batch, or on again.
--   job_deps_dead (a job that others depend on went dead: failed for
--     good, or its last lease expired): its dependents are cancelled, or
--     count it off with deps_ignore_dead.
--   job_limit_dead (a job with a limit key went dead): the job no longer
--     holds one of its key's places; the next pending job of the key is
--     admitted.
--   job_sequence_dead (a job of a sequence went dead): it holds its
--     sequence, or with sequence_continue lets it go on (the next job
--     runs).
CREATE OR REPLACE FUNCTION {{schema}}._job_state_after()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NEW.batch_id IS NOT NULL AND (NEW.state = 'dead') <> (OLD.state = 'dead') THEN
        PERFORM {{schema}}._batch_settle(ARRAY[NEW.batch_id], ARRAY[NEW.id],
                                         ARRAY[CASE WHEN NEW.state = 'dead' THEN 'dead' ELSE 'requeued' END]);
    END IF;
    IF NEW.state = 'dead' AND OLD.state <> 'dead' THEN
        IF NEW.has_dependents THEN
            PERFORM {{schema}}._deps_settle(NULL, NULL, ARRAY[NEW.id]);
        END IF;
        IF NEW.limit_key IS NOT NULL THEN
            PERFORM {{schema}}._key_limit_admit(NEW.queue_id, ARRAY[NEW.limit_key], true);
        END IF;
        IF NEW.sequence_key IS NOT NULL THEN
            IF NEW.sequence_continue THEN
                PERFORM {{schema}}._sequence_advance(NEW.queue_id, NEW.sequence_key, true);
            ELSE
                PERFORM {{schema}}._sequence_hold(NEW.queue_id, NEW.sequence_key, NEW.id, 'dead');
            END IF;
        END IF;
    END IF;
    RETURN NULL;
END $function$;

CREATE OR REPLACE TRIGGER job_state_before BEFORE UPDATE OF state ON {{schema}}.job
    FOR EACH ROW WHEN ((NEW.fair_tag IS NOT NULL AND OLD.state NOT IN ('available', 'scheduled', 'retrying')
                        AND NEW.state IN ('available', 'scheduled', 'retrying'))
                       OR ((NEW.limit_key IS NOT NULL OR NEW.sequence_key IS NOT NULL)
                           AND OLD.state = 'dead' AND NEW.state <> 'dead'))
    EXECUTE FUNCTION {{schema}}._job_state_before();
CREATE OR REPLACE TRIGGER job_state_after AFTER UPDATE OF state ON {{schema}}.job
    FOR EACH ROW WHEN ((NEW.batch_id IS NOT NULL AND (NEW.state = 'dead') <> (OLD.state = 'dead'))
                       OR ((NEW.has_dependents OR NEW.limit_key IS NOT NULL OR NEW.sequence_key IS NOT NULL)
                           AND NEW.state = 'dead' AND OLD.state <> 'dead'))
    EXECUTE FUNCTION {{schema}}._job_state_after();
