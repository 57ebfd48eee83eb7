-- pgmsg 015: the three SECURITY DEFINER segment functions check their
-- arguments and are no longer executable by PUBLIC.
--
-- Templated like 001.
--
-- Issue 14, finding 6: _segment_lock, _segment_create and _segment_ensure run
-- as the schema owner (so that an application role without CREATE can
-- publish), kept PUBLIC's EXECUTE and trusted their arguments: any role with
-- USAGE on the schema could lock any table named record_<n>, create and
-- attach segments anywhere (out of order, overlapping, of any size), or have
-- _segment_ensure create any number of tables as the owner.
--
-- Now PUBLIC's EXECUTE is revoked (the roles that publish or create topics
-- need EXECUTE on them, which GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA gives,
-- see docs/operations.md) and each one creates or locks only what a
-- legitimate publish would:
--   _segment_lock    the table of an existing topic (PM001 otherwise);
--   _segment_create  only the partition's next segment, [segment_end,
--                    segment_end + the topic's segment_records), and only
--                    while the partition has less than its two segments of
--                    headroom past next_offset; it now advances segment_end
--                    itself, so that a direct call cannot leave a segment the
--                    next publish would try to create again;
--   _segment_ensure  only segments up to next_offset (the records already
--                    reserved) plus two segments of headroom, from the
--                    partition's current segment_end (p_segment_end must be
--                    it); it sizes them with the topic's stored
--                    segment_records (the p_segment_records argument is kept
--                    for its callers and ignored: a topic_configure
--                    committing after a publish read the topic would make a
--                    strict check refuse a legitimate publish).
-- Unknown topic: PM001; partition without a counter row: PM005; any other
-- argument a publish would not pass: PM004. Nothing is created on refusal.
--
-- The hot path is unchanged: _append calls _segment_ensure only when a
-- publish runs past segment_end (segments are normally created ahead by
-- segment_ensure), and the checks are a primary-key read of the topic and
-- of the counter row, which the caller already holds.

CREATE OR REPLACE FUNCTION {{schema}}._segment_lock(p_topic_id integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM 1 FROM {{schema}}.topic t WHERE t.topic_id = p_topic_id;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM001', format('unknown topic id %s', coalesce(p_topic_id::text, 'NULL')));
    END IF;
    EXECUTE format('LOCK TABLE %I.%I IN SHARE UPDATE EXCLUSIVE MODE', {{schema_lit}}, 'record_' || p_topic_id);
END $$;

-- _segment_create, as in 008 (the new segment carries the record table's
-- SELECT grants), for the partition's next segment only, which it records
-- in segment_end. Callers (_partitions_add, and a direct call) hold or take
-- the partition's counter row.
CREATE OR REPLACE FUNCTION {{schema}}._segment_create(p_topic_id integer, p_partition integer, p_lo bigint, p_hi bigint)
RETURNS void LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rel     text := format('record_%s_p%s_%s', p_topic_id, p_partition, p_lo);
    grantee oid;
    seg     bigint;
    tp      record;
BEGIN
    SELECT t.segment_records INTO seg FROM {{schema}}.topic t WHERE t.topic_id = p_topic_id;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM001', format('unknown topic id %s', coalesce(p_topic_id::text, 'NULL')));
    END IF;
    SELECT c.segment_end, c.next_offset INTO tp FROM {{schema}}.topic_partition c
     WHERE c.topic_id = p_topic_id AND c.partition = p_partition FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM005', format('partition %s out of range for topic id %s',
                                                  coalesce(p_partition::text, 'NULL'), p_topic_id));
    END IF;
    IF p_lo IS DISTINCT FROM tp.segment_end OR p_hi IS DISTINCT FROM tp.segment_end + seg THEN
        PERFORM {{schema}}._raise('PM004', format('segment [%s, %s) is not the partition''s next segment [%s, %s)',
                                                  coalesce(p_lo::text, 'NULL'), coalesce(p_hi::text, 'NULL'),
                                                  tp.segment_end, tp.segment_end + seg));
    END IF;
    IF tp.segment_end >= tp.next_offset + 2 * seg THEN
        PERFORM {{schema}}._raise('PM004', format('partition %s already has segments up to %s (next offset %s)',
                                                  p_partition, tp.segment_end, tp.next_offset));
    END IF;
    EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I)', {{schema_lit}}, rel, {{schema_lit}}, 'record_' || p_topic_id);
    EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%s, %s) TO (%s, %s)',
                   {{schema_lit}}, 'record_' || p_topic_id, {{schema_lit}}, rel,
                   p_partition, p_lo, p_partition, p_hi);
    FOR grantee IN
        SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
         WHERE c.oid = format('%I.record', {{schema_lit}})::regclass
           AND a.privilege_type = 'SELECT' AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT SELECT ON %I.%I TO %s', {{schema_lit}}, rel,
                       CASE WHEN grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(grantee)) END);
    END LOOP;
    INSERT INTO {{schema}}.segment (topic_id, partition, start_offset, end_offset, relname)
    VALUES (p_topic_id, p_partition, p_lo, p_hi, rel);
    UPDATE {{schema}}.topic_partition c SET segment_end = p_hi
     WHERE c.topic_id = p_topic_id AND c.partition = p_partition;
END $$;

-- _segment_ensure creates segments until the partition's segments reach
-- p_needed plus two segments of headroom (see 001 for why two), p_needed
-- being at most the partition's next_offset: the offsets already reserved,
-- by the caller's publish among others. The caller holds the partition's
-- counter row lock (taken again here for a direct call), so two publishers
-- never create the same segment. It creates the segments itself rather than
-- through _segment_create so that they all have the one size read here.
CREATE OR REPLACE FUNCTION {{schema}}._segment_ensure(p_topic_id integer, p_partition integer, p_segment_end bigint,
                                                      p_segment_records bigint, p_needed bigint)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    seg     bigint;
    tp      record;
    seg_end bigint;
    rel     text;
    grantee oid;
BEGIN
    SELECT t.segment_records INTO seg FROM {{schema}}.topic t WHERE t.topic_id = p_topic_id;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM001', format('unknown topic id %s', coalesce(p_topic_id::text, 'NULL')));
    END IF;
    SELECT c.segment_end, c.next_offset INTO tp FROM {{schema}}.topic_partition c
     WHERE c.topic_id = p_topic_id AND c.partition = p_partition FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM005', format('partition %s out of range for topic id %s',
                                                  coalesce(p_partition::text, 'NULL'), p_topic_id));
    END IF;
    IF p_segment_end IS DISTINCT FROM tp.segment_end THEN
        PERFORM {{schema}}._raise('PM004', format('segment end %s is not the partition''s (%s)',
                                                  coalesce(p_segment_end::text, 'NULL'), tp.segment_end));
    END IF;
    IF p_needed IS NULL OR p_needed > tp.next_offset THEN
        PERFORM {{schema}}._raise('PM004', format('needed offset %s is past the partition''s next offset %s',
                                                  coalesce(p_needed::text, 'NULL'), tp.next_offset));
    END IF;
    seg_end := tp.segment_end;
    WHILE seg_end < p_needed + 2 * seg LOOP
        rel := format('record_%s_p%s_%s', p_topic_id, p_partition, seg_end);
        EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I)', {{schema_lit}}, rel, {{schema_lit}}, 'record_' || p_topic_id);
        EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%s, %s) TO (%s, %s)',
                       {{schema_lit}}, 'record_' || p_topic_id, {{schema_lit}}, rel,
                       p_partition, seg_end, p_partition, seg_end + seg);
        FOR grantee IN
            SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.oid = format('%I.record', {{schema_lit}})::regclass
               AND a.privilege_type = 'SELECT' AND a.grantee <> c.relowner
        LOOP
            EXECUTE format('GRANT SELECT ON %I.%I TO %s', {{schema_lit}}, rel,
                           CASE WHEN grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(grantee)) END);
        END LOOP;
        INSERT INTO {{schema}}.segment (topic_id, partition, start_offset, end_offset, relname)
        VALUES (p_topic_id, p_partition, seg_end, seg_end + seg, rel);
        seg_end := seg_end + seg;
    END LOOP;
    IF seg_end <> tp.segment_end THEN
        UPDATE {{schema}}.topic_partition c SET segment_end = seg_end
         WHERE c.topic_id = p_topic_id AND c.partition = p_partition;
    END IF;
    RETURN seg_end;
END $$;

REVOKE EXECUTE ON FUNCTION {{schema}}._segment_lock(integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}._segment_create(integer, integer, bigint, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}._segment_ensure(integer, integer, bigint, bigint, bigint) FROM PUBLIC;
