-- pgmsg 020: job payloads in a table of their own (issue 13).
--
-- Templated like 001.
--
-- Why. A job's row was written three times with its payload: by the
-- enqueue, by the claim (an UPDATE writes the whole new row version, and a
-- 1 KiB payload stays inline) and by the completion (the row, payload and
-- all, copied into job_archive). Under load that was some 3.6 KB of WAL
-- per job, half of it full-page images of job pages touched after each
-- checkpoint, and a job table of 1.4 KB rows that outgrew shared_buffers
-- with a few hundred thousand jobs, so claims read and wrote pages through
-- the OS (docs/benchmarks.md has the profile).
--
-- What. job_payload holds each job's payload, written once by the enqueue
-- and deleted with the job's last row (dead_purge, archive_prune,
-- queue_delete). job and job_archive keep only what changes or is
-- searched: the claim rewrites a row of some 150 bytes, the completion
-- moves one, and the payload is read by id where a job is handed out
-- (job_claim, job_get, dead_list). A job's id names its payload in both
-- tables, as the ids come from one sequence.
--
-- Same API: every function keeps its arguments and results.

CREATE TABLE {{schema}}.job_payload (
    id      bigint PRIMARY KEY,
    payload bytea
) WITH (autovacuum_vacuum_insert_scale_factor = 0.05);

INSERT INTO {{schema}}.job_payload (id, payload) SELECT j.id, j.payload FROM {{schema}}.job j;
INSERT INTO {{schema}}.job_payload (id, payload) SELECT a.id, a.payload FROM {{schema}}.job_archive a;
ALTER TABLE {{schema}}.job DROP COLUMN payload;
ALTER TABLE {{schema}}.job_archive DROP COLUMN payload;

-- The functions that wrote, read or deleted payloads, as 019 left them
-- except for that.

CREATE OR REPLACE FUNCTION {{schema}}.enqueue_many(p_queue text, p_payloads bytea[], p_kinds text[] DEFAULT NULL::text[], p_priorities integer[] DEFAULT NULL::integer[], p_run_ats timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_delays interval[] DEFAULT NULL::interval[], p_max_attempts integer[] DEFAULT NULL::integer[], p_unique_keys text[] DEFAULT NULL::text[], p_create_queue boolean DEFAULT true)
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
    has_keys   boolean;
    wake       boolean;
    ids        bigint[];
    r          record;
    found_id   bigint;
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
       OR coalesce(cardinality(p_max_attempts), 0) > n OR coalesce(cardinality(p_unique_keys), 0) > n THEN
        PERFORM {{schema}}._raise('PM004', 'kinds, priorities, run_ats, delays, max_attempts and unique_keys must not be longer than payloads');
    END IF;
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
           coalesce(bool_or(octet_length(u.k) > 1000), false)
      INTO too_big, bad_delay, bad_att, bad_prio, both_times, has_keys, wake, bad_time, far_delay, long_kind, long_key
      FROM unnest(p_payloads, p_delays, p_max_attempts, p_priorities, p_run_ats, p_unique_keys, p_kinds)
           AS u(p, d, m, pr, ra, k, kd);
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
    -- Queues with a max_depth pay for a bounded count (_queue_depth_check);
    -- the others for this one test of a column already read.
    IF q.max_depth IS NOT NULL THEN
        PERFORM {{schema}}._queue_depth_check(q, n);
    END IF;

    IF NOT has_keys THEN
        -- Fast path: ids come from the sequence in input order (nextval is
        -- increasing within a statement), so ORDER BY id is input order.
        -- src is read twice (a CTE so referenced is computed once): each
        -- job's id is drawn once, for its row and its payload's.
        RETURN QUERY
        WITH src AS (
            SELECT nextval('{{schema}}.job_id_seq') AS id, u.*
            FROM unnest(p_payloads, p_kinds, p_priorities, p_run_ats, p_delays, p_max_attempts)
                 WITH ORDINALITY AS u(p, kd, pr, ra, d, m, ord)
            ORDER BY u.ord
        ), pl AS (
            INSERT INTO {{schema}}.job_payload (id, payload) SELECT src.id, src.p FROM src
        ), ins AS (
            INSERT INTO {{schema}}.job AS j (id, queue_id, state, priority, max_attempts, run_at, enqueued_at, kind)
            SELECT src.id, q.queue_id,
                   CASE WHEN t.at > now_ts THEN 'scheduled' ELSE 'available' END,
                   coalesce(src.pr, 0), coalesce(src.m, q.max_attempts), t.at, now_ts, src.kd
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
        ids := ARRAY(SELECT nextval('{{schema}}.job_id_seq') FROM generate_series(1, n));
        INSERT INTO {{schema}}.job AS j (id, queue_id, state, priority, max_attempts, run_at, enqueued_at, kind,
                                         unique_key)
        SELECT u.id, q.queue_id,
               CASE WHEN t.at > now_ts THEN 'scheduled' ELSE 'available' END,
               coalesce(u.pr, 0), coalesce(u.m, q.max_attempts), t.at, now_ts, u.kd, u.k
        FROM unnest(ids, p_payloads, p_kinds, p_priorities, p_run_ats, p_delays, p_max_attempts, p_unique_keys)
             WITH ORDINALITY AS u(id, p, kd, pr, ra, d, m, k, ord)
        CROSS JOIN LATERAL (SELECT coalesce(u.ra, now_ts + coalesce(u.d, interval '0')) AS at) t
        -- Key order: concurrent batches take the unique index's locks in one
        -- order and cannot deadlock on each other.
        ORDER BY u.k, u.ord
        ON CONFLICT (queue_id, unique_key) WHERE unique_key IS NOT NULL AND state <> 'dead' DO NOTHING;

        -- A row skipped for a key whose job finished (was archived) before
        -- this lookup has neither its own job nor a live one: insert it again.
        FOR r IN
            SELECT u.id AS id, u.ord AS ord
            FROM unnest(ids, p_unique_keys) WITH ORDINALITY AS u(id, k, ord)
            WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.job x WHERE x.id = u.id)
              AND NOT EXISTS (SELECT 1 FROM {{schema}}.job x WHERE x.queue_id = q.queue_id AND x.unique_key = u.k
                                                              AND x.state <> 'dead')
        LOOP
            LOOP
                INSERT INTO {{schema}}.job AS j (id, queue_id, state, priority, max_attempts, run_at, enqueued_at,
                                                 kind, unique_key)
                SELECT r.id, q.queue_id,
                       CASE WHEN t.at > now_ts THEN 'scheduled' ELSE 'available' END,
                       coalesce(p_priorities[r.ord], 0), coalesce(p_max_attempts[r.ord], q.max_attempts),
                       t.at, now_ts, p_kinds[r.ord], p_unique_keys[r.ord]
                FROM (SELECT coalesce(p_run_ats[r.ord], now_ts + coalesce(p_delays[r.ord], interval '0')) AS at) t
                ON CONFLICT (queue_id, unique_key) WHERE unique_key IS NOT NULL AND state <> 'dead' DO NOTHING
                RETURNING j.id INTO found_id;
                EXIT WHEN found_id IS NOT NULL;
                SELECT x.id INTO found_id FROM {{schema}}.job x
                WHERE x.queue_id = q.queue_id AND x.unique_key = p_unique_keys[r.ord] AND x.state <> 'dead';
                EXIT WHEN found_id IS NOT NULL;
            END LOOP;
        END LOOP;

        -- The payloads of the jobs this call inserted (each id once).
        INSERT INTO {{schema}}.job_payload (id, payload)
        SELECT u.id, u.p FROM unnest(ids, p_payloads) AS u(id, p)
        WHERE EXISTS (SELECT 1 FROM {{schema}}.job x WHERE x.id = u.id);

        RETURN QUERY
        SELECT coalesce(own.id, live.id), own.id IS NULL, coalesce(own.state, live.state),
               coalesce(own.run_at, live.run_at)
        FROM unnest(ids, p_unique_keys) WITH ORDINALITY AS u(id, k, ord)
        LEFT JOIN {{schema}}.job own ON own.id = u.id
        LEFT JOIN LATERAL (
            SELECT x.id, x.state, x.run_at FROM {{schema}}.job x
            WHERE own.id IS NULL AND x.queue_id = q.queue_id AND x.unique_key = u.k AND x.state <> 'dead'
        ) live ON true
        ORDER BY u.ord;
    END IF;

    -- A wake-up for idle workers; polling stays the correctness path.
    IF wake THEN
        PERFORM pg_notify({{schema_lit}} || '_log', 'queue:' || q.name);
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}.job_claim(p_queue text, p_limit integer DEFAULT 1, p_lease interval DEFAULT NULL::interval, p_worker text DEFAULT NULL::text, p_max_bytes bigint DEFAULT NULL::bigint, p_async boolean DEFAULT false)
 RETURNS TABLE(id bigint, queue text, kind text, payload bytea, priority integer, attempt integer, max_attempts integer, lease_token bigint, lease_expires_at timestamp with time zone, run_at timestamp with time zone, enqueued_at timestamp with time zone, attempted_at timestamp with time zone, unique_key text, errors jsonb)
 LANGUAGE plpgsql
 SET enable_bitmapscan TO 'off'
 SET enable_seqscan TO 'off'
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
    pos      text[] := string_to_array(nullif(current_setting(pos_name, true), ''), '|');
    h_pri    smallint;
    h_run    timestamptz;
    h_id     bigint;
    ids      bigint[];
    pris     smallint[];
    runs     timestamptz[];
    sizes    bigint[];
    n        integer;
    cum      bigint := 0;
    token0   bigint;
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

    IF cardinality(pos) = 3 AND coalesce(nullif(current_setting(full_name, true), '')::bigint, 0) = now_s THEN
        h_pri := pos[1]::smallint;
        h_run := to_timestamp(pos[2]::bigint / 1000000) + (pos[2]::bigint % 1000000) * interval '1 microsecond';
        h_id := pos[3]::bigint;
        -- Three ordered reads of the index, run one after the other only
        -- as far as needed (a CTE is read as the statement asks for rows).
        WITH hi AS (
            SELECT j.id, j.priority, j.run_at, CASE WHEN p_max_bytes IS NOT NULL THEN
                   (SELECT octet_length(pl.payload)::bigint FROM {{schema}}.job_payload pl WHERE pl.id = j.id) END AS n FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
               AND j.priority > h_pri AND j.run_at <= now_ts
             ORDER BY j.priority DESC, j.run_at, j.id
             LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), eq AS (
            SELECT j.id, j.priority, j.run_at, CASE WHEN p_max_bytes IS NOT NULL THEN
                   (SELECT octet_length(pl.payload)::bigint FROM {{schema}}.job_payload pl WHERE pl.id = j.id) END AS n FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
               AND j.priority = h_pri AND (j.run_at, j.id) > (h_run, h_id) AND j.run_at <= now_ts
             ORDER BY j.run_at, j.id
             LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), lo AS (
            SELECT j.id, j.priority, j.run_at, CASE WHEN p_max_bytes IS NOT NULL THEN
                   (SELECT octet_length(pl.payload)::bigint FROM {{schema}}.job_payload pl WHERE pl.id = j.id) END AS n FROM {{schema}}.job j
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
               array_agg(x.n ORDER BY x.b, x.priority DESC, x.run_at, x.id)
          INTO ids, pris, runs, sizes
          FROM x;
    END IF;
    IF coalesce(cardinality(ids), 0) < p_limit THEN
        -- The whole index in claim order. Rows the positioned read locked
        -- are ours, so they are found again where they belong.
        PERFORM set_config(full_name, now_s::text, false);
        SELECT array_agg(c.id ORDER BY c.priority DESC, c.run_at, c.id),
               array_agg(c.priority ORDER BY c.priority DESC, c.run_at, c.id),
               array_agg(c.run_at ORDER BY c.priority DESC, c.run_at, c.id),
               array_agg(c.n ORDER BY c.priority DESC, c.run_at, c.id)
          INTO ids, pris, runs, sizes
          FROM (SELECT j.id, j.priority, j.run_at, CASE WHEN p_max_bytes IS NOT NULL THEN
                   (SELECT octet_length(pl.payload)::bigint FROM {{schema}}.job_payload pl WHERE pl.id = j.id) END AS n FROM {{schema}}.job j
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
    PERFORM set_config(pos_name, pris[n] || '|' || (extract(epoch FROM runs[n]) * 1000000)::bigint || '|' || ids[n], false);
    RETURN QUERY
    WITH u AS (
        UPDATE {{schema}}.job j
           SET state = 'running', attempt = j.attempt + 1, lease_token = (token0 + k.ord - 1) % 9007199254740991 + 1,
               lease_expires_at = expires, attempted_at = now_ts, worker = p_worker
          FROM unnest(ids[1:n]) WITH ORDINALITY AS k(id, ord)
         WHERE j.id = k.id
        RETURNING k.ord, j.id, j.kind, j.priority, j.attempt, j.max_attempts, j.lease_token,
                  j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.unique_key, j.errors
    )
    SELECT u.id, q.name, u.kind, pl.payload, u.priority::integer, u.attempt, u.max_attempts, u.lease_token,
           u.lease_expires_at, u.run_at, u.enqueued_at, u.attempted_at, u.unique_key, u.errors
    FROM u LEFT JOIN {{schema}}.job_payload pl ON pl.id = u.id
    ORDER BY u.ord;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}.job_complete_many(p_ids bigint[], p_tokens bigint[])
 RETURNS TABLE(id bigint)
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    WITH d AS (
        DELETE FROM {{schema}}.job j
        USING unnest(p_ids, p_tokens) AS u(id, token)
        WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running'
        RETURNING j.*
    ), a AS (
        INSERT INTO {{schema}}.job_archive (id, queue_id, status, priority, attempt, max_attempts, enqueued_at,
                                            attempted_at, finished_at, kind, unique_key, errors)
        SELECT d.id, d.queue_id, 'completed', d.priority, d.attempt, d.max_attempts, d.enqueued_at,
               d.attempted_at, clock_timestamp(), d.kind, d.unique_key, d.errors
        FROM d
        RETURNING job_archive.id
    )
    SELECT a.id FROM a
$function$;

CREATE OR REPLACE FUNCTION {{schema}}.job_cancel(p_id bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    WITH d AS (
        DELETE FROM {{schema}}.job j WHERE j.id = p_id RETURNING j.*
    )
    INSERT INTO {{schema}}.job_archive (id, queue_id, status, priority, attempt, max_attempts, enqueued_at,
                                        attempted_at, finished_at, kind, unique_key, errors)
    SELECT d.id, d.queue_id, 'cancelled', d.priority, d.attempt, d.max_attempts, d.enqueued_at,
           d.attempted_at, clock_timestamp(), d.kind, d.unique_key, d.errors
    FROM d;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM {{schema}}.job_archive a WHERE a.id = p_id) THEN
        RETURN false;
    END IF;
    PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
    RETURN false;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}.job_get(p_id bigint)
 RETURNS TABLE(id bigint, queue text, state text, kind text, payload bytea, priority integer, attempt integer, max_attempts integer, lease_token bigint, lease_expires_at timestamp with time zone, run_at timestamp with time zone, enqueued_at timestamp with time zone, attempted_at timestamp with time zone, finished_at timestamp with time zone, worker text, unique_key text, errors jsonb)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT j.id, q.name, j.state, j.kind, (SELECT pl.payload FROM {{schema}}.job_payload pl WHERE pl.id = j.id), j.priority::integer, j.attempt, j.max_attempts, j.lease_token,
           j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.finalized_at, j.worker, j.unique_key, j.errors
    FROM {{schema}}.job j JOIN {{schema}}.queue q ON q.queue_id = j.queue_id
    WHERE j.id = p_id
    UNION ALL
    SELECT a.id, q.name, a.status, a.kind, (SELECT pl.payload FROM {{schema}}.job_payload pl WHERE pl.id = a.id), a.priority::integer, a.attempt, a.max_attempts, NULL::bigint,
           NULL::timestamptz, NULL::timestamptz, a.enqueued_at, a.attempted_at, a.finished_at, NULL::text,
           a.unique_key, a.errors
    FROM {{schema}}.job_archive a JOIN {{schema}}.queue q ON q.queue_id = a.queue_id
    WHERE a.id = p_id;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}.dead_list(p_queue text, p_kind text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_after_id bigint DEFAULT 0)
 RETURNS TABLE(id bigint, queue text, state text, kind text, payload bytea, priority integer, attempt integer, max_attempts integer, lease_token bigint, lease_expires_at timestamp with time zone, run_at timestamp with time zone, enqueued_at timestamp with time zone, attempted_at timestamp with time zone, finished_at timestamp with time zone, worker text, unique_key text, errors jsonb)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_queue);
BEGIN
    RETURN QUERY
    SELECT j.id, q.name, j.state, j.kind, (SELECT pl.payload FROM {{schema}}.job_payload pl WHERE pl.id = j.id), j.priority::integer, j.attempt, j.max_attempts, j.lease_token,
           j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.finalized_at, j.worker, j.unique_key, j.errors
    FROM {{schema}}.job j
    WHERE j.queue_id = q.queue_id AND j.state = 'dead' AND j.id > coalesce(p_after_id, 0)
      AND (p_kind IS NULL OR j.kind = p_kind)
    ORDER BY j.id
    LIMIT greatest(coalesce(p_limit, 100), 0);
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}.dead_purge(p_queue text, p_ids bigint[] DEFAULT NULL::bigint[], p_kind text DEFAULT NULL::text, p_older_than interval DEFAULT NULL::interval, p_limit integer DEFAULT 10000)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_queue);
    n integer;
BEGIN
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
    )
    SELECT count(*) INTO n FROM d;
    RETURN n;
END $function$;

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
        )
        SELECT count(*) INTO n FROM d;
        total := total + n;
        left_n := left_n - n;
    END LOOP;
    RETURN total;
END $function$;

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
    )
    DELETE FROM {{schema}}.job_payload pl
     WHERE pl.id IN (SELECT d.id FROM d UNION ALL SELECT a.id FROM a);
    DELETE FROM {{schema}}.queue WHERE queue_id = q.queue_id;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}._roles_grant()
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    s       text := {{schema_lit}};
    r       text;
    rel     text;
    n       integer := 0;
BEGIN
    FOREACH r IN ARRAY ARRAY['producer', 'consumer', 'worker', 'admin'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_' || r);
        n := n + 1;
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', s, s || '_' || r);
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_producer') THEN
        EXECUTE format('GRANT SELECT ON %I.topic, %I.segment TO %I', s, s, s || '_producer');
        EXECUTE format('GRANT SELECT, UPDATE ON %I.topic_partition TO %I', s, s || '_producer');
        EXECUTE format('GRANT INSERT ON %I.record TO %I', s, s || '_producer');
        -- Backpressure reads the groups' cursors; segment creation logs.
        EXECUTE format('GRANT SELECT ON %I.group_cursor, %I.consumer_group TO %I', s, s, s || '_producer');
        EXECUTE format('GRANT INSERT ON %I.maintenance_event TO %I', s, s || '_producer');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.maintenance_event_event_id_seq TO %I', s, s || '_producer');
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I._segment_lock(integer), %I._segment_create(integer, integer, bigint, bigint), '
                       '%I._segment_ensure(integer, integer, bigint, bigint, bigint) TO %I', s, s, s, s || '_producer');
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_consumer') THEN
        EXECUTE format('GRANT SELECT ON %I.topic, %I.topic_partition, %I.segment, %I.record TO %I',
                       s, s, s, s, s || '_consumer');
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.consumer_group, %I.group_cursor TO %I', s, s, s || '_consumer');
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.group_member TO %I', s, s || '_consumer');
        EXECUTE format('GRANT INSERT ON %I.maintenance_event TO %I', s, s || '_consumer');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.maintenance_event_event_id_seq TO %I', s, s || '_consumer');
        -- Consumers read a claimed range straight from its segment table;
        -- _segment_create grants new segments to whoever may read record.
        FOR rel IN SELECT g.relname FROM {{schema}}.segment g LOOP
            EXECUTE format('GRANT SELECT ON %I.%I TO %I', s, rel, s || '_consumer');
        END LOOP;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_worker') THEN
        EXECUTE format('GRANT SELECT, INSERT ON %I.queue TO %I', s, s || '_worker');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.queue_queue_id_seq, %I.job_id_seq TO %I', s, s, s || '_worker');
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.job TO %I', s, s || '_worker');
        EXECUTE format('GRANT SELECT, INSERT ON %I.job_archive TO %I', s, s || '_worker');
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON %I.job_payload TO %I', s, s || '_worker');
        EXECUTE format('GRANT INSERT ON %I.maintenance_event TO %I', s, s || '_worker');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.maintenance_event_event_id_seq TO %I', s, s || '_worker');
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_admin') THEN
        FOR rel IN
            SELECT c.relname FROM pg_class c WHERE c.relnamespace = s::regnamespace
               AND c.relkind IN ('r', 'p') AND c.relname <> 'pgmsg_migration'
        LOOP
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON %I.%I TO %I', s, rel, s || '_admin');
        END LOOP;
        EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO %I', s, s || '_admin');
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I._segment_lock(integer), %I._segment_create(integer, integer, bigint, bigint), '
                       '%I._segment_ensure(integer, integer, bigint, bigint, bigint), %I.topic_create(text, integer, jsonb), '
                       '%I.topic_delete(text), %I.topic_add_partitions(text, integer), %I.topic_configure(text, jsonb), '
                       '%I.retention_run(integer), %I.compact_run(integer), %I.segments_ensure() TO %I',
                       s, s, s, s, s, s, s, s, s, s, s || '_admin');
    END IF;
    RETURN n;
END $function$;

-- The worker role may write, read and delete payloads (admin gets every
-- table, this one included).
SELECT {{schema}}._roles_grant();
