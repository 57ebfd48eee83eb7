DROP FUNCTION IF EXISTS {{schema}}.claim_range(text, text, integer, interval, integer, text, text, boolean, boolean, integer, bigint);
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

-- _append as 005 left it.
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
