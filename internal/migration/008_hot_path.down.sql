-- claim as 001 defined it.
CREATE OR REPLACE FUNCTION {{schema}}.claim(p_topic text, p_group text, p_max_records integer DEFAULT 100,
                                 p_lease interval DEFAULT '30 seconds', p_partition integer DEFAULT NULL,
                                 p_max_bytes bigint DEFAULT NULL, p_start text DEFAULT 'earliest',
                                 p_member text DEFAULT NULL, p_require_owner boolean DEFAULT false,
                                 p_async boolean DEFAULT false)
RETURNS TABLE (partition integer, claim_epoch bigint, claim_expires_at timestamptz, "offset" bigint,
               "timestamp" timestamptz, key bytea, value bytea, headers jsonb)
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
DECLARE
    t       {{schema}}.topic := {{schema}}._topic(p_topic);
    now_ts  timestamptz := clock_timestamp();
    c_part  integer;
    c_next  bigint;
    c_epoch bigint;
    tip     bigint;
    v_last  bigint;
    v_bytes bigint;
    expires timestamptz;
    n       bigint;
BEGIN
    IF p_max_records IS NULL OR p_max_records < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'max_records must be at least 1');
    END IF;
    IF p_lease IS NULL OR p_lease <= interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive');
    END IF;
    IF p_partition IS NOT NULL AND (p_partition < 0 OR p_partition >= t.partitions) THEN
        PERFORM {{schema}}._raise('PM005', format('partition %s out of range: topic %s has %s partitions',
                                                  p_partition, quote_literal(t.name), t.partitions));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group) THEN
        PERFORM {{schema}}.group_create(p_topic, p_group, p_start);
    ELSIF p_async THEN
        -- A claim is only a lease: if a crash loses it, its records are
        -- delivered again, which at-least-once allows, so a standalone claim
        -- need not wait for its WAL flush. Never when this call created the
        -- group (its start position must be durable) and never inside a
        -- caller's transaction (the caller does not pass p_async then).
        -- Commits of the cursor stay synchronous.
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF p_require_owner THEN
        -- Membership mode: only partitions assigned to p_member and not being
        -- handed over. A member the group declared dead must rejoin first.
        IF NOT EXISTS (SELECT 1 FROM {{schema}}.group_member m WHERE m.topic_id = t.topic_id
                       AND m.group_name = p_group AND m.member_id = p_member) THEN
            PERFORM {{schema}}._raise('PM013', format('member %s is not in group %s (left, or its session expired): heartbeat to rejoin',
                                                      left(quote_literal(coalesce(p_member, '')), 210), quote_literal(p_group)));
        END IF;
        IF p_partition IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM {{schema}}.group_cursor c WHERE c.topic_id = t.topic_id AND c.group_name = p_group
               AND c.partition = p_partition AND c.owner = p_member AND c.next_owner IS NULL) THEN
            PERFORM {{schema}}._raise('PM012', format('partition %s of topic %s is not assigned to member %s',
                                                      p_partition, quote_literal(t.name), left(quote_literal(p_member), 210)));
        END IF;
    END IF;

    SELECT c.partition, c.next_offset, c.claim_epoch, tp.next_offset INTO c_part, c_next, c_epoch, tip
    FROM {{schema}}.group_cursor c
    JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
    WHERE c.topic_id = t.topic_id AND c.group_name = p_group
      AND (p_partition IS NULL OR c.partition = p_partition)
      AND (NOT p_require_owner OR (c.owner = p_member AND c.next_owner IS NULL))
      AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now_ts)
      AND tp.next_offset > c.next_offset
    ORDER BY c.claimed_at NULLS FIRST, c.partition
    LIMIT 1
    FOR UPDATE OF c SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;

    expires := now_ts + p_lease;
    -- The claim's epoch is its fencing token. It is at least the claim
    -- time in microseconds, not just the previous epoch + 1: an async
    -- claim lost in a crash must not have its epoch handed out again, or
    -- the lost claim's holder could commit over the next claim.
    c_epoch := greatest(c_epoch + 1, (extract(epoch FROM now_ts) * 1000000)::bigint);
    LOOP
        v_last := least(tip - 1, c_next + p_max_records - 1);
        IF p_max_bytes IS NOT NULL THEN
            -- Stop before the record that would take the claim past
            -- p_max_bytes, but always hand out at least one record.
            SELECT max(s.o) INTO v_bytes FROM (
                SELECT r."offset" AS o, row_number() OVER (ORDER BY r."offset") AS rn,
                       sum(coalesce(octet_length(r.value), 0) + coalesce(octet_length(r.key), 0))
                           OVER (ORDER BY r."offset") AS cum
                FROM {{schema}}.record r
                WHERE r.topic_id = t.topic_id AND r.partition = c_part
                  AND r."offset" BETWEEN c_next AND v_last
            ) s WHERE s.cum <= p_max_bytes OR s.rn = 1;
            v_last := coalesce(v_bytes, v_last);
        END IF;

        RETURN QUERY
        SELECT r.partition, c_epoch, expires, r."offset", r."timestamp", r.key, r.value, r.headers
        FROM {{schema}}.record r
        WHERE r.topic_id = t.topic_id AND r.partition = c_part
          AND r."offset" BETWEEN c_next AND v_last
        ORDER BY r."offset";
        GET DIAGNOSTICS n = ROW_COUNT;
        EXIT WHEN n > 0;
        -- Compaction removed every record of the range: nothing to deliver,
        -- so the cursor moves past it (offsets of a compacted topic have gaps).
        UPDATE {{schema}}.group_cursor c SET next_offset = v_last + 1
         WHERE c.topic_id = t.topic_id AND c.group_name = p_group AND c.partition = c_part;
        c_next := v_last + 1;
        IF c_next >= tip THEN
            RETURN;
        END IF;
    END LOOP;

    UPDATE {{schema}}.group_cursor c
       SET claim_epoch = c_epoch, claim_start = c_next,
           claim_end = v_last, claim_expires_at = expires,
           claim_owner = p_member, claimed_at = now_ts
     WHERE c.topic_id = t.topic_id AND c.group_name = p_group AND c.partition = c_part;
END $$;
DROP FUNCTION IF EXISTS {{schema}}.claim_range(text, text, integer, interval, integer, text, text, boolean, boolean, integer, bigint, bigint);
DROP FUNCTION IF EXISTS {{schema}}._claim_bytes_end(integer, integer, bigint, bigint, bigint);
CREATE OR REPLACE FUNCTION {{schema}}._segment_create(p_topic_id integer, p_partition integer, p_lo bigint, p_hi bigint)
RETURNS void LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rel text := format('record_%s_p%s_%s', p_topic_id, p_partition, p_lo);
BEGIN
    EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I)', {{schema_lit}}, rel, {{schema_lit}}, 'record_' || p_topic_id);
    EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%s, %s) TO (%s, %s)',
                   {{schema_lit}}, 'record_' || p_topic_id, {{schema_lit}}, rel,
                   p_partition, p_lo, p_partition, p_hi);
    INSERT INTO {{schema}}.segment (topic_id, partition, start_offset, end_offset, relname)
    VALUES (p_topic_id, p_partition, p_lo, p_hi, rel);
END $$;


-- segment_ensure as 001 defined it.
CREATE OR REPLACE FUNCTION {{schema}}.segment_ensure(p_topic text, p_partition integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    t       {{schema}}.topic := {{schema}}._topic(p_topic);
    tp      {{schema}}.topic_partition;
    seg_end bigint;
BEGIN
    IF p_partition IS NULL OR p_partition < 0 OR p_partition >= t.partitions THEN
        PERFORM {{schema}}._raise('PM005', format('partition %s out of range: topic %s has %s partitions',
                                                  coalesce(p_partition::text, 'NULL'), quote_literal(t.name), t.partitions));
    END IF;
    -- This is background work: give way rather than wait. A short
    -- lock_timeout makes it the one that yields when DDL on the topic
    -- (topic_delete) queues behind its lock; busy means try again later.
    PERFORM set_config('lock_timeout', '200ms', true);
    BEGIN
        PERFORM {{schema}}._segment_lock(t.topic_id);
        -- Never wait for a publisher's counter row (it may be held by a
        -- long transaction that itself waits for segment creation).
        SELECT * INTO tp FROM {{schema}}.topic_partition c
         WHERE c.topic_id = t.topic_id AND c.partition = p_partition FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN -1;
        END IF;
        seg_end := {{schema}}._segment_ensure(t.topic_id, p_partition, tp.segment_end, t.segment_records, tp.next_offset);
    EXCEPTION WHEN lock_not_available THEN
        RETURN -1;
    END;
    RETURN ((seg_end - tp.segment_end) / t.segment_records)::integer;
END $$;
