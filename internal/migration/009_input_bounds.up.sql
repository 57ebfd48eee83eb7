-- pgmsg 009: input bounds (security issue 14).
--
-- Templated like 001.
--
-- Timestamps a client gives (record timestamps, job run_at, delays that
-- set a run_at, token expiry) must fall in the UTC years 0001 to 9999:
-- PostgreSQL stores years up to 294276, but JSON (RFC 3339) and most
-- languages' time types cannot represent them, so such a value was stored
-- and then broke every reader. A job's kind is at most 200 bytes and its
-- unique_key at most 1000 (an index row holds the key; past about 2,700
-- bytes PostgreSQL refused the insert with 54000). All fail with PM004
-- (PM104 for a delay), nothing written.

-- _time_ok: NULL or within the UTC years 0001..9999.
CREATE FUNCTION {{schema}}._time_ok(p_ts timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_ts IS NULL OR (p_ts >= '0001-01-01 00:00:00+00'::timestamptz
                            AND p_ts < '10000-01-01 00:00:00+00'::timestamptz)
$$;

-- _delay_too_long: p_now + p_delay is after the UTC year 9999. Extreme
-- delays are caught before the addition, which would overflow (22008).
CREATE FUNCTION {{schema}}._delay_too_long(p_now timestamptz, p_delay interval) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_delay IS NULL OR p_delay < interval '0' THEN false
                WHEN p_delay > interval '10000 years' THEN true
                ELSE NOT {{schema}}._time_ok(p_now + p_delay) END
$$;

-- publish: as in 001, plus the timestamps' range (PM004).
CREATE OR REPLACE FUNCTION {{schema}}.publish(p_topic text, p_values bytea[], p_keys bytea[] DEFAULT NULL,
                                   p_headers jsonb[] DEFAULT NULL, p_timestamps timestamptz[] DEFAULT NULL,
                                   p_partition integer DEFAULT NULL, p_notify boolean DEFAULT true)
RETURNS TABLE (partition integer, base_offset bigint, record_count integer, "timestamp" timestamptz,
               segments_low boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    t      {{schema}}.topic;
    n      integer := coalesce(cardinality(p_values), 0);
    now_ts timestamptz := clock_timestamp();
    spread integer;
    part   record;
BEGIN
    -- The topic is read here rather than through _topic() (which raises
    -- PM001 for an unknown one): every call of a function with a pinned
    -- search_path (012) saves and restores it, and publish is hot.
    SELECT * INTO t FROM {{schema}}.topic tt WHERE tt.name = p_topic;
    IF NOT FOUND THEN
        PERFORM {{schema}}._topic(p_topic);
    END IF;
    IF n = 0 THEN
        PERFORM {{schema}}._raise('PM010', 'empty batch: publish needs at least one record');
    END IF;
    IF coalesce(cardinality(p_keys), 0) > n OR coalesce(cardinality(p_headers), 0) > n
       OR coalesce(cardinality(p_timestamps), 0) > n THEN
        PERFORM {{schema}}._raise('PM004', 'keys, headers and timestamps must not be longer than values');
    END IF;
    IF p_timestamps IS NOT NULL
       AND EXISTS (SELECT 1 FROM unnest(p_timestamps) AS u(ts) WHERE NOT {{schema}}._time_ok(u.ts)) THEN
        PERFORM {{schema}}._raise('PM004', 'record timestamps must be in the UTC years 0001 to 9999');
    END IF;
    IF p_partition IS NOT NULL AND (p_partition < 0 OR p_partition >= t.partitions) THEN
        PERFORM {{schema}}._raise('PM005', format('partition %s out of range: topic %s has %s partitions',
                                                  p_partition, quote_literal(t.name), t.partitions));
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_values, p_keys, p_headers) AS u(v, k, h)
               WHERE coalesce(octet_length(u.v), 0) + coalesce(octet_length(u.k), 0)
                     + coalesce(octet_length(u.h::text), 0) > t.max_record_bytes) THEN
        PERFORM {{schema}}._raise('PM006', format('record larger than the topic''s max_record_bytes (%s)', t.max_record_bytes));
    END IF;

    IF p_partition IS NOT NULL THEN
        RETURN QUERY SELECT p_partition, a.base, n, now_ts, a.segments_low
                     FROM {{schema}}._append(t, p_partition, p_values, p_keys, p_headers, p_timestamps, now_ts) a;
    ELSE
        spread := floor(random() * t.partitions)::integer;
        FOR part IN
            SELECT CASE WHEN u.k IS NULL THEN spread ELSE {{schema}}.partition_for_key(u.k, t.partitions) END AS p,
                   array_agg(u.v ORDER BY u.ord) AS vs, array_agg(u.k ORDER BY u.ord) AS ks,
                   array_agg(u.h ORDER BY u.ord) AS hs, array_agg(u.ts ORDER BY u.ord) AS tss
            FROM unnest(p_values, p_keys, p_headers, p_timestamps) WITH ORDINALITY AS u(v, k, h, ts, ord)
            GROUP BY 1 ORDER BY 1
        LOOP
            RETURN QUERY SELECT part.p, a.base, cardinality(part.vs), now_ts, a.segments_low
                         FROM {{schema}}._append(t, part.p, part.vs, part.ks, part.hs, part.tss, now_ts) a;
        END LOOP;
    END IF;
    -- A wake-up for idle consumers; polling stays the correctness path.
    -- PostgreSQL serialises the commits of all transactions that notified
    -- (one cluster-wide lock held through the commit's WAL flush), so the
    -- Go client passes p_notify => false and notifies after commit,
    -- coalesced, outside the publishing transaction.
    IF p_notify THEN
        PERFORM pg_notify({{schema_lit}} || '_log', t.name);
    END IF;
END $$;

-- enqueue_many: as in 005, plus the range of run_at and of the run_at a
-- delay gives, and the length of kind and unique_key.
CREATE OR REPLACE FUNCTION {{schema}}.enqueue_many(p_queue text, p_payloads bytea[], p_kinds text[] DEFAULT NULL,
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

-- job_snooze: as in 002, plus a delay that would run the job after 9999 (PM104).
CREATE OR REPLACE FUNCTION {{schema}}.job_snooze(p_id bigint, p_lease_token bigint, p_delay interval DEFAULT '0')
RETURNS timestamptz LANGUAGE plpgsql AS $$
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
    IF p_delay = interval '0' THEN
        PERFORM pg_notify({{schema_lit}} || '_log', 'queue:' || (SELECT q.name FROM {{schema}}.queue q WHERE q.queue_id = v_q));
    END IF;
    RETURN v_run;
END $$;

-- job_fail: as in 002, plus a retry delay that would run the job after 9999 (PM104).
CREATE OR REPLACE FUNCTION {{schema}}.job_fail(p_id bigint, p_lease_token bigint, p_error text,
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

-- token_create: as in 003, plus the range of the expiry (PM004).
CREATE OR REPLACE FUNCTION {{schema}}.token_create(p_name text, p_token_hash bytea, p_prefix text, p_scopes text[],
                                        p_expires_at timestamptz DEFAULT NULL)
RETURNS {{schema}}.token LANGUAGE plpgsql AS $$
DECLARE
    tok {{schema}}.token;
BEGIN
    PERFORM {{schema}}._check_name('token', p_name);
    PERFORM {{schema}}._check_scopes(p_scopes);
    IF p_token_hash IS NULL OR octet_length(p_token_hash) <> 32 THEN
        PERFORM {{schema}}._raise('PM004', 'token hash must be 32 bytes (sha256)');
    END IF;
    IF p_expires_at IS NOT NULL AND p_expires_at <= now() THEN
        PERFORM {{schema}}._raise('PM004', 'token expiry must be in the future');
    END IF;
    IF NOT {{schema}}._time_ok(p_expires_at) THEN
        PERFORM {{schema}}._raise('PM004', 'token expiry must be in the UTC years 0001 to 9999');
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext({{schema_lit}} || '.token.' || p_name));
    IF EXISTS (SELECT 1 FROM {{schema}}.token t WHERE t.name = p_name AND t.revoked_at IS NULL) THEN
        PERFORM {{schema}}._raise('PMA03', format('token %s already exists', quote_literal(p_name)));
    END IF;
    INSERT INTO {{schema}}.token (name, token_hash, prefix, scopes, expires_at)
    VALUES (p_name, p_token_hash, coalesce(p_prefix, ''), p_scopes, p_expires_at)
    RETURNING * INTO tok;
    RETURN tok;
END $$;
