-- Reverts 015: _segment_lock and _segment_ensure as 001 defined them,
-- _segment_create as 008 did (all three SECURITY DEFINER with a pinned
-- search_path since 001), executable by PUBLIC again.

CREATE OR REPLACE FUNCTION {{schema}}._segment_lock(p_topic_id integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('LOCK TABLE %I.%I IN SHARE UPDATE EXCLUSIVE MODE', {{schema_lit}}, 'record_' || p_topic_id);
END $$;

CREATE OR REPLACE FUNCTION {{schema}}._segment_create(p_topic_id integer, p_partition integer, p_lo bigint, p_hi bigint)
RETURNS void LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rel     text := format('record_%s_p%s_%s', p_topic_id, p_partition, p_lo);
    grantee oid;
BEGIN
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
END $$;

CREATE OR REPLACE FUNCTION {{schema}}._segment_ensure(p_topic_id integer, p_partition integer, p_segment_end bigint,
                                           p_segment_records bigint, p_needed bigint)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    seg_end bigint := p_segment_end;
BEGIN
    WHILE seg_end < p_needed + 2 * p_segment_records LOOP
        PERFORM {{schema}}._segment_create(p_topic_id, p_partition, seg_end, seg_end + p_segment_records);
        seg_end := seg_end + p_segment_records;
    END LOOP;
    IF seg_end <> p_segment_end THEN
        UPDATE {{schema}}.topic_partition SET segment_end = seg_end
        WHERE topic_id = p_topic_id AND partition = p_partition;
    END IF;
    RETURN seg_end;
END $$;

GRANT EXECUTE ON FUNCTION {{schema}}._segment_lock(integer) TO PUBLIC;
GRANT EXECUTE ON FUNCTION {{schema}}._segment_create(integer, integer, bigint, bigint) TO PUBLIC;
GRANT EXECUTE ON FUNCTION {{schema}}._segment_ensure(integer, integer, bigint, bigint, bigint) TO PUBLIC;
