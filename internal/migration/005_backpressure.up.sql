-- pgmsg 005: backpressure by bytes for topics and by depth for queues.
--
-- Templated like 001. Functions of earlier migrations that change are
-- replaced here (CREATE OR REPLACE, same signatures, or DROP + CREATE where
-- a signature grows); their earlier files stay as they were applied.
--
-- Adding the columns is catalog-only (no table rewrite: nullable, or a
-- constant default), but ALTER TABLE takes an ACCESS EXCLUSIVE lock on the
-- record table and its segments for that moment: publishers wait for it.

-- ---------------------------------------------------------------------------
-- Topics: max_lag_bytes
-- ---------------------------------------------------------------------------

-- next_byte is the partition's byte counter, the byte twin of next_offset:
-- the key + value bytes appended so far. byte_position is the counter's
-- value just before a record was appended (its first byte). Both are kept
-- only while the topic has max_lag_bytes: other topics never compute them,
-- and a NULL byte_position costs no storage (record rows already carry a
-- null bitmap of one byte, and eight columns still fit in it).
ALTER TABLE {{schema}}.topic_partition ADD COLUMN next_byte bigint NOT NULL DEFAULT 0;
ALTER TABLE {{schema}}.record ADD COLUMN byte_position bigint;

-- _backpressure_bytes raises PM014 when the partition, with the batch just
-- counted (p_bytes, ending at p_byte_end, first offset p_base), would hold
-- more than max_lag_bytes that its slowest group has not committed. The
-- caller holds the partition's counter row, so the measure is exact. The
-- slowest group's cursor is a read of the group cursors (as for
-- max_lag_records); its byte position is one primary-key probe of the
-- record table that stops at the first segment (measured with 200,000
-- records in 2 segments and a group 187,655 behind):
--   Limit -> Append -> Index Scan using record_1_p0_0_pkey (actual rows=1)
--                      Index Scan using record_1_p0_100000_pkey (never executed)
-- whatever the lag: no scan of the unread range. A range emptied by
-- compaction counts as caught up; records published before the topic had
-- max_lag_bytes have no byte position and are not measured (no refusal).
CREATE FUNCTION {{schema}}._backpressure_bytes(t {{schema}}.topic, p_partition integer, p_base bigint,
                                               p_byte_end bigint, p_bytes bigint)
RETURNS void LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    max_lag   bigint := {{schema}}._setting(t.config, 'max_lag_bytes');
    slowest   bigint;
    grp       text;
    from_byte bigint;
    behind    bigint := p_bytes;
BEGIN
    IF max_lag IS NULL THEN
        RETURN;
    END IF;
    SELECT c.next_offset, c.group_name INTO slowest, grp FROM {{schema}}.group_cursor c
     WHERE c.topic_id = t.topic_id AND c.partition = p_partition
     ORDER BY c.next_offset LIMIT 1;
    IF slowest IS NULL THEN
        RETURN;
    END IF;
    IF slowest < p_base THEN
        SELECT r.byte_position INTO from_byte FROM {{schema}}.record r
         WHERE r.topic_id = t.topic_id AND r.partition = p_partition
           AND r."offset" >= slowest AND r."offset" < p_base
         ORDER BY r."offset" LIMIT 1;
        IF FOUND THEN
            IF from_byte IS NULL THEN
                RETURN;
            END IF;
            behind := p_byte_end - from_byte;
        END IF;
    END IF;
    IF behind > max_lag THEN
        PERFORM {{schema}}._raise('PM014', format(
            'backpressure: topic %s partition %s would be %s bytes ahead of group %s (max_lag_bytes %s)',
            quote_literal(t.name), p_partition, behind, quote_literal(grp), max_lag));
    END IF;
END $$;

-- _append: as in 001, plus the byte accounting of topics with
-- max_lag_bytes: the batch's bytes are added to the counter in the same
-- UPDATE that reserves its offsets, checked under that row lock, and each
-- record is stored with its byte position. Topics without the setting run
-- exactly the statements of 001.
CREATE OR REPLACE FUNCTION {{schema}}._append(t {{schema}}.topic, p_partition integer, p_values bytea[], p_keys bytea[],
                                              p_headers jsonb[], p_timestamps timestamptz[], p_now timestamptz,
                                              OUT base bigint, OUT segments_low boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    n        integer := cardinality(p_values);
    seg_end  bigint;
    n_bytes  bigint;
    byte_end bigint;
BEGIN
    IF t.config ? 'max_lag_records' THEN
        PERFORM {{schema}}._backpressure(t, p_partition, n);
    END IF;
    IF t.config ? 'max_lag_bytes' THEN
        SELECT coalesce(sum(coalesce(octet_length(u.v), 0) + coalesce(octet_length(u.k), 0)), 0) INTO n_bytes
        FROM unnest(p_values, p_keys) AS u(v, k);
        UPDATE {{schema}}.topic_partition c
           SET next_offset = c.next_offset + n, next_byte = c.next_byte + n_bytes
         WHERE c.topic_id = t.topic_id AND c.partition = p_partition
        RETURNING c.next_offset - n, c.segment_end, c.next_byte INTO base, seg_end, byte_end;
        PERFORM {{schema}}._backpressure_bytes(t, p_partition, base, byte_end, n_bytes);
    ELSE
        UPDATE {{schema}}.topic_partition c
           SET next_offset = c.next_offset + n
         WHERE c.topic_id = t.topic_id AND c.partition = p_partition
        RETURNING c.next_offset - n, c.segment_end INTO base, seg_end;
    END IF;
    IF base + n > seg_end THEN
        -- Fallback: see 001 (segments are normally created ahead).
        PERFORM {{schema}}._segment_ensure(t.topic_id, p_partition, seg_end, t.segment_records, base + n);
    END IF;
    segments_low := base + n > seg_end - 2 * t.segment_records;
    IF n_bytes IS NULL THEN
        INSERT INTO {{schema}}.record (topic_id, partition, "offset", "timestamp", key, value, headers)
        SELECT t.topic_id, p_partition, base + u.ord - 1, coalesce(u.ts, p_now), u.k, u.v, u.h
        FROM unnest(p_values, p_keys, p_headers, p_timestamps) WITH ORDINALITY AS u(v, k, h, ts, ord);
    ELSE
        INSERT INTO {{schema}}.record (topic_id, partition, "offset", "timestamp", key, value, headers, byte_position)
        SELECT t.topic_id, p_partition, base + u.ord - 1, coalesce(u.ts, p_now), u.k, u.v, u.h,
               byte_end - n_bytes + coalesce(sum(coalesce(octet_length(u.v), 0) + coalesce(octet_length(u.k), 0))
                                             OVER (ORDER BY u.ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
        FROM unnest(p_values, p_keys, p_headers, p_timestamps) WITH ORDINALITY AS u(v, k, h, ts, ord);
    END IF;
END $$;

-- _check_topic_settings rejects (PM004) backpressure settings that are not
-- integers in range, at the time they are set: max_lag_records and
-- max_lag_bytes at least 1, backpressure_timeout_ms at least 0. JSON null
-- (removal) is accepted.
CREATE FUNCTION {{schema}}._check_topic_settings(p_config jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    k  text;
    v  bigint;
    lo bigint;
BEGIN
    FOREACH k IN ARRAY ARRAY['max_lag_records', 'max_lag_bytes', 'backpressure_timeout_ms'] LOOP
        CONTINUE WHEN NOT p_config ? k OR jsonb_typeof(p_config->k) = 'null';
        lo := CASE WHEN k = 'backpressure_timeout_ms' THEN 0 ELSE 1 END;
        BEGIN
            v := (p_config->>k)::bigint;
        EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
            v := NULL;
        END;
        IF v IS NULL OR v < lo THEN
            PERFORM {{schema}}._raise('PM004', format('%s must be an integer of at least %s, got %s',
                                                      k, lo, left(p_config->>k, 60)));
        END IF;
    END LOOP;
END $$;

-- topic_create and topic_configure: as in 001, plus _check_topic_settings.
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
    PERFORM {{schema}}._check_topic_settings(p_config);
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
    PERFORM {{schema}}._check_topic_settings(p_settings);
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
-- ---------------------------------------------------------------------------
-- Queues: max_depth
-- ---------------------------------------------------------------------------

-- max_depth: the most live jobs (waiting or running; dead jobs do not
-- count) the queue holds; NULL: no limit. backpressure_timeout: how long
-- the Go client's Enqueue keeps retrying a full queue (0: refuse at once).
ALTER TABLE {{schema}}.queue
    ADD COLUMN max_depth bigint CHECK (max_depth >= 1),
    ADD COLUMN backpressure_timeout interval NOT NULL DEFAULT '5 seconds'
        CHECK (backpressure_timeout >= interval '0');

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
    IF q.max_depth < 1 THEN
        PERFORM {{schema}}._raise('PM004', format('max_depth must be at least 1 (0 or NULL: no limit), got %s', q.max_depth));
    END IF;
    IF q.backpressure_timeout IS NULL OR q.backpressure_timeout < interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'backpressure_timeout must not be negative');
    END IF;
END $$;

-- queue_create and queue_update gain p_max_depth (0 or NULL: no limit on
-- create; on update NULL leaves it, 0 removes it) and
-- p_backpressure_timeout (default 5 seconds; NULL leaves it on update).
DROP FUNCTION {{schema}}.queue_create(text, integer, interval, interval, interval, interval, integer, boolean);
DROP FUNCTION {{schema}}.queue_update(text, integer, interval, interval, interval, interval, integer);

-- queue_create creates a queue. Settings left NULL take the defaults of the
-- queue table (max_attempts 25, lease 30s, retry_backoff 1s, retry_backoff_max
-- 1h, archive_retention 7 days, max_payload_bytes 1 MiB, no max_depth,
-- backpressure_timeout 5s). With p_if_not_exists an existing queue is
-- returned unchanged; otherwise an existing name fails with PM102.
CREATE FUNCTION {{schema}}.queue_create(p_name text, p_max_attempts integer DEFAULT NULL,
                                        p_lease interval DEFAULT NULL, p_retry_backoff interval DEFAULT NULL,
                                        p_retry_backoff_max interval DEFAULT NULL,
                                        p_archive_retention interval DEFAULT NULL,
                                        p_max_payload_bytes integer DEFAULT NULL,
                                        p_if_not_exists boolean DEFAULT false,
                                        p_max_depth bigint DEFAULT NULL,
                                        p_backpressure_timeout interval DEFAULT NULL)
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
    q.max_depth := nullif(p_max_depth, 0);
    q.backpressure_timeout := coalesce(p_backpressure_timeout, interval '5 seconds');
    PERFORM {{schema}}._queue_check(q);
    INSERT INTO {{schema}}.queue (name, max_attempts, lease, retry_backoff, retry_backoff_max,
                                  archive_retention, max_payload_bytes, max_depth, backpressure_timeout)
    VALUES (q.name, q.max_attempts, q.lease, q.retry_backoff, q.retry_backoff_max,
            q.archive_retention, q.max_payload_bytes, q.max_depth, q.backpressure_timeout)
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

-- queue_update changes the settings given (non-NULL) of a queue; p_max_depth
-- 0 removes the limit. Jobs already enqueued keep their max_attempts; the
-- other settings apply at once (a lower max_depth never removes jobs: it
-- refuses enqueues until the queue drains below it).
CREATE FUNCTION {{schema}}.queue_update(p_name text, p_max_attempts integer DEFAULT NULL,
                                        p_lease interval DEFAULT NULL, p_retry_backoff interval DEFAULT NULL,
                                        p_retry_backoff_max interval DEFAULT NULL,
                                        p_archive_retention interval DEFAULT NULL,
                                        p_max_payload_bytes integer DEFAULT NULL,
                                        p_max_depth bigint DEFAULT NULL,
                                        p_backpressure_timeout interval DEFAULT NULL)
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
    q.max_depth := CASE WHEN p_max_depth IS NULL THEN q.max_depth ELSE nullif(p_max_depth, 0) END;
    q.backpressure_timeout := coalesce(p_backpressure_timeout, q.backpressure_timeout);
    PERFORM {{schema}}._queue_check(q);
    UPDATE {{schema}}.queue u
       SET max_attempts = q.max_attempts, lease = q.lease, retry_backoff = q.retry_backoff,
           retry_backoff_max = q.retry_backoff_max, archive_retention = q.archive_retention,
           max_payload_bytes = q.max_payload_bytes, max_depth = q.max_depth,
           backpressure_timeout = q.backpressure_timeout
     WHERE u.queue_id = q.queue_id
    RETURNING * INTO q;
    RETURN q;
END $$;

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
CREATE FUNCTION {{schema}}._queue_depth_check(q {{schema}}.queue, p_n integer) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
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
        PERFORM {{schema}}._raise('PM109', format(
            'queue %s is full: %s more jobs would exceed its max_depth of %s jobs waiting or running',
            quote_literal(q.name), p_n, q.max_depth));
    END IF;
END $$;

-- enqueue_many: as in 002, plus the max_depth check (PM109) before the
-- insert. See 002 for the arguments.
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