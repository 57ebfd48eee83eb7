-- pgmsg 002: the job queue (queues, jobs, dead-letter, archive).
--
-- Templated like 001: {{schema}} is the quoted schema name and {{schema_lit}}
-- the schema name as a string literal.
--
-- Life of a job (job.state):
--
--   available / scheduled / retrying  -- waiting; claimable once run_at <= now
--        | job_claim (attempt + 1, lease_token + 1)
--   running                            -- leased to one worker until lease_expires_at
--        | job_complete  -> job_archive (status completed)
--        | job_fail      -> retrying (backoff) or dead (after max_attempts)
--        | job_snooze    -> scheduled (attempt not counted)
--        | lease expiry  -> available again (rescue; the attempt counts)
--   dead                               -- dead-letter: dead_requeue / dead_purge
--   any state | job_cancel -> job_archive (status cancelled)
--
-- "scheduled" and "retrying" only say why a waiting job waits; all three
-- waiting states become claimable when run_at passes, without any update.

CREATE TABLE {{schema}}.queue (
    queue_id          integer     GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name              text        NOT NULL UNIQUE,
    -- Attempts a job gets unless it sets its own.
    max_attempts      integer     NOT NULL DEFAULT 25 CHECK (max_attempts >= 1),
    -- Visibility timeout: how long a claim holds a job unless extended.
    lease             interval    NOT NULL DEFAULT '30 seconds' CHECK (lease > interval '0'),
    -- Retry n waits retry_backoff * 2^(n-1), at most retry_backoff_max, +-10% jitter.
    retry_backoff     interval    NOT NULL DEFAULT '1 second' CHECK (retry_backoff >= interval '0'),
    retry_backoff_max interval    NOT NULL DEFAULT '1 hour' CHECK (retry_backoff_max >= interval '0'),
    -- How long archived (completed or cancelled) jobs are kept by archive_prune.
    archive_retention interval    NOT NULL DEFAULT '7 days' CHECK (archive_retention >= interval '0'),
    -- Largest payload accepted, in bytes.
    max_payload_bytes integer     NOT NULL DEFAULT 1048576 CHECK (max_payload_bytes > 0),
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_name_valid CHECK (name ~ '^[A-Za-z0-9._-]{1,200}$')
);

-- Job ids come from one sequence shared by the job and archive tables, so an
-- id names one job for its whole life. enqueue_many takes ids ahead of the
-- insert to report each input row's job, duplicates included.
CREATE SEQUENCE {{schema}}.job_id_seq;

-- Live jobs: waiting, running and dead. Completed and cancelled jobs move to
-- job_archive, so this table stays as small as the backlog. No foreign key to
-- queue: a key check on every insert would take a KEY SHARE lock on the
-- queue's row, which concurrent enqueuers turn into multixact churn.
-- Every job is updated a few times (claim, fail, snooze, extend): fillfactor
-- leaves room so the new row version usually lands on the same page, and
-- aggressive autovacuum settings keep the dead versions of a busy queue few.
CREATE TABLE {{schema}}.job (
    id               bigint      PRIMARY KEY DEFAULT nextval('{{schema}}.job_id_seq'),
    queue_id         integer     NOT NULL,
    state            text        NOT NULL,
    priority         smallint    NOT NULL DEFAULT 0,
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 1),
    -- Fencing token: incremented by every claim. Complete, fail, snooze and
    -- extend present it, so a worker whose lease was rescued (and the job
    -- claimed again) changes nothing.
    lease_token      bigint      NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL,
    enqueued_at      timestamptz NOT NULL,
    attempted_at     timestamptz,
    lease_expires_at timestamptz,
    finalized_at     timestamptz,             -- when it went dead
    worker           text,                    -- who holds it (job_claim's p_worker)
    kind             text,
    unique_key       text,
    errors           jsonb,                   -- [{attempt, at, error}], oldest first
    payload          bytea,
    CONSTRAINT job_state_valid CHECK (state IN ('available', 'scheduled', 'retrying', 'running', 'dead'))
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.05);

-- The claim path: exactly the claim order, and only waiting jobs, so the index
-- holds the backlog and nothing else. A claim reads the first entries of its
-- queue whose run_at has passed; future jobs of a higher priority are the
-- only entries it skips.
--   Limit -> LockRows -> Index Scan using job_claim (queue_id = $1, Filter: run_at <= now)
CREATE INDEX job_claim ON {{schema}}.job (queue_id, priority DESC, run_at, id)
    WHERE state IN ('available', 'scheduled', 'retrying');

-- Rescue finds expired leases through this small index (running jobs only);
-- job_claim probes it once per call.
CREATE INDEX job_lease ON {{schema}}.job (queue_id, lease_expires_at) WHERE state = 'running';

-- Dead-letter listing and stats.
CREATE INDEX job_dead ON {{schema}}.job (queue_id, id) WHERE state = 'dead';

-- Unique keys: at most one live (not dead) job per (queue, key).
CREATE UNIQUE INDEX job_unique_key ON {{schema}}.job (queue_id, unique_key)
    WHERE unique_key IS NOT NULL AND state <> 'dead';

-- Finished jobs. Insert-only until archive_prune deletes by age.
CREATE TABLE {{schema}}.job_archive (
    id           bigint      PRIMARY KEY,
    queue_id     integer     NOT NULL,
    status       text        NOT NULL CHECK (status IN ('completed', 'cancelled')),
    priority     smallint    NOT NULL,
    attempt      integer     NOT NULL,
    max_attempts integer     NOT NULL,
    enqueued_at  timestamptz NOT NULL,
    attempted_at timestamptz,
    finished_at  timestamptz NOT NULL,
    kind         text,
    unique_key   text,
    errors       jsonb,
    payload      bytea
);

-- Pruning by age and throughput (archived in the last minute) per queue.
CREATE INDEX job_archive_finished ON {{schema}}.job_archive (queue_id, finished_at);

-- ---------------------------------------------------------------------------
-- Queues
-- ---------------------------------------------------------------------------

CREATE FUNCTION {{schema}}._queue(p_name text) RETURNS {{schema}}.queue
LANGUAGE plpgsql STABLE AS $$
DECLARE
    q {{schema}}.queue;
BEGIN
    SELECT * INTO q FROM {{schema}}.queue WHERE name = p_name;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM101', format('unknown queue %s', left(quote_literal(coalesce(p_name, '')), 210)));
    END IF;
    RETURN q;
END $$;

CREATE FUNCTION {{schema}}._queue_check(q {{schema}}.queue) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF q.max_attempts IS NULL OR q.max_attempts < 1 THEN
        PERFORM {{schema}}._raise('PM105', format('max_attempts must be at least 1, got %s', coalesce(q.max_attempts::text, 'NULL')));
    END IF;
    IF q.lease IS NULL OR q.lease <= interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive');
    END IF;
    IF q.retry_backoff IS NULL OR q.retry_backoff < interval '0' OR q.retry_backoff_max IS NULL
       OR q.retry_backoff_max < interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'retry_backoff and retry_backoff_max must not be negative');
    END IF;
    IF q.archive_retention IS NULL OR q.archive_retention < interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'archive_retention must not be negative');
    END IF;
    IF q.max_payload_bytes IS NULL OR q.max_payload_bytes < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'max_payload_bytes must be at least 1');
    END IF;
END $$;

-- queue_create creates a queue. Settings left NULL take the defaults of the
-- queue table (max_attempts 25, lease 30s, retry_backoff 1s, retry_backoff_max
-- 1h, archive_retention 7 days, max_payload_bytes 1 MiB). With
-- p_if_not_exists an existing queue is returned unchanged; otherwise an
-- existing name fails with PM102.
CREATE FUNCTION {{schema}}.queue_create(p_name text, p_max_attempts integer DEFAULT NULL,
                                        p_lease interval DEFAULT NULL, p_retry_backoff interval DEFAULT NULL,
                                        p_retry_backoff_max interval DEFAULT NULL,
                                        p_archive_retention interval DEFAULT NULL,
                                        p_max_payload_bytes integer DEFAULT NULL,
                                        p_if_not_exists boolean DEFAULT false)
RETURNS {{schema}}.queue LANGUAGE plpgsql AS $$
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
    PERFORM {{schema}}._queue_check(q);
    INSERT INTO {{schema}}.queue (name, max_attempts, lease, retry_backoff, retry_backoff_max,
                                  archive_retention, max_payload_bytes)
    VALUES (q.name, q.max_attempts, q.lease, q.retry_backoff, q.retry_backoff_max,
            q.archive_retention, q.max_payload_bytes)
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
END $$;

-- queue_update changes the settings given (non-NULL) of a queue. Jobs already
-- enqueued keep their max_attempts; the other settings apply at once.
CREATE FUNCTION {{schema}}.queue_update(p_name text, p_max_attempts integer DEFAULT NULL,
                                        p_lease interval DEFAULT NULL, p_retry_backoff interval DEFAULT NULL,
                                        p_retry_backoff_max interval DEFAULT NULL,
                                        p_archive_retention interval DEFAULT NULL,
                                        p_max_payload_bytes integer DEFAULT NULL)
RETURNS {{schema}}.queue LANGUAGE plpgsql AS $$
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_name);
BEGIN
    q.max_attempts := coalesce(p_max_attempts, q.max_attempts);
    q.lease := coalesce(p_lease, q.lease);
    q.retry_backoff := coalesce(p_retry_backoff, q.retry_backoff);
    q.retry_backoff_max := coalesce(p_retry_backoff_max, q.retry_backoff_max);
    q.archive_retention := coalesce(p_archive_retention, q.archive_retention);
    q.max_payload_bytes := coalesce(p_max_payload_bytes, q.max_payload_bytes);
    PERFORM {{schema}}._queue_check(q);
    UPDATE {{schema}}.queue u
       SET max_attempts = q.max_attempts, lease = q.lease, retry_backoff = q.retry_backoff,
           retry_backoff_max = q.retry_backoff_max, archive_retention = q.archive_retention,
           max_payload_bytes = q.max_payload_bytes
     WHERE u.queue_id = q.queue_id
    RETURNING * INTO q;
    RETURN q;
END $$;

-- queue_delete removes a queue with its jobs and archive. A queue that still
-- has live jobs (waiting, running or dead) fails with PM108 unless p_force.
CREATE FUNCTION {{schema}}.queue_delete(p_name text, p_force boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_name);
BEGIN
    PERFORM 1 FROM {{schema}}.queue WHERE queue_id = q.queue_id FOR UPDATE;
    IF NOT p_force AND EXISTS (SELECT 1 FROM {{schema}}.job j WHERE j.queue_id = q.queue_id) THEN
        PERFORM {{schema}}._raise('PM108', format('queue %s still has jobs: complete, cancel or purge them, or force', quote_literal(q.name)));
    END IF;
    DELETE FROM {{schema}}.job j WHERE j.queue_id = q.queue_id;
    DELETE FROM {{schema}}.job_archive a WHERE a.queue_id = q.queue_id;
    DELETE FROM {{schema}}.queue WHERE queue_id = q.queue_id;
END $$;

CREATE FUNCTION {{schema}}.queue_list() RETURNS SETOF {{schema}}.queue
LANGUAGE sql STABLE AS $$
    SELECT * FROM {{schema}}.queue ORDER BY name
$$;

-- ---------------------------------------------------------------------------
-- Enqueue
-- ---------------------------------------------------------------------------

-- enqueue_many inserts a batch of jobs into a queue, in the caller's
-- transaction, and returns one row per input in input order: the job's id,
-- whether it was a duplicate (an existing live job with the same unique key,
-- whose id, state and run_at are returned instead), its state and run_at.
-- Arrays are parallel to p_payloads; the others may be NULL or shorter
-- (missing entries are NULL: defaults). Per job: priority (higher first,
-- -32768..32767, default 0), run_at or delay (not both; default now),
-- max_attempts (default the queue's), unique key. The queue is created with
-- default settings if it does not exist, unless p_create_queue is false
-- (then PM101). Bad input fails the whole batch, writing nothing.
CREATE FUNCTION {{schema}}.enqueue_many(p_queue text, p_payloads bytea[], p_kinds text[] DEFAULT NULL,
                                        p_priorities integer[] DEFAULT NULL,
                                        p_run_ats timestamptz[] DEFAULT NULL, p_delays interval[] DEFAULT NULL,
                                        p_max_attempts integer[] DEFAULT NULL, p_unique_keys text[] DEFAULT NULL,
                                        p_create_queue boolean DEFAULT true)
RETURNS TABLE (id bigint, duplicate boolean, state text, run_at timestamptz)
LANGUAGE plpgsql AS $$
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
           coalesce(bool_or(coalesce(u.ra, now_ts + coalesce(u.d, interval '0')) <= now_ts), false)
      INTO too_big, bad_delay, bad_att, bad_prio, both_times, has_keys, wake
      FROM unnest(p_payloads, p_delays, p_max_attempts, p_priorities, p_run_ats, p_unique_keys)
           AS u(p, d, m, pr, ra, k);
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

    IF NOT has_keys THEN
        -- Fast path: ids come from the sequence in input order (nextval is
        -- increasing within a statement), so ORDER BY id is input order.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO {{schema}}.job AS j (queue_id, state, priority, max_attempts, run_at, enqueued_at, kind, payload)
            SELECT q.queue_id,
                   CASE WHEN t.at > now_ts THEN 'scheduled' ELSE 'available' END,
                   coalesce(u.pr, 0), coalesce(u.m, q.max_attempts), t.at, now_ts, u.kd, u.p
            FROM unnest(p_payloads, p_kinds, p_priorities, p_run_ats, p_delays, p_max_attempts)
                 WITH ORDINALITY AS u(p, kd, pr, ra, d, m, ord)
            CROSS JOIN LATERAL (SELECT coalesce(u.ra, now_ts + coalesce(u.d, interval '0')) AS at) t
            ORDER BY u.ord
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
                                         unique_key, payload)
        SELECT u.id, q.queue_id,
               CASE WHEN t.at > now_ts THEN 'scheduled' ELSE 'available' END,
               coalesce(u.pr, 0), coalesce(u.m, q.max_attempts), t.at, now_ts, u.kd, u.k, u.p
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
                                                 kind, unique_key, payload)
                SELECT r.id, q.queue_id,
                       CASE WHEN t.at > now_ts THEN 'scheduled' ELSE 'available' END,
                       coalesce(p_priorities[r.ord], 0), coalesce(p_max_attempts[r.ord], q.max_attempts),
                       t.at, now_ts, p_kinds[r.ord], p_unique_keys[r.ord], p_payloads[r.ord]
                FROM (SELECT coalesce(p_run_ats[r.ord], now_ts + coalesce(p_delays[r.ord], interval '0')) AS at) t
                ON CONFLICT (queue_id, unique_key) WHERE unique_key IS NOT NULL AND state <> 'dead' DO NOTHING
                RETURNING j.id INTO found_id;
                EXIT WHEN found_id IS NOT NULL;
                SELECT x.id INTO found_id FROM {{schema}}.job x
                WHERE x.queue_id = q.queue_id AND x.unique_key = p_unique_keys[r.ord] AND x.state <> 'dead';
                EXIT WHEN found_id IS NOT NULL;
            END LOOP;
        END LOOP;

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
END $$;

-- enqueue inserts one job; see enqueue_many.
CREATE FUNCTION {{schema}}.enqueue(p_queue text, p_payload bytea, p_kind text DEFAULT NULL,
                                   p_priority integer DEFAULT 0, p_run_at timestamptz DEFAULT NULL,
                                   p_delay interval DEFAULT NULL, p_max_attempts integer DEFAULT NULL,
                                   p_unique_key text DEFAULT NULL, p_create_queue boolean DEFAULT true)
RETURNS TABLE (id bigint, duplicate boolean, state text, run_at timestamptz)
LANGUAGE sql AS $$
    SELECT * FROM {{schema}}.enqueue_many(p_queue, ARRAY[p_payload], ARRAY[p_kind], ARRAY[p_priority],
                                          ARRAY[p_run_at], ARRAY[p_delay], ARRAY[p_max_attempts],
                                          ARRAY[p_unique_key], p_create_queue)
$$;

-- ---------------------------------------------------------------------------
-- Claim, rescue
-- ---------------------------------------------------------------------------

-- _rescue makes up to p_limit jobs of a queue whose lease expired claimable
-- again (their attempt counted; a job out of attempts goes dead), recording
-- the expiry in the job's errors. Rows locked by someone else are skipped.
CREATE FUNCTION {{schema}}._rescue(p_queue_id integer, p_now timestamptz, p_limit integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    WITH r AS (
        SELECT j.id FROM {{schema}}.job j
        WHERE j.queue_id = p_queue_id AND j.state = 'running' AND j.lease_expires_at <= p_now
        ORDER BY j.lease_expires_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE {{schema}}.job j
       SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'dead' ELSE 'available' END,
           finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN p_now END,
           run_at = p_now, lease_expires_at = NULL, worker = NULL,
           errors = coalesce(j.errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempt, 'at', p_now,
               'error', format('lease expired at %s (worker %s stopped without completing the job)',
                               j.lease_expires_at, coalesce(j.worker, 'unnamed'))))
      FROM r
     WHERE j.id = r.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- job_rescue rescues up to p_limit expired leases of one queue (or of every
-- queue) and returns how many. job_claim already does this for its queue;
-- this is for maintenance and psql.
CREATE FUNCTION {{schema}}.job_rescue(p_queue text DEFAULT NULL, p_limit integer DEFAULT 1000)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    now_ts timestamptz := clock_timestamp();
    total  integer := 0;
    qid    integer;
BEGIN
    FOR qid IN SELECT q.queue_id FROM {{schema}}.queue q WHERE p_queue IS NULL OR q.name = p_queue LOOP
        total := total + {{schema}}._rescue(qid, now_ts, p_limit);
    END LOOP;
    IF p_queue IS NOT NULL AND NOT FOUND THEN
        PERFORM {{schema}}._queue(p_queue);
    END IF;
    RETURN total;
END $$;

-- job_claim leases up to p_limit claimable jobs of a queue to the caller, in
-- one statement: highest priority first, then oldest run_at, then oldest id.
-- Each claimed job is 'running', its attempt counted and its lease_token
-- incremented; the lease lasts p_lease (default the queue's) on the
-- database clock. Rows other claimers hold are skipped (SKIP LOCKED), so
-- claimers never wait on each other. Expired leases of the queue are rescued
-- first. Returns no rows when nothing is claimable.
CREATE FUNCTION {{schema}}.job_claim(p_queue text, p_limit integer DEFAULT 1, p_lease interval DEFAULT NULL,
                                     p_worker text DEFAULT NULL)
RETURNS TABLE (id bigint, queue text, kind text, payload bytea, priority integer, attempt integer,
               max_attempts integer, lease_token bigint, lease_expires_at timestamptz, run_at timestamptz,
               enqueued_at timestamptz, attempted_at timestamptz, unique_key text, errors jsonb)
LANGUAGE plpgsql
-- Pin the plan to the ordered scan of job_claim. Right after a burst of
-- enqueues the statistics still say the queue is nearly empty, and the
-- planner would pick a bitmap scan of the whole backlog plus a sort (150 ms
-- for 28k jobs instead of well under 1 ms).
SET enable_bitmapscan = off SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    q       {{schema}}.queue := {{schema}}._queue(p_queue);
    now_ts  timestamptz := clock_timestamp();
    expires timestamptz;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'limit must be at least 1');
    END IF;
    IF p_lease IS NOT NULL AND p_lease <= interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive');
    END IF;
    expires := now_ts + coalesce(p_lease, q.lease);
    -- One probe of the small job_lease index.
    IF EXISTS (SELECT 1 FROM {{schema}}.job j
               WHERE j.queue_id = q.queue_id AND j.state = 'running' AND j.lease_expires_at <= now_ts) THEN
        PERFORM {{schema}}._rescue(q.queue_id, now_ts, 1000);
    END IF;
    RETURN QUERY
    WITH c AS (
        SELECT j.id FROM {{schema}}.job j
        WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
          AND j.run_at <= now_ts
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), u AS (
        UPDATE {{schema}}.job j
           SET state = 'running', attempt = j.attempt + 1, lease_token = j.lease_token + 1,
               lease_expires_at = expires, attempted_at = now_ts, worker = p_worker
          FROM c
         WHERE j.id = c.id
        RETURNING j.id, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.lease_token,
                  j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.unique_key, j.errors
    )
    SELECT u.id, q.name, u.kind, u.payload, u.priority::integer, u.attempt, u.max_attempts, u.lease_token,
           u.lease_expires_at, u.run_at, u.enqueued_at, u.attempted_at, u.unique_key, u.errors
    FROM u
    ORDER BY u.priority DESC, u.run_at, u.id;
END $$;

-- ---------------------------------------------------------------------------
-- Finishing a claimed job. Every call presents (id, lease_token): it applies
-- only if the job is still 'running' under that token, i.e. still held by
-- that claim. A lease that expired but was not yet rescued is still held.
-- ---------------------------------------------------------------------------

-- _not_held raises the error for a job the caller does not hold: PM107 if
-- no such job exists anywhere, else PM106 naming its current state.
CREATE FUNCTION {{schema}}._not_held(p_id bigint, p_token bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    st  text;
    tok bigint;
BEGIN
    SELECT j.state, j.lease_token INTO st, tok FROM {{schema}}.job j WHERE j.id = p_id;
    IF NOT FOUND THEN
        SELECT a.status INTO st FROM {{schema}}.job_archive a WHERE a.id = p_id;
        IF NOT FOUND THEN
            PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
        END IF;
        PERFORM {{schema}}._raise('PM106', format('job %s is not held by lease %s: it is archived (%s)', p_id, p_token, st));
    END IF;
    PERFORM {{schema}}._raise('PM106', format('job %s is not held by lease %s: it is %s under lease %s',
                                              p_id, p_token, st, tok));
END $$;

-- job_complete_many archives (status completed) every job of the arrays
-- still held under its token, in one statement, and returns their ids. Jobs
-- not held are left as they are and simply not returned.
CREATE FUNCTION {{schema}}.job_complete_many(p_ids bigint[], p_tokens bigint[])
RETURNS TABLE (id bigint) LANGUAGE sql AS $$
    WITH d AS (
        DELETE FROM {{schema}}.job j
        USING unnest(p_ids, p_tokens) AS u(id, token)
        WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running'
        RETURNING j.*
    ), a AS (
        INSERT INTO {{schema}}.job_archive (id, queue_id, status, priority, attempt, max_attempts, enqueued_at,
                                            attempted_at, finished_at, kind, unique_key, errors, payload)
        SELECT d.id, d.queue_id, 'completed', d.priority, d.attempt, d.max_attempts, d.enqueued_at,
               d.attempted_at, clock_timestamp(), d.kind, d.unique_key, d.errors, d.payload
        FROM d
        RETURNING job_archive.id
    )
    SELECT a.id FROM a
$$;

-- job_complete archives one held job; PM106/PM107 if not held.
CREATE FUNCTION {{schema}}.job_complete(p_id bigint, p_lease_token bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM {{schema}}.job_complete_many(ARRAY[p_id], ARRAY[p_lease_token]);
    IF NOT FOUND THEN
        PERFORM {{schema}}._not_held(p_id, p_lease_token);
    END IF;
END $$;

-- _backoff: retry_backoff * 2^(attempt-1), capped at retry_backoff_max, then
-- +-10% jitter so that jobs failing together do not retry together.
CREATE FUNCTION {{schema}}._backoff(p_base interval, p_max interval, p_attempt integer)
RETURNS interval LANGUAGE sql VOLATILE AS $$
    SELECT make_interval(secs => least(extract(epoch FROM p_max)::double precision,
                                       extract(epoch FROM p_base)::double precision
                                           * power(2::double precision, least(greatest(p_attempt - 1, 0), 60)))
                                 * (0.9 + 0.2 * random()))
$$;

-- job_fail records p_error for the held attempt and either schedules a
-- retry ('retrying', after p_retry_in or else the queue's backoff) or, when
-- the job is out of attempts or p_dead is set, moves it to the dead-letter
-- state ('dead'). Returns the job's new state and run_at.
CREATE FUNCTION {{schema}}.job_fail(p_id bigint, p_lease_token bigint, p_error text,
                                    p_retry_in interval DEFAULT NULL, p_dead boolean DEFAULT false)
RETURNS TABLE (state text, run_at timestamptz)
LANGUAGE plpgsql AS $$
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
    SELECT * INTO j FROM {{schema}}.job x WHERE x.id = p_id AND x.lease_token = p_lease_token AND x.state = 'running'
    FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM {{schema}}._not_held(p_id, p_lease_token);
    END IF;
    SELECT * INTO q FROM {{schema}}.queue x WHERE x.queue_id = j.queue_id;
    dead := coalesce(p_dead, false) OR j.attempt >= j.max_attempts;
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
END $$;

-- job_snooze puts a held job back to wait p_delay (0: claimable at once, a
-- release) without counting the attempt. Returns the new run_at.
CREATE FUNCTION {{schema}}.job_snooze(p_id bigint, p_lease_token bigint, p_delay interval DEFAULT '0')
RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
    now_ts timestamptz := clock_timestamp();
    v_run  timestamptz;
    v_q    integer;
BEGIN
    IF p_delay IS NULL OR p_delay < interval '0' THEN
        PERFORM {{schema}}._raise('PM104', 'snooze delay must not be negative');
    END IF;
    UPDATE {{schema}}.job j
       SET state = CASE WHEN p_delay > interval '0' THEN 'scheduled' ELSE 'available' END,
           attempt = j.attempt - 1, run_at = now_ts + p_delay, lease_expires_at = NULL, worker = NULL
     WHERE j.id = p_id AND j.lease_token = p_lease_token AND j.state = 'running'
    RETURNING j.run_at, j.queue_id INTO v_run, v_q;
    IF NOT FOUND THEN
        PERFORM {{schema}}._not_held(p_id, p_lease_token);
    END IF;
    IF p_delay = interval '0' THEN
        PERFORM pg_notify({{schema_lit}} || '_log', 'queue:' || (SELECT q.name FROM {{schema}}.queue q WHERE q.queue_id = v_q));
    END IF;
    RETURN v_run;
END $$;

-- job_extend_many pushes the lease of every held job of the arrays to now +
-- p_lease (default its queue's lease) and returns those extended with their
-- new expiry; jobs not held are not returned. The worker pool's heartbeat.
CREATE FUNCTION {{schema}}.job_extend_many(p_ids bigint[], p_tokens bigint[], p_lease interval DEFAULT NULL)
RETURNS TABLE (id bigint, lease_expires_at timestamptz) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    now_ts timestamptz := clock_timestamp();
BEGIN
    IF p_lease IS NOT NULL AND p_lease <= interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive');
    END IF;
    RETURN QUERY
    UPDATE {{schema}}.job j
       SET lease_expires_at = now_ts + coalesce(p_lease, q.lease)
      FROM unnest(p_ids, p_tokens) AS u(id, token), {{schema}}.queue q
     WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running' AND q.queue_id = j.queue_id
    RETURNING j.id, j.lease_expires_at;
END $$;

-- job_extend extends one held job's lease; PM106/PM107 if not held.
CREATE FUNCTION {{schema}}.job_extend(p_id bigint, p_lease_token bigint, p_lease interval DEFAULT NULL)
RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
    expires timestamptz;
BEGIN
    SELECT e.lease_expires_at INTO expires FROM {{schema}}.job_extend_many(ARRAY[p_id], ARRAY[p_lease_token], p_lease) e;
    IF NOT FOUND THEN
        PERFORM {{schema}}._not_held(p_id, p_lease_token);
    END IF;
    RETURN expires;
END $$;

-- job_cancel archives a job (status cancelled) whatever its state: waiting,
-- running (the worker's completion is then rejected) or dead. Returns false
-- if the job had already finished (is archived); PM107 if it never existed.
CREATE FUNCTION {{schema}}.job_cancel(p_id bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    WITH d AS (
        DELETE FROM {{schema}}.job j WHERE j.id = p_id RETURNING j.*
    )
    INSERT INTO {{schema}}.job_archive (id, queue_id, status, priority, attempt, max_attempts, enqueued_at,
                                        attempted_at, finished_at, kind, unique_key, errors, payload)
    SELECT d.id, d.queue_id, 'cancelled', d.priority, d.attempt, d.max_attempts, d.enqueued_at,
           d.attempted_at, clock_timestamp(), d.kind, d.unique_key, d.errors, d.payload
    FROM d;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM {{schema}}.job_archive a WHERE a.id = p_id) THEN
        RETURN false;
    END IF;
    PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
    RETURN false;
END $$;

-- ---------------------------------------------------------------------------
-- Inspection, dead-letter tools
-- ---------------------------------------------------------------------------

-- job_get returns one job wherever it is: live (state available, scheduled,
-- retrying, running or dead) or archived (state completed or cancelled).
-- PM107 if there is no such job.
CREATE FUNCTION {{schema}}.job_get(p_id bigint)
RETURNS TABLE (id bigint, queue text, state text, kind text, payload bytea, priority integer, attempt integer,
               max_attempts integer, lease_token bigint, lease_expires_at timestamptz, run_at timestamptz,
               enqueued_at timestamptz, attempted_at timestamptz, finished_at timestamptz, worker text,
               unique_key text, errors jsonb)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT j.id, q.name, j.state, j.kind, j.payload, j.priority::integer, j.attempt, j.max_attempts, j.lease_token,
           j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.finalized_at, j.worker, j.unique_key, j.errors
    FROM {{schema}}.job j JOIN {{schema}}.queue q ON q.queue_id = j.queue_id
    WHERE j.id = p_id
    UNION ALL
    SELECT a.id, q.name, a.status, a.kind, a.payload, a.priority::integer, a.attempt, a.max_attempts, NULL::bigint,
           NULL::timestamptz, NULL::timestamptz, a.enqueued_at, a.attempted_at, a.finished_at, NULL::text,
           a.unique_key, a.errors
    FROM {{schema}}.job_archive a JOIN {{schema}}.queue q ON q.queue_id = a.queue_id
    WHERE a.id = p_id;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
    END IF;
END $$;

-- dead_list pages through a queue's dead jobs by id (after p_after_id),
-- optionally only those of one kind.
CREATE FUNCTION {{schema}}.dead_list(p_queue text, p_kind text DEFAULT NULL, p_limit integer DEFAULT 100,
                                     p_after_id bigint DEFAULT 0)
RETURNS TABLE (id bigint, queue text, state text, kind text, payload bytea, priority integer, attempt integer,
               max_attempts integer, lease_token bigint, lease_expires_at timestamptz, run_at timestamptz,
               enqueued_at timestamptz, attempted_at timestamptz, finished_at timestamptz, worker text,
               unique_key text, errors jsonb)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_queue);
BEGIN
    RETURN QUERY
    SELECT j.id, q.name, j.state, j.kind, j.payload, j.priority::integer, j.attempt, j.max_attempts, j.lease_token,
           j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.finalized_at, j.worker, j.unique_key, j.errors
    FROM {{schema}}.job j
    WHERE j.queue_id = q.queue_id AND j.state = 'dead' AND j.id > coalesce(p_after_id, 0)
      AND (p_kind IS NULL OR j.kind = p_kind)
    ORDER BY j.id
    LIMIT greatest(coalesce(p_limit, 100), 0);
END $$;

-- dead_requeue makes dead jobs of a queue available again with their
-- attempts reset (their error history is kept): the jobs in p_ids, or all
-- dead jobs (of p_kind, if given) when p_ids is NULL, at most p_limit per
-- call. A dead job whose unique key is now taken by a live job stays dead.
-- Returns how many were requeued.
CREATE FUNCTION {{schema}}.dead_requeue(p_queue text, p_ids bigint[] DEFAULT NULL, p_kind text DEFAULT NULL,
                                        p_limit integer DEFAULT 10000)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    q      {{schema}}.queue := {{schema}}._queue(p_queue);
    now_ts timestamptz := clock_timestamp();
    n      integer;
BEGIN
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
END $$;

-- dead_purge deletes dead jobs of a queue for good: those in p_ids, or all
-- (of p_kind; dead for longer than p_older_than) when p_ids is NULL, at most
-- p_limit per call so it never holds many locks. Returns how many.
CREATE FUNCTION {{schema}}.dead_purge(p_queue text, p_ids bigint[] DEFAULT NULL, p_kind text DEFAULT NULL,
                                      p_older_than interval DEFAULT NULL, p_limit integer DEFAULT 10000)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    q {{schema}}.queue := {{schema}}._queue(p_queue);
    n integer;
BEGIN
    DELETE FROM {{schema}}.job j
    WHERE j.id IN (
        SELECT x.id FROM {{schema}}.job x
        WHERE x.queue_id = q.queue_id AND x.state = 'dead'
          AND (p_ids IS NULL OR x.id = ANY (p_ids))
          AND (p_kind IS NULL OR x.kind = p_kind)
          AND (p_older_than IS NULL OR x.finalized_at < clock_timestamp() - p_older_than)
        ORDER BY x.id
        LIMIT greatest(coalesce(p_limit, 10000), 0)
        FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- archive_prune deletes at most p_limit archived jobs finished longer ago
-- than p_older_than (default: each queue's archive_retention), of one queue
-- or of all, and returns how many. Call it until it returns less than
-- p_limit: each call is one short transaction, so pruning never holds long
-- locks or a long snapshot.
--   Index Scan using job_archive_finished (queue_id = $1 AND finished_at < $2)
CREATE FUNCTION {{schema}}.archive_prune(p_queue text DEFAULT NULL, p_older_than interval DEFAULT NULL,
                                         p_limit integer DEFAULT 1000)
RETURNS integer LANGUAGE plpgsql AS $$
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
        DELETE FROM {{schema}}.job_archive a
        WHERE a.ctid = ANY (ARRAY(
            SELECT x.ctid FROM {{schema}}.job_archive x
            WHERE x.queue_id = q.queue_id AND x.finished_at < now_ts - coalesce(p_older_than, q.archive_retention)
            ORDER BY x.finished_at
            LIMIT left_n));
        GET DIAGNOSTICS n = ROW_COUNT;
        total := total + n;
        left_n := left_n - n;
    END LOOP;
    RETURN total;
END $$;

-- queue_stats: per queue (one or all) the live jobs by state, the archive
-- size, the age of the oldest claimable job and the jobs archived in the
-- last minute (throughput). Each count reads one partial index of its state,
-- so the cost follows the size of that state, never of the whole table;
-- available/scheduled/retrying share one scan of the backlog (job_claim).
CREATE FUNCTION {{schema}}.queue_stats(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, available bigint, scheduled bigint, running bigint, retrying bigint, dead bigint,
               archived bigint, oldest_available_seconds double precision, archived_last_minute bigint)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    now_ts timestamptz := clock_timestamp();
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM {{schema}}._queue(p_queue);
    END IF;
    RETURN QUERY
    SELECT q.name, w.available, w.scheduled, r.running, w.retrying, d.dead, a.archived,
           coalesce(extract(epoch FROM now_ts - w.oldest)::double precision, 0), m.recent
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
        SELECT count(*) AS archived FROM {{schema}}.job_archive x WHERE x.queue_id = q.queue_id) a
    CROSS JOIN LATERAL (
        SELECT count(*) AS recent FROM {{schema}}.job_archive x
        WHERE x.queue_id = q.queue_id AND x.finished_at > now_ts - interval '1 minute') m
    WHERE p_queue IS NULL OR q.name = p_queue
    ORDER BY q.name;
END $$;
