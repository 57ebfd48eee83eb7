-- pgmsg 005 down: the functions of 001 and 002 as they were, then the
-- columns go (records keep their data; byte positions are dropped).

DROP FUNCTION IF EXISTS {{schema}}._queue_depth_check({{schema}}.queue, integer);
DROP FUNCTION IF EXISTS {{schema}}.queue_create(text, integer, interval, interval, interval, interval, integer, boolean, bigint, interval);
DROP FUNCTION IF EXISTS {{schema}}.queue_update(text, integer, interval, interval, interval, interval, integer, bigint, interval);


CREATE OR REPLACE FUNCTION {{schema}}._append(t {{schema}}.topic, p_partition integer, p_values bytea[], p_keys bytea[],
                                   p_headers jsonb[], p_timestamps timestamptz[], p_now timestamptz,
                                   OUT base bigint, OUT segments_low boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    n       integer := cardinality(p_values);
    seg_end bigint;
BEGIN
    IF t.config ? 'max_lag_records' THEN
        PERFORM {{schema}}._backpressure(t, p_partition, n);
    END IF;
    UPDATE {{schema}}.topic_partition c
       SET next_offset = c.next_offset + n
     WHERE c.topic_id = t.topic_id AND c.partition = p_partition
    RETURNING c.next_offset - n, c.segment_end INTO base, seg_end;
    IF base + n > seg_end THEN
        -- Fallback: the batch needs a segment that does not exist yet, so
        -- create it here. Normally segments are created ahead, outside
        -- publishing transactions (segment_ensure, called by the client
        -- after a publish that reports segments_low, and by maintenance):
        -- creating them here takes the topic table's SHARE UPDATE EXCLUSIVE
        -- lock while holding counter rows, which can deadlock with another
        -- multi-partition publish doing the same.
        PERFORM {{schema}}._segment_ensure(t.topic_id, p_partition, seg_end, t.segment_records, base + n);
    END IF;
    segments_low := base + n > seg_end - 2 * t.segment_records;
    INSERT INTO {{schema}}.record (topic_id, partition, "offset", "timestamp", key, value, headers)
    SELECT t.topic_id, p_partition, base + u.ord - 1, coalesce(u.ts, p_now), u.k, u.v, u.h
    FROM unnest(p_values, p_keys, p_headers, p_timestamps) WITH ORDINALITY AS u(v, k, h, ts, ord);
END $$;

CREATE OR REPLACE FUNCTION {{schema}}.topic_create(p_name text, p_partitions integer DEFAULT 1, p_config jsonb DEFAULT '{}')
RETURNS {{schema}}.topic LANGUAGE plpgsql AS $$
DECLARE
    t {{schema}}.topic;
    seg bigint;
    maxb integer;
BEGIN
    PERFORM {{schema}}._check_name('topic', p_name);
    IF p_partitions IS NULL OR p_partitions < 1 OR p_partitions > 1024 THEN
        PERFORM {{schema}}._raise('PM004', format('partitions must be between 1 and 1024, got %s', coalesce(p_partitions::text, 'NULL')));
    END IF;
    IF p_config IS NULL OR jsonb_typeof(p_config) <> 'object' THEN
        PERFORM {{schema}}._raise('PM004', 'topic config must be a JSON object');
    END IF;
    BEGIN
        seg  := coalesce((p_config->>'segment_records')::bigint, 1048576);
        maxb := coalesce((p_config->>'max_record_bytes')::integer, 1048576);
    EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
        PERFORM {{schema}}._raise('PM004', 'segment_records and max_record_bytes must be integers');
    END;
    IF seg < 16 OR maxb < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'segment_records must be >= 16 and max_record_bytes >= 1');
    END IF;
    -- Serialise creators of the same name so the loser gets PM002, not a
    -- unique violation half-way through DDL.
    PERFORM pg_advisory_xact_lock(hashtext({{schema_lit}} || '.topic.' || p_name));
    IF EXISTS (SELECT 1 FROM {{schema}}.topic WHERE name = p_name) THEN
        PERFORM {{schema}}._raise('PM002', format('topic %s already exists', quote_literal(p_name)));
    END IF;
    INSERT INTO {{schema}}.topic (name, partitions, segment_records, max_record_bytes, config)
    VALUES (p_name, p_partitions, seg, maxb, p_config - 'segment_records' - 'max_record_bytes')
    RETURNING * INTO t;
    EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.record FOR VALUES IN (%s) PARTITION BY RANGE (partition, "offset")',
                   {{schema_lit}}, 'record_' || t.topic_id, {{schema_lit}}, t.topic_id);
    PERFORM {{schema}}._partitions_add(t, 0, p_partitions);
    RETURN t;
END $$;

CREATE OR REPLACE FUNCTION {{schema}}.topic_configure(p_name text, p_settings jsonb)
RETURNS {{schema}}.topic LANGUAGE plpgsql AS $$
DECLARE
    t    {{schema}}.topic := {{schema}}._topic(p_name);
    seg  bigint;
    maxb integer;
BEGIN
    IF p_settings IS NULL OR jsonb_typeof(p_settings) <> 'object' THEN
        PERFORM {{schema}}._raise('PM004', 'topic settings must be a JSON object');
    END IF;
    BEGIN
        seg  := coalesce((p_settings->>'segment_records')::bigint, t.segment_records);
        maxb := coalesce((p_settings->>'max_record_bytes')::integer, t.max_record_bytes);
    EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
        PERFORM {{schema}}._raise('PM004', 'segment_records and max_record_bytes must be integers');
    END;
    IF seg < 16 OR maxb < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'segment_records must be >= 16 and max_record_bytes >= 1');
    END IF;
    UPDATE {{schema}}.topic SET
        segment_records = seg, max_record_bytes = maxb,
        config = jsonb_strip_nulls(config || (p_settings - 'segment_records' - 'max_record_bytes'))
    WHERE topic_id = t.topic_id
    RETURNING * INTO t;
    RETURN t;
END $$;

CREATE OR REPLACE FUNCTION {{schema}}._queue_check(q {{schema}}.queue) RETURNS void
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

DROP FUNCTION IF EXISTS {{schema}}._check_topic_settings(jsonb);
DROP FUNCTION IF EXISTS {{schema}}._backpressure_bytes({{schema}}.topic, integer, bigint, bigint, bigint);
ALTER TABLE {{schema}}.queue DROP COLUMN IF EXISTS max_depth, DROP COLUMN IF EXISTS backpressure_timeout;
ALTER TABLE {{schema}}.record DROP COLUMN IF EXISTS byte_position;
ALTER TABLE {{schema}}.topic_partition DROP COLUMN IF EXISTS next_byte;
