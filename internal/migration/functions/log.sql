-- pgmsg functions: the log (topics, segments, publish, claims, consumer
-- groups, retention, compaction, maintenance events). Applied as described
-- in common.sql.

-- ---------------------------------------------------------------------------
-- Names and topic settings
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION {{schema}}.valid_name(p_name text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT p_name IS NOT NULL AND p_name ~ '^[A-Za-z0-9._-]{1,200}$'
$function$;

CREATE OR REPLACE FUNCTION {{schema}}._topic(p_name text)
 RETURNS {{schema}}.topic
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t {{schema}}.topic;
BEGIN
    SELECT * INTO t FROM {{schema}}.topic WHERE name = p_name;
    IF NOT FOUND THEN
        -- A name no topic can have is the caller's mistake (PM003).
        PERFORM {{schema}}._check_name('topic', p_name);
        PERFORM {{schema}}._raise('PM001', format('unknown topic %s', left(quote_literal(coalesce(p_name, '')), 210)));
    END IF;
    RETURN t;
END $function$;

-- _setting reads a numeric topic setting; NULL when absent or not a number.
CREATE OR REPLACE FUNCTION {{schema}}._setting(p_config jsonb, p_key text)
 RETURNS bigint
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RETURN (p_config->>p_key)::bigint;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END $function$;

-- _check_topic_settings rejects (PM004) backpressure settings that are not
-- integers in range, at the time they are set: max_lag_records and
-- max_lag_bytes at least 1, backpressure_timeout_ms at least 0. JSON null
-- (removal) is accepted.
CREATE OR REPLACE FUNCTION {{schema}}._check_topic_settings(p_config jsonb)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    k  text;
    v  bigint;
    lo bigint;
    hi bigint;
BEGIN
    FOREACH k IN ARRAY ARRAY['max_lag_records', 'max_lag_bytes', 'backpressure_timeout_ms'] LOOP
        CONTINUE WHEN NOT p_config ? k OR jsonb_typeof(p_config->k) = 'null';
        lo := CASE WHEN k = 'backpressure_timeout_ms' THEN 0 ELSE 1 END;
        hi := CASE WHEN k = 'backpressure_timeout_ms' THEN 31622400000 END;  -- 366 days
        BEGIN
            v := (p_config->>k)::bigint;
        EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
            v := NULL;
        END;
        IF v IS NULL OR v < lo OR v > hi THEN
            PERFORM {{schema}}._raise('PM004', format('%s must be an integer %s, got %s', k,
                                                      CASE WHEN hi IS NULL THEN format('of at least %s', lo)
                                                           ELSE format('from %s to %s', lo, hi) END,
                                                      left(p_config->>k, 60)));
        END IF;
    END LOOP;
END $function$;

-- _invalid_partitions raises PM004 for a partition count outside 1..1024.
-- IMMUTABLE so that partition_for_key stays an inlinable SQL function: an
-- immutable function that raises on bad input is fine (int4div does too).
CREATE OR REPLACE FUNCTION {{schema}}._invalid_partitions(p_partitions integer)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'PM004',
        MESSAGE = format('partitions must be between 1 and 1024, got %s', coalesce(p_partitions::text, 'NULL'));
END $function$;

-- ---------------------------------------------------------------------------
-- Topics and segments. A topic's records live in one table per topic, RANGE-
-- partitioned by (partition, offset) into segments; retention drops whole
-- segments. Segment DDL runs as the schema's owner (SECURITY DEFINER).
-- ---------------------------------------------------------------------------

-- The record table is LIST-partitioned into blocks of topic ids:
-- record_b<k> holds the tables of topics k * size to k * size + size - 1
-- (LIST-partitioned by topic_id itself), so that a topic's attach changes
-- a block's partition descriptor, not one listing every topic. Migration
-- 030 built the blocks of the topics it found; the size is fixed there.
CREATE OR REPLACE FUNCTION {{schema}}._record_block_size()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT 100
$function$;

-- _record_block returns the name of the block of topic p_topic_id,
-- creating it (and attaching it to the record table) if it does not exist.
-- Creators of the same block take turns (a transaction-scoped advisory
-- lock on the block) and look again, by a query under a snapshot taken
-- after the turn, for the block a former holder committed. Only the
-- CREATE is guarded: under REPEATABLE READ the snapshot can predate that
-- commit, and the CREATE then fails as a duplicate of a committed block.
-- The attach is not: if it fails, the topic's creation fails with its
-- error, instead of the block being rolled back unseen and the topic's
-- attach reporting it missing.
CREATE OR REPLACE FUNCTION {{schema}}._record_block(p_topic_id integer)
 RETURNS text
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    size    integer := {{schema}}._record_block_size();
    k       integer := p_topic_id / size;
    block   text := 'record_b' || k;
    created boolean := false;
BEGIN
    IF to_regclass(format('%I.%I', {{schema_lit}}, block)) IS NOT NULL THEN
        RETURN block;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext({{schema_lit}} || '.record_block'), k);
    IF EXISTS (SELECT 1 FROM pg_class
                WHERE relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = {{schema_lit}})
                  AND relname = block) THEN
        RETURN block;
    END IF;
    BEGIN
        EXECUTE format('CREATE TABLE %I.%I (LIKE %I.record INCLUDING DEFAULTS) PARTITION BY LIST (topic_id)',
                       {{schema_lit}}, block, {{schema_lit}});
        created := true;
    EXCEPTION WHEN duplicate_table OR unique_violation THEN
        NULL;
    END;
    IF created THEN
        EXECUTE format('ALTER TABLE %I.record ATTACH PARTITION %I.%I FOR VALUES IN (%s)',
                       {{schema_lit}}, {{schema_lit}}, block,
                       (SELECT string_agg(i::text, ', ') FROM generate_series(k * size, k * size + size - 1) i));
    END IF;
    RETURN block;
END $function$;

-- _record_grantees: the roles (other than its owner) granted p_privilege
-- on the record table, as a GRANT's list of grantees (PUBLIC for the
-- public grant), or NULL for none. A topic's tables and a partition's
-- segments and offset sequence get the same grants as the record table,
-- so that the roles that read or write it read or write them: topic
-- creation, the segment creators and the offset sequence's creation grant
-- this list.
CREATE OR REPLACE FUNCTION {{schema}}._record_grantees(p_privilege text)
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT string_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, ', ')
      FROM pg_class c, aclexplode(c.relacl) a
     WHERE c.oid = format('%I.record', {{schema_lit}})::regclass
       AND a.privilege_type = p_privilege AND a.grantee <> c.relowner
$function$;

-- topic_create creates a topic with p_partitions partitions. p_config may
-- hold segment_records and max_record_bytes (numbers) and any other settings,
-- which are stored for later features.
CREATE OR REPLACE FUNCTION {{schema}}.topic_create(p_name text, p_partitions integer DEFAULT 1, p_config jsonb DEFAULT '{}'::jsonb)
 RETURNS {{schema}}.topic
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t        {{schema}}.topic;
    seg      bigint;
    maxb     integer;
    grantees text;
    rels     text[] := '{}';
    p        integer;
    rel      text;
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
    -- The topic's table is built apart, where no other session sees it,
    -- and attached last to its block of the record table (_record_block):
    -- its segments are created as partitions of it at once (no CREATE +
    -- ATTACH each, no lock to wait for), and the block is locked for the
    -- attach only (SHARE UPDATE EXCLUSIVE: publishes and claims go on).
    -- The attach changes the block's partition descriptor (at most
    -- _record_block_size topics), not the record table's, so what it
    -- costs this session and the sessions that route through the block
    -- next does not grow with the number of topics. The attach creates
    -- the primary key's indexes.
    EXECUTE format('CREATE TABLE %I.%I (LIKE %I.record INCLUDING DEFAULTS) PARTITION BY RANGE (partition, "offset")',
                   {{schema_lit}}, 'record_' || t.topic_id, {{schema_lit}});
    -- Each partition gets its first segment only (four relations: heap,
    -- primary key, TOAST table and index). The two segments of headroom
    -- that publishers keep come once the partition has filled half of it
    -- (segments_low: the publisher's _segments_ahead after its commit, or
    -- maintenance's segments_ensure), so a topic that is never written,
    -- or written little, costs a third of the relations and of the DDL.
    FOR p IN 0 .. p_partitions - 1 LOOP
        rel := format('record_%s_p%s_0', t.topic_id, p);
        rels := rels || format('%I.%I', {{schema_lit}}, rel);
        EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%s, 0) TO (%s, %s)',
                       {{schema_lit}}, rel, {{schema_lit}}, 'record_' || t.topic_id, p, p, seg);
    END LOOP;
    -- The roles that read the record table read its segments (the
    -- claim's direct reads): one GRANT for all of them.
    grantees := {{schema}}._record_grantees('SELECT');
    IF grantees IS NOT NULL THEN
        EXECUTE format('GRANT SELECT ON %s TO %s', array_to_string(rels, ', '), grantees);
    END IF;
    INSERT INTO {{schema}}.topic_partition (topic_id, partition, log_timeline, segment_end)
    SELECT t.topic_id, gs.part, {{schema}}._timeline(), seg FROM generate_series(0, p_partitions - 1) AS gs(part);
    INSERT INTO {{schema}}.segment (topic_id, partition, start_offset, end_offset, relname)
    SELECT t.topic_id, gs.part, 0, seg, format('record_%s_p%s_0', t.topic_id, gs.part)
      FROM generate_series(0, p_partitions - 1) AS gs(part);
    EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES IN (%s)',
                   {{schema_lit}}, {{schema}}._record_block(t.topic_id), {{schema_lit}}, 'record_' || t.topic_id, t.topic_id);
    RETURN t;
END $function$;

-- topic_configure changes a topic's settings: each key of p_settings is
-- set, and a key whose value is JSON null is removed. segment_records
-- (applies to segments created from now on) and max_record_bytes are
-- validated as in topic_create.
CREATE OR REPLACE FUNCTION {{schema}}.topic_configure(p_name text, p_settings jsonb)
 RETURNS {{schema}}.topic
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;

-- topic_add_partitions grows a topic to p_partitions partitions (never shrinks).
CREATE OR REPLACE FUNCTION {{schema}}.topic_add_partitions(p_name text, p_partitions integer)
 RETURNS {{schema}}.topic
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t {{schema}}.topic;
BEGIN
    -- A count no topic can have first (PM004), whether or not the topic
    -- exists.
    IF p_partitions IS NULL OR p_partitions < 1 OR p_partitions > 1024 THEN
        PERFORM {{schema}}._invalid_partitions(p_partitions);
    END IF;
    PERFORM {{schema}}._topic(p_name);
    SELECT * INTO t FROM {{schema}}.topic WHERE name = p_name FOR UPDATE;
    IF p_partitions IS NULL OR p_partitions <= t.partitions OR p_partitions > 1024 THEN
        PERFORM {{schema}}._raise('PM004', format('partitions must be more than the current %s and at most 1024, got %s',
                                                  t.partitions, coalesce(p_partitions::text, 'NULL')));
    END IF;
    PERFORM {{schema}}._partitions_add(t, t.partitions, p_partitions);
    UPDATE {{schema}}.topic SET partitions = p_partitions WHERE topic_id = t.topic_id RETURNING * INTO t;
    RETURN t;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}._partitions_add(t {{schema}}.topic, p_from integer, p_to integer)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    p integer;
BEGIN
    FOR p IN p_from .. p_to - 1 LOOP
        INSERT INTO {{schema}}.topic_partition (topic_id, partition, log_timeline)
        VALUES (t.topic_id, p, {{schema}}._timeline());
        -- The first segment only, as topic_create: the two of headroom
        -- come after the partition's first publish (_segment_ensure).
        PERFORM {{schema}}._segment_create(t.topic_id, p, 0, t.segment_records);
        -- Existing groups get a cursor at the start of the new partition, so
        -- they read it from its first record (as Kafka consumers do).
        INSERT INTO {{schema}}.group_cursor (topic_id, group_name, partition, next_offset)
        SELECT t.topic_id, g.group_name, p, 0 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id;
    END LOOP;
    -- Their groups now have unowned partitions: the next heartbeat of each
    -- rebalances it (group_heartbeat).
    UPDATE {{schema}}.consumer_group g SET steady_until = NULL WHERE g.topic_id = t.topic_id;
END $function$;

-- topic_delete drops a topic, its records (whole tables, no DELETE) and its
-- groups. A topic that still stores records or has groups fails with PM017
-- unless p_force, as queue_delete does for a queue with jobs.
CREATE OR REPLACE FUNCTION {{schema}}.topic_delete(p_name text, p_force boolean)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_name);
    n_records bigint;
    n_groups bigint;
BEGIN
    PERFORM 1 FROM {{schema}}.topic WHERE topic_id = t.topic_id FOR UPDATE;
    IF NOT coalesce(p_force, false) THEN
        SELECT coalesce(sum(tp.next_offset - tp.start_offset), 0) INTO n_records
          FROM {{schema}}.topic_partition tp WHERE tp.topic_id = t.topic_id;
        SELECT count(*) INTO n_groups FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id;
        IF n_records > 0 OR n_groups > 0 THEN
            PERFORM {{schema}}._raise('PM017', format('topic %s still has %s records and %s groups: delete with force to drop them',
                                                      quote_literal(t.name), n_records, n_groups));
        END IF;
    END IF;
    EXECUTE format('DROP TABLE %I.%I', {{schema_lit}}, 'record_' || t.topic_id);
    DELETE FROM {{schema}}.topic WHERE topic_id = t.topic_id;
END $function$;

-- topic_delete(name) is topic_delete(name, false): it refuses a topic with
-- records or groups.
CREATE OR REPLACE FUNCTION {{schema}}.topic_delete(p_name text)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT {{schema}}.topic_delete(p_name, false)
$function$;

CREATE OR REPLACE FUNCTION {{schema}}.topic_list()
 RETURNS TABLE(name text, partitions integer, segment_records bigint, max_record_bytes integer, config jsonb, created_at timestamp with time zone)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT t.name, t.partitions, t.segment_records, t.max_record_bytes, t.config, t.created_at
    FROM {{schema}}.topic t ORDER BY t.name
$function$;

-- topic_describe: per partition, the first stored and next offsets, the
-- record count (gapless, so next - start) and the bytes of its segments.
CREATE OR REPLACE FUNCTION {{schema}}.topic_describe(p_name text)
 RETURNS TABLE(partition integer, start_offset bigint, next_offset bigint, records bigint, segments integer, approx_bytes bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_name);
BEGIN
    RETURN QUERY
    SELECT tp.partition, tp.start_offset, tp.next_offset, tp.next_offset - tp.start_offset,
           count(s.relname)::integer,
           coalesce(sum(pg_total_relation_size(format('%I.%I', {{schema_lit}}, s.relname)::regclass)), 0)::bigint
    FROM {{schema}}.topic_partition tp
    LEFT JOIN {{schema}}.segment s ON s.topic_id = tp.topic_id AND s.partition = tp.partition
    WHERE tp.topic_id = t.topic_id
    GROUP BY tp.partition, tp.start_offset, tp.next_offset
    ORDER BY tp.partition;
END $function$;

-- _segment_lock takes the lock segment creation needs on the topic's
-- table (SHARE UPDATE EXCLUSIVE, which the attach takes too), held to
-- the commit: creators take it before reading where the segments end, so
-- that they read the end the creator before them committed.
-- _segments_ahead() takes no counter row; a publish's fallback takes it
-- after its counter row.
CREATE OR REPLACE FUNCTION {{schema}}._segment_lock(p_topic_id integer)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM 1 FROM {{schema}}.topic t WHERE t.topic_id = p_topic_id;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM001', format('unknown topic id %s', coalesce(p_topic_id::text, 'NULL')));
    END IF;
    EXECUTE format('LOCK TABLE %I.%I IN SHARE UPDATE EXCLUSIVE MODE', {{schema_lit}}, 'record_' || p_topic_id);
END $function$;

-- _segment_create creates and attaches the segment [p_lo, p_hi) of one
-- partition. CREATE + ATTACH takes SHARE UPDATE EXCLUSIVE on the topic's
-- table (CREATE ... PARTITION OF would take ACCESS EXCLUSIVE and block every
-- reader and writer of the topic). Identifiers are built from integers only
-- and still go through %I. A new partition gets one (the one it writes
-- to); the two of headroom that publishers keep come once it has filled
-- half of it (_segments_ahead). [p_lo, p_hi) must be the next segment after
-- those attached (segments_attached_end.sql), of the topic's size, while
-- they do not reach three segments past the next offset. It takes the
-- counter row, then the topic table's lock (the order of a publish's
-- fallback), and moves the counter row's segment_end to p_hi.
CREATE OR REPLACE FUNCTION {{schema}}._segment_create(p_topic_id integer, p_partition integer, p_lo bigint, p_hi bigint)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    rel      text := format('record_%s_p%s_%s', p_topic_id, p_partition, p_lo);
    grantees text;
    seg      bigint;
    tp       record;
    att_end  bigint;
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
    -- Creators hold the topic table's lock from here to their commit: the
    -- attached end read after it is the latest.
    PERFORM {{schema}}._segment_lock(p_topic_id);
    att_end := greatest(tp.segment_end, coalesce({{sql segments_attached_end(p_topic_id, p_partition)}}, 0));
    IF p_lo IS DISTINCT FROM att_end OR p_hi IS DISTINCT FROM att_end + seg THEN
        PERFORM {{schema}}._raise('PM004', format('segment [%s, %s) is not the partition''s next segment [%s, %s)',
                                                  coalesce(p_lo::text, 'NULL'), coalesce(p_hi::text, 'NULL'),
                                                  att_end, att_end + seg));
    END IF;
    IF att_end >= tp.next_offset + 3 * seg THEN
        PERFORM {{schema}}._raise('PM004', format('partition %s already has segments up to %s (next offset %s)',
                                                  p_partition, att_end, tp.next_offset));
    END IF;
    PERFORM {{schema}}._segment_unseen(p_topic_id, p_partition, p_lo);
    EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I)', {{schema_lit}}, rel, {{schema_lit}}, 'record_' || p_topic_id);
    EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%s, %s) TO (%s, %s)',
                   {{schema_lit}}, 'record_' || p_topic_id, {{schema_lit}}, rel,
                   p_partition, p_lo, p_partition, p_hi);
    grantees := {{schema}}._record_grantees('SELECT');
    IF grantees IS NOT NULL THEN
        EXECUTE format('GRANT SELECT ON %I.%I TO %s', {{schema_lit}}, rel, grantees);
    END IF;
    INSERT INTO {{schema}}.segment (topic_id, partition, start_offset, end_offset, relname)
    VALUES (p_topic_id, p_partition, p_lo, p_hi, rel);
    UPDATE {{schema}}.topic_partition c SET segment_end = p_hi
     WHERE c.topic_id = p_topic_id AND c.partition = p_partition;
END $function$;

-- _segment_unseen raises serialization_failure (40001) when the segment
-- of partition p_partition of topic id p_topic_id that starts at p_start
-- exists already: a creator that holds the topic table's lock
-- (_segment_lock) and still finds the partition's segments ending at
-- p_start reads with a snapshot older than the segment's commit, which
-- only a REPEATABLE READ or SERIALIZABLE transaction does (a READ
-- COMMITTED statement after the lock sees every creator that held it).
-- The catalog lookup is current: taking the lock processed the creators'
-- invalidations. Without it, that creator's CREATE TABLE failed with
-- 42P07; with the end on the counter row, such a transaction failed with
-- 40001 on the row instead.
CREATE OR REPLACE FUNCTION {{schema}}._segment_unseen(p_topic_id integer, p_partition integer, p_start bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF to_regclass(format('%I.%I', {{schema_lit}}, format('record_%s_p%s_%s', p_topic_id, p_partition, p_start))) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
            MESSAGE = format('could not serialize access: segment %s of partition %s of topic id %s was created after this transaction''s snapshot',
                             p_start, p_partition, p_topic_id);
    END IF;
END $function$;

-- _segment_ensure is a publish's fallback, for a batch that reaches past
-- p_segment_end, the end its partition's counter row knows, to p_needed:
-- the caller holds the counter row. Segments are normally attached ahead
-- of the counter row's end by _segments_ahead() (which never takes
-- counter rows); this moves the row's segment_end to the end of the
-- segments attached (segments_attached_end.sql) and returns it, creating
-- segments first, up to p_needed plus two segments of headroom, only
-- when those do not reach p_needed: headroom short of two segments is
-- left to _segments_ahead() after the commit (segments_low), so that a
-- publish creates no segment that another session has time to create.
--
-- A publish routes its rows with the topic table's partition list as of
-- the last invalidations its session processed. A creator's commit is
-- visible to new snapshots a moment before its invalidations are sent,
-- so a segment read from the segment table may be one the session's list
-- still lacks: taking a lock on the newest segment (ACCESS SHARE) waits
-- for its creator to end, and processes them. Whoever reads the counter
-- row's new end later reads it after this transaction's commit, when
-- every segment below it was attached, committed and announced: a
-- publisher never learns of a segment in the moments after its attach.
-- When creators moved the counter rows themselves, a quarter segment of
-- headroom was not enough: inserts by other sessions that started right
-- after the creating transaction committed were intermittently not
-- routed to the just-attached segment ("no partition of relation found
-- for row", ~10 in 3,200 concurrent publishes, reproduced by
-- TestPublishIntoFreshSegmentsConcurrently). Segments are still topped up
-- to two ahead, but only once less than half a segment is left
-- (segments_low.sql).
CREATE OR REPLACE FUNCTION {{schema}}._segment_ensure(p_topic_id integer, p_partition integer, p_segment_end bigint, p_segment_records bigint, p_needed bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    seg      bigint;
    tp       record;
    seg_end  bigint;
    rel      text;
    grantees text;
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
    seg_end := greatest(tp.segment_end, coalesce({{sql segments_attached_end(p_topic_id, p_partition)}}, 0));
    IF seg_end < p_needed THEN
        -- Create: under the topic table's lock (after the counter row, the
        -- order every publisher takes them in; _segments_ahead() takes no
        -- counter row), whose wait ends once the creator before has
        -- committed, so the end read again is the latest.
        PERFORM {{schema}}._segment_lock(p_topic_id);
        seg_end := greatest(tp.segment_end, coalesce({{sql segments_attached_end(p_topic_id, p_partition)}}, 0));
        grantees := {{schema}}._record_grantees('SELECT');
        WHILE seg_end < p_needed + 2 * seg LOOP
            rel := format('record_%s_p%s_%s', p_topic_id, p_partition, seg_end);
            PERFORM {{schema}}._segment_unseen(p_topic_id, p_partition, seg_end);
            EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I)', {{schema_lit}}, rel, {{schema_lit}}, 'record_' || p_topic_id);
            EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%s, %s) TO (%s, %s)',
                           {{schema_lit}}, 'record_' || p_topic_id, {{schema_lit}}, rel,
                           p_partition, seg_end, p_partition, seg_end + seg);
            IF grantees IS NOT NULL THEN
                EXECUTE format('GRANT SELECT ON %I.%I TO %s', {{schema_lit}}, rel, grantees);
            END IF;
            INSERT INTO {{schema}}.segment (topic_id, partition, start_offset, end_offset, relname)
            VALUES (p_topic_id, p_partition, seg_end, seg_end + seg, rel);
            seg_end := seg_end + seg;
        END LOOP;
    ELSIF seg_end > tp.segment_end THEN
        -- Segments another session attached: wait for the newest one's
        -- creator to end (its invalidations sent), named from numbers.
        EXECUTE format('LOCK TABLE %I.%I IN ACCESS SHARE MODE', {{schema_lit}},
                       format('record_%s_p%s_%s', p_topic_id, p_partition,
                              (SELECT s.start_offset FROM {{schema}}.segment s
                                WHERE s.topic_id = p_topic_id AND s.partition = p_partition
                                ORDER BY s.start_offset DESC LIMIT 1)));
    END IF;
    IF seg_end <> tp.segment_end THEN
        UPDATE {{schema}}.topic_partition c SET segment_end = seg_end
         WHERE c.topic_id = p_topic_id AND c.partition = p_partition;
    END IF;
    RETURN seg_end;
END $function$;

-- A COPY publish is three statements in one implicit transaction: begin
-- (_publish_copy_begin(), or the Go client's copyBeginSQL in
-- internal/store/log_publish_copy.go, which runs the same statement files
-- and calls _publish_copy_begin() only when its reservation finds nothing:
-- a partition's first COPY, or a batch begin declines),
-- COPY record (...) FROM STDIN, and end (_publish_copy_end(), or the Go
-- client's copyEndSQL). begin locks the partition's counter row and
-- reads its next offset (publish_copy_reserve.sql), and points the record
-- table's offset default at the partition's sequence, set to that offset
-- (publish_copy_point.sql): COPY's rows take the offsets in order, under
-- the row's lock. end moves the counter past them, checks that the COPY
-- stored exactly the records reserved and answers what publish() answers
-- (publish_copy_end.sql). begin raises PM016 (nothing stored) when publish()
-- has more to do: an unknown topic or partition, backpressure settings, a
-- batch reaching past the segments created so far, or a record that may
-- exceed max_record_bytes (p_max_record: the client's upper bound of the
-- batch's largest key + value + headers as jsonb text). The Go client then
-- publishes the batch with the direct statement or publish().

-- _offset_seq_create creates partition p_partition's offset sequence,
-- owned by the topic's table (dropped with it), usable by whoever may
-- insert into the record table, and returns it. The caller holds the
-- partition's counter row lock.
CREATE OR REPLACE FUNCTION {{schema}}._offset_seq_create(p_topic_id integer, p_partition integer)
 RETURNS oid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    rel      text := format('record_%s_p%s_offset', p_topic_id, p_partition);
    seq      oid;
    grantees text;
BEGIN
    SELECT c.offset_seq INTO seq FROM {{schema}}.topic_partition c
     WHERE c.topic_id = p_topic_id AND c.partition = p_partition;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM005', format('no partition %s of topic id %s', p_partition, p_topic_id));
    END IF;
    IF seq IS NOT NULL THEN
        RETURN seq;
    END IF;
    EXECUTE format('CREATE SEQUENCE %I.%I AS bigint MINVALUE 0 OWNED BY %I.%I."offset"',
                   {{schema_lit}}, rel, {{schema_lit}}, 'record_' || p_topic_id);
    seq := format('%I.%I', {{schema_lit}}, rel)::regclass::oid;
    grantees := {{schema}}._record_grantees('INSERT');
    IF grantees IS NOT NULL THEN
        EXECUTE format('GRANT USAGE, UPDATE ON SEQUENCE %I.%I TO %s', {{schema_lit}}, rel, grantees);
    END IF;
    UPDATE {{schema}}.topic_partition c SET offset_seq = seq
     WHERE c.topic_id = p_topic_id AND c.partition = p_partition;
    RETURN seq;
END $function$;

-- _timeline is the timeline this server writes WAL on
-- (statements/timeline.sql, which the publish statements that cannot call
-- this pinned function write out). New epochs are numbered at least the timeline
-- they begin on: timelines are never reused along a cluster's history, so
-- two histories that diverged at a failover never share an epoch.
CREATE OR REPLACE FUNCTION {{schema}}._timeline()
 RETURNS integer
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
SELECT {{sql timeline}}
$function$;

-- _log_epoch_bump starts a new log epoch of a partition at p_start (its
-- next_offset before the publish that called it), when the partition's
-- last publish ran on another timeline: this server may be a promoted
-- standby that lacks records the old primary acknowledged, and the offsets
-- from p_start on now name other records. The caller holds the partition's
-- counter row. A partition whose timeline is not known yet (0) records it
-- without a new epoch.
CREATE OR REPLACE FUNCTION {{schema}}._log_epoch_bump(p_topic_id integer, p_partition integer, p_start bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    tl      integer := {{schema}}._timeline();
    old_tl  integer;
    v_epoch integer;
BEGIN
    SELECT c.log_timeline INTO old_tl FROM {{schema}}.topic_partition c
     WHERE c.topic_id = p_topic_id AND c.partition = p_partition;
    IF old_tl IS NULL OR old_tl = tl THEN
        RETURN;
    END IF;
    UPDATE {{schema}}.topic_partition c
       SET log_epoch = {{sql log_epoch_next(c.log_epoch, old_tl, tl)}}, log_timeline = tl
     WHERE c.topic_id = p_topic_id AND c.partition = p_partition
    RETURNING c.log_epoch INTO v_epoch;
    IF old_tl <> 0 THEN
        INSERT INTO {{schema}}.log_epoch (topic_id, partition, epoch, start_offset, timeline)
        VALUES (p_topic_id, p_partition, v_epoch, p_start, tl);
        INSERT INTO {{schema}}.maintenance_event (kind, topic, partition, detail)
        SELECT 'log_epoch', t.name, p_partition,
               jsonb_build_object('epoch', v_epoch, 'start_offset', p_start, 'timeline', tl, 'previous_timeline', old_tl)
          FROM {{schema}}.topic t WHERE t.topic_id = p_topic_id;
    END IF;
END $function$;

-- log_epoch_end answers, for a client that read partition p_partition of
-- p_topic in log epoch p_epoch, the partition's current epoch and where
-- epoch p_epoch ends on this server: the first offset of the next epoch
-- this server knows (an epoch it does not know ended where the next one
-- it knows began), or the partition's next_offset when p_epoch is the
-- current epoch. A client that saw offsets of epoch p_epoch at or past
-- end_offset saw records this server does not have: those offsets name
-- other records here (the log was truncated by a failover).
CREATE OR REPLACE FUNCTION {{schema}}.log_epoch_end(p_topic text, p_partition integer, p_epoch integer)
 RETURNS TABLE(log_epoch integer, end_offset bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_topic);
    tp {{schema}}.topic_partition;
BEGIN
    PERFORM {{schema}}._partition_check(t, p_partition);
    SELECT * INTO tp FROM {{schema}}.topic_partition c WHERE c.topic_id = t.topic_id AND c.partition = p_partition;
    log_epoch := tp.log_epoch;
    IF p_epoch = tp.log_epoch THEN
        end_offset := tp.next_offset;
    ELSIF p_epoch > tp.log_epoch THEN
        -- An epoch of a history this server does not have (its start was
        -- lost in a failover): none of its records are here, so it ended
        -- where the current epoch began.
        SELECT e.start_offset INTO end_offset FROM {{schema}}.log_epoch e
         WHERE e.topic_id = t.topic_id AND e.partition = p_partition AND e.epoch = tp.log_epoch;
        end_offset := coalesce(end_offset, 0);
    ELSE
        SELECT e.start_offset INTO end_offset FROM {{schema}}.log_epoch e
         WHERE e.topic_id = t.topic_id AND e.partition = p_partition AND e.epoch > p_epoch
         ORDER BY e.epoch LIMIT 1;
        end_offset := coalesce(end_offset, tp.next_offset);
    END IF;
    RETURN NEXT;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}._publish_copy_begin(p_topic_id integer, p_partition integer, p_count integer, p_max_record bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    base bigint;
    seq  oid;
BEGIN
    -- The Go client's reservation (statements/publish_copy_reserve.sql).
    {{sql publish_copy_reserve}} INTO base, seq;
    IF base IS NULL THEN
        -- The partition's first COPY publish creates its offset sequence
        -- (under the counter row's lock) and reserves again.
        SELECT c.offset_seq INTO seq FROM {{schema}}.topic_partition c
         WHERE c.topic_id = p_topic_id AND c.partition = p_partition FOR NO KEY UPDATE;
        IF FOUND AND seq IS NULL THEN
            PERFORM {{schema}}._offset_seq_create(p_topic_id, p_partition);
            {{sql publish_copy_reserve}} INTO base, seq;
        END IF;
    END IF;
    IF base IS NULL THEN
        PERFORM {{schema}}._raise('PM016', 'publish with publish()');
    END IF;
    -- The Go client's too (statements/publish_copy_point.sql).
    PERFORM {{sql publish_copy_point('pgmsg.copy_offset_seq', seq, base)}};
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}._publish_copy_end(p_topic_id integer, p_partition integer, p_count integer)
 RETURNS TABLE(base_offset bigint, published_at_us bigint, segments_low boolean)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    -- The Go client's answer (statements/publish_copy_end.sql), raising
    -- the error when the COPY did not store exactly p_count records.
    RETURN QUERY {{sql publish_copy_end('pgmsg.copy_offset_seq', (SELECT NULL::bigint FROM {{schema}}._raise('PM004', format('the COPY stored %s records, not the %s reserved', currval(current_setting('pgmsg.copy_offset_seq')::oid::regclass) - (c.next_offset - p_count) + 1, p_count))))}};
    IF NOT FOUND THEN
        -- No counter row this transaction's begin locked: nothing was
        -- reserved (a call without _publish_copy_begin()).
        PERFORM {{schema}}._raise('PM004', format('no COPY publish of partition %s of topic id %s began', p_partition, p_topic_id));
    END IF;
    PERFORM set_config('pgmsg.copy_offset_seq', '', true);
END $function$;

-- segment_ensure creates the segments of one partition ahead of need (two
-- segments of headroom past its next offset), in its own transaction:
-- _segments_ahead() for one partition. Returns the segments created, or
-- -1 when the topic's table stayed busy past the lock timeout (try again
-- later). Maintenance calls segments_ensure() for all partitions.
CREATE OR REPLACE FUNCTION {{schema}}.segment_ensure(p_topic text, p_partition integer)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    n integer;
BEGIN
    SELECT a.created INTO n FROM {{schema}}._segments_ahead(p_topic, ARRAY[p_partition]) a;
    RETURN n;
END $function$;

-- _segments_ahead creates the segments ahead of several partitions of one
-- topic in one transaction (the Go client's publisher, after commits that
-- report segments_low): up to each partition's next offset plus two
-- segments of headroom, after the segments attached
-- (segments_attached_end.sql). Each committed attach invalidates the
-- topic table's partition descriptor in every session, which rebuilds it
-- on its next publish, parsing every segment's bounds: one partition per
-- transaction, a new topic of 256 partitions cost its sessions 512
-- rebuilds of up to 768 segments while its first records went in. It
-- returns one row per partition (sorted, each once): the segments
-- created, or -1 for every partition when the topic's table stayed busy
-- past the lock timeout (another creator, a publish creating segments in
-- its fallback, DDL on the topic; nothing is created: try again later).
--
-- It takes no counter row: creators serialise on the topic table's lock,
-- and the counter row's segment_end, the end publishers write below,
-- stays where it is; a publish whose batch reaches past it moves it to
-- the segments' end (_segment_ensure(), which also says why a publisher
-- so never writes to a segment in the moments after its attach). It used
-- to move the counter rows itself, after all of its DDL: the 64
-- publishers of a new topic of 256 partitions held those rows one after
-- another, a row still held after the lock timeout rolled back the whole
-- attempt, and most of the DDL was done and undone (52 calls, 6.3 s, 86
-- segments kept; docs/benchmarks.md, "Scale").
CREATE OR REPLACE FUNCTION {{schema}}._segments_ahead(p_topic text, p_partitions integer[])
 RETURNS TABLE(partition integer, created integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t        {{schema}}.topic := {{schema}}._topic(p_topic);
    parts    integer[];
    counts   integer[] := '{}';
    p        integer;
    nxt      bigint;
    seg_end  bigint;
    from_end bigint;
    rel      text;
    grantees text;
BEGIN
    SELECT array_agg(DISTINCT u.p ORDER BY u.p) INTO parts FROM unnest(p_partitions) AS u(p);
    IF parts IS NULL THEN
        RETURN;
    END IF;
    FOREACH p IN ARRAY parts LOOP
        PERFORM {{schema}}._partition_check(t, p);
    END LOOP;
    -- Background work: give way rather than wait. A short lock_timeout
    -- makes it the one that yields when DDL on the topic (topic_delete)
    -- queues behind its lock; busy means try again later.
    PERFORM set_config('lock_timeout', '200ms', true);
    BEGIN
        PERFORM {{schema}}._segment_lock(t.topic_id);
        grantees := {{schema}}._record_grantees('SELECT');
        FOREACH p IN ARRAY parts LOOP
            -- The next offset as last committed: publishes move it on,
            -- which only makes this create less.
            SELECT c.next_offset, greatest(c.segment_end, coalesce({{sql segments_attached_end(c.topic_id, c.partition)}}, 0))
              INTO nxt, seg_end
              FROM {{schema}}.topic_partition c
             WHERE c.topic_id = t.topic_id AND c.partition = p;
            IF NOT FOUND THEN
                -- Deleted while this call waited for the lock.
                PERFORM {{schema}}._raise('PM001', format('unknown topic %s', quote_literal(t.name)));
            END IF;
            from_end := seg_end;
            WHILE seg_end < nxt + 2 * t.segment_records LOOP
                rel := format('record_%s_p%s_%s', t.topic_id, p, seg_end);
                PERFORM {{schema}}._segment_unseen(t.topic_id, p, seg_end);
                EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I)', {{schema_lit}}, rel, {{schema_lit}}, 'record_' || t.topic_id);
                EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%s, %s) TO (%s, %s)',
                               {{schema_lit}}, 'record_' || t.topic_id, {{schema_lit}}, rel,
                               p, seg_end, p, seg_end + t.segment_records);
                IF grantees IS NOT NULL THEN
                    EXECUTE format('GRANT SELECT ON %I.%I TO %s', {{schema_lit}}, rel, grantees);
                END IF;
                INSERT INTO {{schema}}.segment (topic_id, partition, start_offset, end_offset, relname)
                VALUES (t.topic_id, p, seg_end, seg_end + t.segment_records, rel);
                seg_end := seg_end + t.segment_records;
            END LOOP;
            counts := counts || ((seg_end - from_end) / t.segment_records)::integer;
        END LOOP;
    EXCEPTION
        WHEN lock_not_available THEN
            -- The topic's table (or a segment's DDL) busy: everything of
            -- this call is rolled back; give up for now.
            counts := array_fill(-1, ARRAY[cardinality(parts)]);
        WHEN undefined_table THEN
            -- The topic's table was dropped between the lookup and the lock.
            PERFORM {{schema}}._raise('PM001', format('unknown topic %s', quote_literal(t.name)));
    END;
    RETURN QUERY SELECT u.p, u.n FROM unnest(parts, counts) AS u(p, n) ORDER BY u.p;
END $function$;

-- segments_ensure creates missing segments ahead of need for every
-- partition whose segments run low (segments_low.sql: publishers also do
-- it on the way), one topic at a time (_segments_ahead()); a topic whose
-- table stays busy is left for the next run. A partition never published
-- to, or to less than half of its first segment, keeps the one segment it
-- was created with: topics that are never written cost no more segments.
-- Returns the partitions that got segments.
CREATE OR REPLACE FUNCTION {{schema}}.segments_ensure()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    r record;
    k integer;
    n integer := 0;
BEGIN
    FOR r IN
        SELECT t.name, array_agg(tp.partition ORDER BY tp.partition) AS parts
        FROM {{schema}}.topic_partition tp
        JOIN {{schema}}.topic t ON t.topic_id = tp.topic_id
        WHERE tp.next_offset > 0
          AND {{sql segments_low(tp.next_offset, tp.segment_end, t.segment_records, tp.topic_id, tp.partition)}}
        GROUP BY t.topic_id, t.name
        ORDER BY t.topic_id
    LOOP
        BEGIN
            SELECT count(*) INTO k FROM {{schema}}._segments_ahead(r.name, r.parts) a WHERE a.created > 0;
            n := n + k;
        EXCEPTION WHEN SQLSTATE 'PM001' THEN
            -- The topic was deleted meanwhile.
            NULL;
        END;
    END LOOP;
    RETURN n;
END $function$;

-- _segment_relname names the table of the segment of partition
-- p_partition of topic p_topic_id that starts at p_start, as
-- _segment_create names it, if that table is a partition of the topic's
-- table; else NULL. Owner-run code takes segment tables' names from here,
-- never from a column another role could write (docs/operations.md, "What the owner's code trusts").
CREATE OR REPLACE FUNCTION {{schema}}._segment_relname(p_topic_id integer, p_partition integer, p_start bigint)
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT c.relname::text FROM pg_class c
      JOIN pg_inherits i ON i.inhrelid = c.oid
     WHERE c.relnamespace = to_regnamespace(quote_ident({{schema_lit}}))
       AND c.relname = format('record_%s_p%s_%s', p_topic_id, p_partition, p_start)
       AND i.inhparent = to_regclass(format('%I.%I', {{schema_lit}}, 'record_' || p_topic_id))
$function$;

-- _segment_bytes: on-disk size of one segment (heap, index, TOAST); NULL
-- for NULL.
CREATE OR REPLACE FUNCTION {{schema}}._segment_bytes(p_relname text)
 RETURNS bigint
 LANGUAGE sql
 STABLE STRICT
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT pg_total_relation_size(format('%I.%I', {{schema_lit}}, p_relname)::regclass)
$function$;

-- ---------------------------------------------------------------------------
-- Kafka-compatible partitioner: murmur2 exactly as Kafka's
-- org.apache.kafka.common.utils.Utils.murmur2, then toPositive % partitions.
-- 32-bit multiplication is split so bigint never overflows.
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION {{schema}}._mul32(a bigint, b bigint)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT ((a * (b & 65535)) + (((a * (b >> 16)) & 65535) << 16)) & 4294967295
$function$;

-- murmur2 with _mul32 written out. _mul32 is a SQL function that the
-- planner inlined into murmur2's expressions; a function with a SET clause is
-- never inlined, and calling it (three times per 4 bytes of key) made
-- partition_for_key some 25 times slower. Same arithmetic, same results
-- (TestMurmur2MatchesKafka checks them against Kafka's).
CREATE OR REPLACE FUNCTION {{schema}}.murmur2(p_data bytea)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    len  integer := length(p_data);
    m_lo constant bigint := 59797;        -- 0x5bd1e995 & 0xffff
    m_hi constant bigint := 23505;        -- 0x5bd1e995 >> 16
    h    bigint := (2538058380 # len) & 4294967295;  -- seed 0x9747b28c ^ length
    k    bigint;
    i    integer := 0;
    tail integer := len % 4;
    base integer := len - len % 4;
BEGIN
    WHILE i < base LOOP
        k := get_byte(p_data, i)::bigint
           | (get_byte(p_data, i + 1)::bigint << 8)
           | (get_byte(p_data, i + 2)::bigint << 16)
           | (get_byte(p_data, i + 3)::bigint << 24);
        k := ((k * m_lo) + (((k * m_hi) & 65535) << 16)) & 4294967295;
        k := k # (k >> 24);
        k := ((k * m_lo) + (((k * m_hi) & 65535) << 16)) & 4294967295;
        h := ((h * m_lo) + (((h * m_hi) & 65535) << 16)) & 4294967295;
        h := h # k;
        i := i + 4;
    END LOOP;
    IF tail = 3 THEN h := h # (get_byte(p_data, base + 2)::bigint << 16); END IF;
    IF tail >= 2 THEN h := h # (get_byte(p_data, base + 1)::bigint << 8); END IF;
    IF tail >= 1 THEN
        h := h # get_byte(p_data, base)::bigint;
        h := ((h * m_lo) + (((h * m_hi) & 65535) << 16)) & 4294967295;
    END IF;
    h := h # (h >> 13);
    h := ((h * m_lo) + (((h * m_hi) & 65535) << 16)) & 4294967295;
    h := h # (h >> 15);
    IF h >= 2147483648 THEN h := h - 4294967296; END IF;
    RETURN h::integer;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}.partition_for_key(p_key bytea, p_partitions integer)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT CASE WHEN p_partitions BETWEEN 1 AND 1024
                THEN ({{schema}}.murmur2(p_key) & 2147483647) % p_partitions
                ELSE {{schema}}._invalid_partitions(p_partitions) END
$function$;

-- ---------------------------------------------------------------------------
-- Publishing (the Go client's hot path: internal/store/log_publish.go calls
-- _publish_direct() and publish(), log_publish_copy.go runs COPY between
-- the statements of _publish_copy_begin() and _publish_copy_end(); the
-- statements they share are in internal/migration/statements)
-- ---------------------------------------------------------------------------

-- publish appends a batch of records to a topic in the caller's transaction
-- and returns one row per partition written: its first offset and count.
-- Arrays are parallel (keys, headers and timestamps may be NULL or shorter:
-- missing entries are NULL). Partition: p_partition if given, else each
-- record's key hashed as Kafka does, else one random partition for all
-- unkeyed records of the call. Partitions are locked in ascending order so
-- concurrent multi-partition publishes cannot deadlock.
CREATE OR REPLACE FUNCTION {{schema}}.publish(p_topic text, p_values bytea[], p_keys bytea[] DEFAULT NULL::bytea[], p_headers jsonb[] DEFAULT NULL::jsonb[], p_timestamps timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_partition integer DEFAULT NULL::integer, p_notify boolean DEFAULT true)
 RETURNS TABLE(partition integer, base_offset bigint, record_count integer, "timestamp" timestamp with time zone, segments_low boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
    -- search_path saves and restores it, and publish is hot.
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
END $function$;

-- _publish_direct appends one partition's batch in one statement, as
-- publish() does on its common path: reserve the offsets on the
-- partition's counter row (its lock orders publishers) and insert the
-- records. It is the Go client's hot path (store.PublishDirect): one
-- statement planned once per session. It appends nothing and returns no
-- row when publish() has more to do: a topic with backpressure settings, a
-- batch that reaches past the segments created so far, or anything
-- publish() refuses (an unknown topic or partition, an empty batch, keys,
-- headers or timestamps longer than the values, a timestamp outside the
-- UTC years 0001..9999, a record larger than max_record_bytes). It runs as the owner, so
-- that producers append only through pgmsg's rules: no role but
-- the owner writes the counter rows or the record table.
CREATE OR REPLACE FUNCTION {{schema}}._publish_direct(p_topic text, p_partition integer, p_values bytea[], p_keys bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[])
 RETURNS TABLE(base_offset bigint, published_at timestamp with time zone, segments_low boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH t AS (
        SELECT tt.topic_id, tt.segment_records, tt.max_record_bytes FROM {{schema}}.topic tt
        WHERE tt.name = p_topic AND NOT tt.config ?| ARRAY['max_lag_records', 'max_lag_bytes']
    ), r AS (
        UPDATE {{schema}}.topic_partition c SET next_offset = c.next_offset + cardinality(p_values)
          FROM t
         WHERE c.topic_id = t.topic_id AND c.partition = p_partition
           AND c.next_offset + cardinality(p_values) <= c.segment_end
           -- The first publish on a new timeline (a promoted standby) is
           -- publish()'s: it starts a new log epoch. _timeline() written
           -- out: a call of it would save and restore its pinned settings.
           AND c.log_timeline = {{sql timeline}}
           -- What publish() checks and the Go client checked before: a
           -- caller of this function gets no further than publish() would.
           AND cardinality(p_values) > 0
           AND coalesce(cardinality(p_keys), 0) <= cardinality(p_values)
           AND coalesce(cardinality(p_headers), 0) <= cardinality(p_values)
           AND coalesce(cardinality(p_timestamps), 0) <= cardinality(p_values)
           AND NOT EXISTS (SELECT 1 FROM unnest(p_timestamps) AS u(ts) WHERE NOT {{schema}}._time_ok(u.ts))
           AND NOT EXISTS (SELECT 1 FROM unnest(p_values, p_keys, p_headers) AS u(v, k, h)
                            WHERE coalesce(octet_length(u.v), 0) + coalesce(octet_length(u.k), 0)
                                  + coalesce(octet_length(u.h::text), 0) > t.max_record_bytes)
        RETURNING c.topic_id, c.next_offset - cardinality(p_values) AS base,
                  {{sql segments_low(c.next_offset, c.segment_end, t.segment_records, c.topic_id, c.partition)}} AS low
    ), ins AS (
        {{sql publish_records(r.topic_id, p_partition, r.base, statement_timestamp(), p_values, p_keys, p_headers, p_timestamps)}}
        CROSS JOIN r
    )
    SELECT r.base, statement_timestamp(), r.low FROM r;
END $function$;

-- _kafka_publish appends one partition's batch of a Kafka idempotent
-- producer (the Kafka listener's Produce, store.KafkaPublish) in one
-- statement: under the producer's lock on the partition it applies
-- Kafka's sequence rule and appends with _publish_direct(), or with
-- publish() when _publish_direct() leaves the batch to it (backpressure,
-- segments to create, a record it refuses, a new timeline). The rule:
-- the batch the producer stored last on the partition, sent again with
-- the same sequences, is a retry (outcome 'duplicate', its stored offset
-- and time returned, nothing written); a batch wholly before it is 'old'
-- (Kafka's DUPLICATE_SEQUENCE_NUMBER); a producer's first batch must
-- start at 0 and every later one right after the last stored
-- ('out_of_order' otherwise, with the last stored batch's sequences). An
-- unknown topic or partition is 'unknown'; publish()'s errors are
-- raised. It runs as its caller (the listener's role writes
-- producer_state; _publish_direct() and publish() run as the owner).
CREATE OR REPLACE FUNCTION {{schema}}._kafka_publish(p_topic text, p_partition integer, p_producer_id text, p_sequence bigint, p_values bytea[], p_keys bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[])
 RETURNS TABLE(outcome text, base_offset bigint, published_at timestamp with time zone, segments_low boolean, first_sequence bigint, last_sequence bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    st     record;
    d      record;
    v_last bigint := p_sequence + coalesce(cardinality(p_values), 0) - 1;
BEGIN
    PERFORM {{sql kafka_producer_lock({{schema_lit}}, p_topic, p_partition, p_producer_id)}};
    -- A statement after the lock's: its snapshot sees what the previous
    -- holder committed.
    SELECT c.topic_id, s.first_sequence, s.last_sequence, s.base_offset, s."timestamp" INTO st
      FROM {{schema}}.topic t
      JOIN {{schema}}.topic_partition c ON c.topic_id = t.topic_id AND c.partition = p_partition
      LEFT JOIN {{schema}}.producer_state s
             ON s.topic_id = c.topic_id AND s.partition = c.partition AND s.producer_id = p_producer_id
     WHERE t.name = p_topic;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'unknown'::text, NULL::bigint, NULL::timestamptz, false, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    IF NOT {{sql kafka_sequence_next(st.last_sequence, p_sequence)}} THEN
        IF st.first_sequence = p_sequence AND st.last_sequence = v_last THEN
            RETURN QUERY SELECT 'duplicate'::text, st.base_offset, st."timestamp", false, st.first_sequence, st.last_sequence;
        ELSIF v_last <= st.last_sequence THEN
            RETURN QUERY SELECT 'old'::text, NULL::bigint, NULL::timestamptz, false, st.first_sequence, st.last_sequence;
        ELSE
            RETURN QUERY SELECT 'out_of_order'::text, NULL::bigint, NULL::timestamptz, false, st.first_sequence, st.last_sequence;
        END IF;
        RETURN;
    END IF;
    SELECT x.base_offset, x.published_at, x.segments_low INTO d
      FROM {{schema}}._publish_direct(p_topic, p_partition, p_values, p_keys, p_headers, p_timestamps) x;
    IF NOT FOUND THEN
        SELECT x.base_offset, x."timestamp" AS published_at, x.segments_low INTO d
          FROM {{schema}}.publish(p_topic, p_values, p_keys, p_headers, p_timestamps, p_partition, false) x;
    END IF;
    {{sql producer_state_save(VALUES (st.topic_id, p_partition, p_producer_id, p_sequence, v_last, d.base_offset, cardinality(p_values), coalesce(p_timestamps[1], d.published_at)))}};
    RETURN QUERY SELECT 'stored'::text, d.base_offset, d.published_at, d.segments_low, p_sequence, v_last;
END $function$;

-- publish_idempotent publishes as publish() does, as producer p_producer_id
-- with the records numbered from p_sequence in the order they are stored:
-- by partition, then in the order given. The partition of an unkeyed
-- record is drawn from the producer id and the sequence instead of at
-- random, so that a retry lands where the first attempt did. Every
-- partition's batch is a retry (duplicate true: nothing written, the
-- stored offsets and publish time returned) or none is: a call that is
-- partly stored is refused with PM015. Other errors are publish()'s.
CREATE OR REPLACE FUNCTION {{schema}}.publish_idempotent(p_topic text, p_producer_id text, p_sequence bigint, p_values bytea[], p_keys bytea[] DEFAULT NULL::bytea[], p_headers jsonb[] DEFAULT NULL::jsonb[], p_timestamps timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_partition integer DEFAULT NULL::integer, p_notify boolean DEFAULT true)
 RETURNS TABLE(partition integer, base_offset bigint, record_count integer, "timestamp" timestamp with time zone, segments_low boolean, duplicate boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    t      {{schema}}.topic;
    n      integer := coalesce(cardinality(p_values), 0);
    spread integer;
    g      record;
    r      record;
    st     {{schema}}.producer_state;
    seq    bigint;
    parts  integer[] := '{}';
    dups   integer := 0;
BEGIN
    t := {{schema}}._topic(p_topic);
    IF p_producer_id IS NULL OR octet_length(p_producer_id) NOT BETWEEN 1 AND 200 THEN
        PERFORM {{schema}}._raise('PM004', 'producer id must be 1 to 200 bytes');
    END IF;
    IF n = 0 THEN
        PERFORM {{schema}}._raise('PM010', 'empty batch: publish needs at least one record');
    END IF;
    IF p_sequence IS NULL OR p_sequence < 0 OR p_sequence > 9223372036854775807 - n THEN
        PERFORM {{schema}}._raise('PM004', format('sequence must be from 0 to %s, got %s',
                                                  9223372036854775807 - n, coalesce(p_sequence::text, 'NULL')));
    END IF;
    -- publish() checks the rest (a partition out of range included: it
    -- has no counter row and no state, so it reaches publish()); the
    -- arrays' lengths are checked here because they shape the batches
    -- compared with the stored ones, before publish() runs.
    IF coalesce(cardinality(p_keys), 0) > n OR coalesce(cardinality(p_headers), 0) > n
       OR coalesce(cardinality(p_timestamps), 0) > n THEN
        PERFORM {{schema}}._raise('PM004', 'keys, headers and timestamps must not be longer than values');
    END IF;
    spread := ((hashtextextended(p_producer_id || '/' || p_sequence, 0) & 9223372036854775807) % t.partitions)::integer;

    -- Check every partition's batch under its counter row lock (taken in
    -- partition order, as every publisher does) before writing any.
    seq := p_sequence;
    FOR g IN
        SELECT coalesce(p_partition, CASE WHEN u.k IS NULL THEN spread ELSE {{schema}}.partition_for_key(u.k, t.partitions) END) AS p,
               count(*)::integer AS c
          FROM unnest(p_values, p_keys) AS u(v, k)
         GROUP BY 1 ORDER BY 1
    LOOP
        PERFORM 1 FROM {{schema}}.topic_partition c
         WHERE c.topic_id = t.topic_id AND c.partition = g.p FOR NO KEY UPDATE;
        SELECT * INTO st FROM {{schema}}.producer_state s
         WHERE s.topic_id = t.topic_id AND s.partition = g.p AND s.producer_id = p_producer_id;
        IF FOUND THEN
            IF st.first_sequence = seq AND st.last_sequence = seq + g.c - 1 THEN
                dups := dups + 1;
            ELSIF seq <= st.last_sequence THEN
                PERFORM {{schema}}._raise('PM015', format(
                    'sequence out of order: producer %s sent records %s to %s for topic %s partition %s, '
                    'whose last stored batch is %s to %s (a retry sends the same records with the same sequence)',
                    left(quote_literal(p_producer_id), 210), seq, seq + g.c - 1, quote_literal(t.name), g.p,
                    st.first_sequence, st.last_sequence));
            END IF;
        END IF;
        parts := parts || g.p;
        seq := seq + g.c;
    END LOOP;
    IF dups > 0 THEN
        IF dups < cardinality(parts) THEN
            PERFORM {{schema}}._raise('PM015', format(
                'sequence out of order: producer %s sent records %s to %s for topic %s, of which only some partitions'' batches are stored',
                left(quote_literal(p_producer_id), 210), p_sequence, p_sequence + n - 1, quote_literal(t.name)));
        END IF;
        RETURN QUERY SELECT s.partition, s.base_offset, s.record_count, s."timestamp", false, true
                       FROM {{schema}}.producer_state s
                      WHERE s.topic_id = t.topic_id AND s.producer_id = p_producer_id AND s.partition = ANY (parts)
                      ORDER BY s.partition;
        RETURN;
    END IF;

    seq := p_sequence;
    FOR g IN
        SELECT coalesce(p_partition, CASE WHEN u.k IS NULL THEN spread ELSE {{schema}}.partition_for_key(u.k, t.partitions) END) AS p,
               array_agg(u.v ORDER BY u.ord) AS vs, array_agg(u.k ORDER BY u.ord) AS ks,
               array_agg(u.h ORDER BY u.ord) AS hs, array_agg(u.ts ORDER BY u.ord) AS tss
          FROM unnest(p_values, p_keys, p_headers, p_timestamps) WITH ORDINALITY AS u(v, k, h, ts, ord)
         GROUP BY 1 ORDER BY 1
    LOOP
        FOR r IN SELECT * FROM {{schema}}.publish(p_topic, g.vs, g.ks, g.hs, g.tss, g.p, false) LOOP
            {{sql producer_state_save(VALUES (t.topic_id, g.p, p_producer_id, seq, seq + r.record_count - 1, r.base_offset, r.record_count, r."timestamp"))}};
            seq := seq + r.record_count;
            RETURN QUERY SELECT r.partition, r.base_offset, r.record_count, r."timestamp", r.segments_low, false;
        END LOOP;
    END LOOP;
    IF p_notify THEN
        PERFORM pg_notify({{schema_lit}} || '_log', t.name);
    END IF;
END $function$;

-- _append reserves offsets on one partition and inserts the batch, in the
-- caller's transaction. The counter UPDATE takes the partition's row lock,
-- held until commit: that is what orders commits by offset. It is the only
-- lock a publisher waits on.
CREATE OR REPLACE FUNCTION {{schema}}._append(t {{schema}}.topic, p_partition integer, p_values bytea[], p_keys bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_now timestamp with time zone, OUT base bigint, OUT segments_low boolean)
 RETURNS record
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_custom_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    n        integer := cardinality(p_values);
    seg_end  bigint;
    n_bytes  bigint;
    byte_end bigint;
    tl       integer;
    appended text;
    mark     text := format('/%s.%s/', {{schema_lit}}, t.topic_id);
    seg_start bigint;
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
        RETURNING c.next_offset - n, c.segment_end, c.next_byte, c.log_timeline INTO base, seg_end, byte_end, tl;
        PERFORM {{schema}}._backpressure_bytes(t, p_partition, base, byte_end, n_bytes);
    ELSE
        UPDATE {{schema}}.topic_partition c
           SET next_offset = c.next_offset + n
         WHERE c.topic_id = t.topic_id AND c.partition = p_partition
        RETURNING c.next_offset - n, c.segment_end, c.log_timeline INTO base, seg_end, tl;
    END IF;
    IF tl IS DISTINCT FROM {{schema}}._timeline() THEN
        -- The first publish on a new timeline (a promoted standby): the
        -- records from base on are a new epoch of the partition's log.
        PERFORM {{schema}}._log_epoch_bump(t.topic_id, p_partition, base);
    END IF;
    IF base + n > seg_end THEN
        -- Fallback: segments are normally created ahead (_segments_ahead,
        -- maintenance's log.segments) without moving the counter row's
        -- end; a publish past that end moves it to theirs, creating
        -- segments first when they do not reach far enough.
        seg_end := {{schema}}._segment_ensure(t.topic_id, p_partition, seg_end, t.segment_records, base + n);
    END IF;
    segments_low := {{sql segments_low(base + n, seg_end, t.segment_records, t.topic_id, p_partition)}};
    -- A transaction's later append to a topic routes its rows with the
    -- topic table's partition list as of its first: the lock on that
    -- table is held already, so taking it again processes no
    -- invalidation, and a segment another session attached in between
    -- (while this append waited on the counter row, say) is missing from
    -- the list: "no partition of relation record_N found for row". Taking
    -- a lock this transaction does not hold yet, on the segments the
    -- batch goes to, processes the pending invalidations first. The first
    -- append of a topic in a transaction needs none of it: its insert
    -- locks the topic table afresh.
    appended := current_setting('pgmsg.appended', true);
    IF position(mark IN coalesce(appended, '')) > 0 THEN
        FOR seg_start IN
            SELECT s.start_offset FROM {{schema}}.segment s
             WHERE s.topic_id = t.topic_id AND s.partition = p_partition
               AND s.start_offset < base + n AND s.end_offset > base
        LOOP
            EXECUTE format('LOCK TABLE %I.%I IN ROW EXCLUSIVE MODE', {{schema_lit}},
                           format('record_%s_p%s_%s', t.topic_id, p_partition, seg_start));
        END LOOP;
    ELSE
        PERFORM set_config('pgmsg.appended', coalesce(appended, '') || mark, true);
    END IF;
    IF n_bytes IS NULL THEN
        {{sql publish_records(t.topic_id, p_partition, base, p_now, p_values, p_keys, p_headers, p_timestamps)}};
    ELSE
        INSERT INTO {{schema}}.record (topic_id, partition, "offset", "timestamp", key, value, headers, byte_position)
        SELECT t.topic_id, p_partition, base + u.ord - 1, coalesce(u.ts, p_now), u.k, u.v, u.h,
               byte_end - n_bytes + coalesce(sum(coalesce(octet_length(u.v), 0) + coalesce(octet_length(u.k), 0))
                                             OVER (ORDER BY u.ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
        FROM unnest(p_values, p_keys, p_headers, p_timestamps) WITH ORDINALITY AS u(v, k, h, ts, ord);
    END IF;
END $function$;

-- _backpressure_wait_ms is how long publishers keep retrying a publish
-- refused with PM014: the topic's backpressure_timeout_ms, default 5000
-- (the Go library's BackpressureTimeoutDefault).
CREATE OR REPLACE FUNCTION {{schema}}._backpressure_wait_ms(t {{schema}}.topic)
 RETURNS bigint
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT coalesce(CASE WHEN jsonb_typeof(t.config->'backpressure_timeout_ms') = 'number'
                         THEN (t.config->>'backpressure_timeout_ms')::numeric::bigint END, 5000)
$function$;

-- _backpressure raises PM014 when publishing p_n more records would put the
-- partition more than the topic's max_lag_records ahead of its slowest
-- group. Only topics with the setting pay for the check (primary-key reads
-- of the group cursors). Expired groups are deleted by maintenance and stop
-- counting then.
CREATE OR REPLACE FUNCTION {{schema}}._backpressure(t {{schema}}.topic, p_partition integer, p_n integer)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    max_lag bigint;
    tip     bigint;
    slowest bigint;
    grp     text;
BEGIN
    BEGIN
        max_lag := (t.config->>'max_lag_records')::bigint;
    EXCEPTION WHEN OTHERS THEN
        RETURN;
    END;
    SELECT tp.next_offset INTO tip FROM {{schema}}.topic_partition tp
     WHERE tp.topic_id = t.topic_id AND tp.partition = p_partition;
    SELECT c.next_offset, c.group_name INTO slowest, grp FROM {{schema}}.group_cursor c
     WHERE c.topic_id = t.topic_id AND c.partition = p_partition
     ORDER BY c.next_offset LIMIT 1;
    IF slowest IS NOT NULL AND tip + p_n - slowest > max_lag THEN
        PERFORM {{schema}}._raise_backpressure('PM014', format(
            'backpressure: topic %s partition %s would be %s records ahead of group %s (max_lag_records %s)',
            quote_literal(t.name), p_partition, tip + p_n - slowest, quote_literal(grp), max_lag),
            {{schema}}._backpressure_wait_ms(t));
    END IF;
END $function$;

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
CREATE OR REPLACE FUNCTION {{schema}}._backpressure_bytes(t {{schema}}.topic, p_partition integer, p_base bigint, p_byte_end bigint, p_bytes bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_custom_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
        PERFORM {{schema}}._raise_backpressure('PM014', format(
            'backpressure: topic %s partition %s would be %s bytes ahead of group %s (max_lag_bytes %s)',
            quote_literal(t.name), p_partition, behind, quote_literal(grp), max_lag),
            {{schema}}._backpressure_wait_ms(t));
    END IF;
END $function$;

-- producer_state_expire deletes up to p_max producer states idle for longer
-- than p_older_than (maintenance's producer_ttl, default 7 days, as
-- Kafka's transactional.id.expiration.ms); returns how many.
CREATE OR REPLACE FUNCTION {{schema}}.producer_state_expire(p_older_than interval, p_max integer DEFAULT 10000)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    n bigint;
BEGIN
    IF p_older_than IS NULL OR p_older_than < interval '0' OR p_max IS NULL OR p_max < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'producer_state_expire needs a non-negative age and a positive maximum');
    END IF;
    DELETE FROM {{schema}}.producer_state s
     WHERE s.ctid = ANY (ARRAY(SELECT x.ctid FROM {{schema}}.producer_state x
                                WHERE x.updated_at < clock_timestamp() - p_older_than LIMIT p_max));
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $function$;

-- ---------------------------------------------------------------------------
-- Claims, commits and reads (the Go consumer's hot path:
-- internal/store/log_claim.go and log_claim_gather.go)
-- ---------------------------------------------------------------------------

-- _partition_check raises PM005 unless p_partition is one of t's
-- partitions (the cold paths; publish() checks inline).
CREATE OR REPLACE FUNCTION {{schema}}._partition_check(t {{schema}}.topic, p_partition integer)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_partition IS NULL OR p_partition < 0 OR p_partition >= t.partitions THEN
        PERFORM {{schema}}._raise('PM005', format('partition %s out of range: topic %s has %s partitions',
                                                  coalesce(p_partition::text, 'NULL'), quote_literal(t.name), t.partitions));
    END IF;
END $function$;

-- _position resolves 'earliest', 'latest', an offset or a timestamp to an
-- offset of one partition. A timestamp resolves to the first record at or
-- after it, else the end (_offset_for_time, through the time index).
CREATE OR REPLACE FUNCTION {{schema}}._position(p_topic_id integer, p_partition integer, p_spec text)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    tp {{schema}}.topic_partition;
    ts timestamptz;
    o  bigint;
BEGIN
    SELECT * INTO tp FROM {{schema}}.topic_partition WHERE topic_id = p_topic_id AND partition = p_partition;
    IF p_spec IS NULL OR p_spec = 'earliest' THEN
        RETURN tp.start_offset;
    ELSIF p_spec = 'latest' THEN
        RETURN tp.next_offset;
    ELSIF p_spec ~ '^-?[0-9]{1,19}$' THEN
        BEGIN
            o := p_spec::bigint;
        EXCEPTION WHEN numeric_value_out_of_range THEN
            PERFORM {{schema}}._raise('PM011', format('offset %s out of range', p_spec));
        END;
        IF o < 0 THEN
            PERFORM {{schema}}._raise('PM011', format('offset must not be negative, got %s', o));
        END IF;
        RETURN least(greatest(o, tp.start_offset), tp.next_offset);
    END IF;
    -- Times as every surface takes them (wire.ParseTime in Go): RFC 3339
    -- with a zone, or a duration ago in h, m, s and ms ("90m", "1h30m").
    -- Not PostgreSQL's other literals ('yesterday', 'epoch', zoneless):
    -- a mistyped position must fail, not move a cursor.
    BEGIN
        IF p_spec ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$' THEN
            ts := p_spec::timestamptz;
        ELSIF p_spec ~ '^([0-9]{1,9}(\.[0-9]{1,9})?(h|m|s|ms))+$' THEN
            ts := clock_timestamp() - regexp_replace(p_spec, '([0-9.]+)(ms|h|m|s)', '\1 \2 ', 'g')::interval;
        END IF;
    EXCEPTION WHEN OTHERS THEN
        ts := NULL;
    END;
    IF ts IS NULL THEN
        PERFORM {{schema}}._raise('PM011', format('invalid position %s: use earliest, latest, an offset, an RFC 3339 time '
                                                  '(2026-12-01T10:00:00Z) or a duration ago (90m, 1h30m)',
                                                  left(quote_literal(p_spec), 80)));
    END IF;
    RETURN {{schema}}._offset_for_time(tp, ts);
END $function$;

-- _offset_for_time returns the first offset of a partition whose record's
-- timestamp is at or after p_ts, else the partition's end. It reads from
-- the last time_index entry whose max_timestamp is before p_ts (no earlier
-- record can qualify) and, when a later entry exists, stops before it
-- (that entry's span holds a qualifying record): one stride's worth of
-- records through the primary key. Without entries (no maintenance run
-- yet) it reads the partition from its start.
CREATE OR REPLACE FUNCTION {{schema}}._offset_for_time(tp {{schema}}.topic_partition, p_ts timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET plan_cache_mode TO 'force_custom_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    lo bigint;
    hi bigint;
    o  bigint;
BEGIN
    SELECT max(ti."offset") INTO lo FROM {{schema}}.time_index ti
     WHERE ti.topic_id = tp.topic_id AND ti.partition = tp.partition AND ti.max_timestamp < p_ts;
    SELECT min(ti."offset") INTO hi FROM {{schema}}.time_index ti
     WHERE ti.topic_id = tp.topic_id AND ti.partition = tp.partition AND ti.max_timestamp >= p_ts
       AND ti."offset" > coalesce(lo, -1);
    lo := greatest(coalesce(lo, tp.start_offset), tp.start_offset);
    SELECT r."offset" INTO o FROM {{schema}}.record r
     WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition
       AND r."offset" >= lo AND r."offset" < coalesce(hi, tp.next_offset) AND r."timestamp" >= p_ts
     ORDER BY r."offset" LIMIT 1;
    IF o IS NULL AND hi IS NOT NULL THEN
        -- Compaction deleted the record that made the entry: read on.
        SELECT r."offset" INTO o FROM {{schema}}.record r
         WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition
           AND r."offset" >= hi AND r."offset" < tp.next_offset AND r."timestamp" >= p_ts
         ORDER BY r."offset" LIMIT 1;
    END IF;
    RETURN coalesce(o, tp.next_offset);
END $function$;

-- offset_for_time returns the first offset of a partition whose record's
-- timestamp is at or after p_timestamp, or the partition's end offset when
-- none is (Kafka's ListOffsets by timestamp). PM001, PM005.
CREATE OR REPLACE FUNCTION {{schema}}.offset_for_time(p_topic text, p_partition integer, p_timestamp timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t  {{schema}}.topic := {{schema}}._topic(p_topic);
    tp {{schema}}.topic_partition;
BEGIN
    PERFORM {{schema}}._partition_check(t, p_partition);
    IF p_timestamp IS NULL THEN
        PERFORM {{schema}}._raise('PM004', 'timestamp must not be NULL');
    END IF;
    SELECT * INTO tp FROM {{schema}}.topic_partition x WHERE x.topic_id = t.topic_id AND x.partition = p_partition;
    RETURN {{schema}}._offset_for_time(tp, p_timestamp);
END $function$;

-- offsets_for_time is offset_for_time for every partition of a topic, in
-- partition order. PM001, PM004.
CREATE OR REPLACE FUNCTION {{schema}}.offsets_for_time(p_topic text, p_timestamp timestamp with time zone)
 RETURNS TABLE(partition integer, "offset" bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_topic);
BEGIN
    IF p_timestamp IS NULL THEN
        PERFORM {{schema}}._raise('PM004', 'timestamp must not be NULL');
    END IF;
    RETURN QUERY
    SELECT tp.partition, {{schema}}._offset_for_time(tp, p_timestamp)
      FROM {{schema}}.topic_partition tp WHERE tp.topic_id = t.topic_id ORDER BY tp.partition;
END $function$;

-- time_index_run extends the time index of every partition (maintenance:
-- task log.time_index): one entry per p_stride records committed since its
-- last entry, each read once through the primary key, at most p_max_records
-- records per call; and drops the entries that retention left behind the
-- partition's start. Returns the entries written.
CREATE OR REPLACE FUNCTION {{schema}}.time_index_run(p_stride integer DEFAULT 10000, p_max_records bigint DEFAULT 1000000)
 RETURNS integer
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_custom_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    tp     record;
    last   bigint;
    max_ts timestamptz;
    seg_ts timestamptz;
    budget bigint := greatest(coalesce(p_max_records, 1000000), 1);
    n      integer := 0;
BEGIN
    IF p_stride IS NULL OR p_stride < 16 THEN
        PERFORM {{schema}}._raise('PM004', 'stride must be at least 16');
    END IF;
    -- The entries retention left behind, in one statement; then only the
    -- partitions that store a stride of records or more: with thousands
    -- of idle topics a pass ran two statements for every partition.
    DELETE FROM {{schema}}.time_index ti USING {{schema}}.topic_partition x
     WHERE ti.topic_id = x.topic_id AND ti.partition = x.partition AND ti."offset" <= x.start_offset;
    FOR tp IN SELECT x.topic_id, x.partition, x.start_offset, x.next_offset FROM {{schema}}.topic_partition x
               WHERE x.next_offset - x.start_offset >= p_stride
               ORDER BY x.topic_id, x.partition LOOP
        SELECT ti."offset", ti.max_timestamp INTO last, max_ts FROM {{schema}}.time_index ti
         WHERE ti.topic_id = tp.topic_id AND ti.partition = tp.partition
         ORDER BY ti."offset" DESC LIMIT 1;
        IF last IS NULL THEN
            last := tp.start_offset;
            max_ts := '-infinity';
        END IF;
        WHILE last + p_stride <= tp.next_offset AND budget >= p_stride LOOP
            SELECT max(r."timestamp") INTO seg_ts FROM {{schema}}.record r
             WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition
               AND r."offset" >= last AND r."offset" < last + p_stride;
            last := last + p_stride;
            max_ts := greatest(max_ts, seg_ts);
            INSERT INTO {{schema}}.time_index (topic_id, partition, "offset", max_timestamp)
            VALUES (tp.topic_id, tp.partition, last, max_ts)
            ON CONFLICT DO NOTHING;
            budget := budget - p_stride;
            n := n + 1;
        END LOOP;
    END LOOP;
    RETURN n;
END $function$;

-- claim_range leases the next records of one partition to the caller, as
-- claim() does, but returns one row describing the claim instead of the
-- records: its partition, epoch, expiry, the first and last offset claimed
-- (inclusive), and the segment table that holds all of them (NULL when the
-- range spans two segments, once per segment_records records, no segment
-- covers it, or the caller may not read the segment: then read through the
-- record table). Read the records with
--   SELECT "offset", "timestamp", key, value, headers FROM <schema>.<relname>
--    WHERE topic_id = $1 AND partition = $2 AND "offset" BETWEEN $3 AND $4
--    ORDER BY "offset"
-- (a plain table: the statement runs from a cached generic plan).
-- Offsets missing from the range were removed by compaction; if none is
-- left, commit the claim (that moves the cursor past the range) and claim
-- again. p_commit_partition and p_commit_epoch, when given, first commit
-- that claim of the same group (as commit() does, raising PM008/PM009 if it
-- is no longer held, which rolls back the whole call). p_max_bytes cuts the
-- claim before the record that would take its key + value bytes past it
-- (at least one record). Returns no row when there is nothing to read.
CREATE OR REPLACE FUNCTION {{schema}}.claim_range(p_topic text, p_group text, p_max_records integer DEFAULT 100, p_lease interval DEFAULT '00:00:30'::interval, p_partition integer DEFAULT NULL::integer, p_start text DEFAULT 'earliest'::text, p_member text DEFAULT NULL::text, p_require_owner boolean DEFAULT false, p_async boolean DEFAULT false, p_commit_partition integer DEFAULT NULL::integer, p_commit_epoch bigint DEFAULT NULL::bigint, p_max_bytes bigint DEFAULT NULL::bigint)
 RETURNS TABLE(partition integer, claim_epoch bigint, claim_expires_at timestamp with time zone, first_offset bigint, last_offset bigint, topic_id integer, relname text, log_epoch integer)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
-- Written for the fewest statements on the path that claims: the checks
-- that only matter when nothing can be claimed (does the group exist, is
-- the member in it, is the partition assigned to it) run only then. That
-- is equivalent to checking first: a cursor row names a member as its
-- owner only while the member's row exists (group_heartbeat, group_leave
-- and _rebalance clear the owner in the transaction that removes the
-- member), so a row claimed under p_require_owner proves membership.
#variable_conflict use_column
DECLARE
    v_topic  integer;
    v_parts  integer;
    now_ts   timestamptz := clock_timestamp();
    c_part   integer;
    c_next   bigint;
    c_epoch  bigint;
    tip      bigint;
    v_last   bigint;
    seg_rel  text;
    seg_end  bigint;
    d_part   integer;  -- the partition whose claim this call commits
    d_epoch  bigint;
    d_end    bigint;
    d_exp    timestamptz;
    done_to  bigint;   -- where that commit moves its cursor
    created  boolean := false;
    l_epoch  integer;  -- the partition's log epoch
BEGIN
    -- A bad name is PM003 whatever else is wrong: the names are checked in
    -- each failure branch (none costs the claim that succeeds anything).
    IF p_max_records IS NULL OR p_max_records < 1 THEN
        PERFORM {{schema}}._check_name('topic', p_topic);
        PERFORM {{schema}}._check_name('group', p_group);
        PERFORM {{schema}}._raise('PM004', 'max_records must be at least 1');
    END IF;
    IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '366 days' THEN
        PERFORM {{schema}}._check_name('topic', p_topic);
        PERFORM {{schema}}._check_name('group', p_group);
        PERFORM {{schema}}._raise('PM004', 'lease must be positive and at most 366 days');
    END IF;
    IF p_max_bytes < 0 THEN
        PERFORM {{schema}}._check_name('topic', p_topic);
        PERFORM {{schema}}._check_name('group', p_group);
        PERFORM {{schema}}._raise('PM004', 'max_bytes must not be negative (NULL: no cap)');
    END IF;
    SELECT tt.topic_id, tt.partitions INTO v_topic, v_parts FROM {{schema}}.topic tt WHERE tt.name = p_topic;
    IF NOT FOUND THEN
        -- Bad names are PM003 whether or not the topic exists (a bad
        -- group's is otherwise raised by group_create() below).
        PERFORM {{schema}}._check_name('topic', p_topic);
        PERFORM {{schema}}._check_name('group', p_group);
        PERFORM {{schema}}._topic(p_topic);  -- raises PM001
    END IF;
    IF p_partition IS NOT NULL AND (p_partition < 0 OR p_partition >= v_parts) THEN
        PERFORM {{schema}}._check_name('group', p_group);  -- PM003 first
        PERFORM {{schema}}._raise('PM005', format('partition %s out of range: topic %s has %s partitions',
                                                  p_partition, quote_literal(p_topic), v_parts));
    END IF;
    IF p_commit_epoch IS NOT NULL THEN
        -- Lock and check the claim to commit; its cursor row is written once
        -- below: together with the new claim when that is on the same
        -- partition (a member that owns one partition writes one row version
        -- per claim cycle), else alone.
        SELECT c.claim_epoch, c.claim_end, c.claim_expires_at INTO d_epoch, d_end, d_exp
        FROM {{schema}}.group_cursor c
        WHERE c.topic_id = v_topic AND c.group_name = p_group AND c.partition = p_commit_partition
        FOR UPDATE;
        IF NOT FOUND OR d_epoch IS DISTINCT FROM p_commit_epoch OR d_exp IS NULL OR d_exp <= now_ts THEN
            -- Not held: _held raises the error commit() would (PM007/PM008/PM009).
            PERFORM {{schema}}._held(p_topic, p_group, p_commit_partition, p_commit_epoch);
        END IF;
        d_part := p_commit_partition;
        done_to := d_end + 1;
    END IF;

    LOOP
        -- The partition being committed counts as committed: unclaimed, its
        -- cursor at done_to (and, claimed most recently, picked last among
        -- the group's partitions with records).
        IF p_partition IS NOT NULL THEN
            -- One cursor row by its whole key (a plan that cannot mix up
            -- "any partition" with "this one" and visit every row of the
            -- group, and the versions a long snapshot keeps of them).
            SELECT c.partition, CASE WHEN c.partition = d_part THEN done_to ELSE c.next_offset END,
                   c.claim_epoch, tp.next_offset, tp.log_epoch INTO c_part, c_next, c_epoch, tip, l_epoch
            FROM {{schema}}.group_cursor c
            JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
            WHERE c.topic_id = v_topic AND c.group_name = p_group AND c.partition = p_partition
              AND (NOT p_require_owner OR (c.owner = p_member AND c.next_owner IS NULL))
              AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now_ts OR c.partition = d_part)
              AND tp.next_offset > CASE WHEN c.partition = d_part THEN done_to ELSE c.next_offset END
            FOR UPDATE OF c SKIP LOCKED;
        ELSE
            SELECT c.partition, CASE WHEN c.partition = d_part THEN done_to ELSE c.next_offset END,
                   c.claim_epoch, tp.next_offset, tp.log_epoch INTO c_part, c_next, c_epoch, tip, l_epoch
            FROM {{schema}}.group_cursor c
            JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
            WHERE c.topic_id = v_topic AND c.group_name = p_group
              AND (NOT p_require_owner OR (c.owner = p_member AND c.next_owner IS NULL))
              AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now_ts OR c.partition = d_part)
              AND tp.next_offset > CASE WHEN c.partition = d_part THEN done_to ELSE c.next_offset END
            ORDER BY c.claimed_at NULLS FIRST, c.partition
            LIMIT 1
            FOR UPDATE OF c SKIP LOCKED;
        END IF;
        EXIT WHEN FOUND;

        IF d_part IS NOT NULL THEN
            UPDATE {{schema}}.group_cursor c
               SET next_offset = done_to, claim_start = NULL, claim_end = NULL, claim_expires_at = NULL,
                   claim_owner = NULL, committed_at = now_ts
             WHERE c.topic_id = v_topic AND c.group_name = p_group AND c.partition = d_part;
            d_part := NULL;
            IF p_async AND NOT created THEN
                -- The riding commit alone: as below.
                PERFORM set_config('synchronous_commit', 'off', true);
            END IF;
        END IF;
        -- Nothing to claim: now the checks that explain why, or create the
        -- group and look again.
        IF NOT created AND NOT EXISTS (SELECT 1 FROM {{schema}}.consumer_group g
                                        WHERE g.topic_id = v_topic AND g.group_name = p_group) THEN
            PERFORM {{schema}}.group_create(p_topic, p_group, p_start);
            created := true;
            CONTINUE;
        END IF;
        IF p_require_owner THEN
            IF NOT EXISTS (SELECT 1 FROM {{schema}}.group_member m WHERE m.topic_id = v_topic
                           AND m.group_name = p_group AND m.member_id = p_member) THEN
                PERFORM {{schema}}._raise('PM013', format('member %s is not in group %s (left, or its session expired): heartbeat to rejoin',
                                                          left(quote_literal(coalesce(p_member, '')), 210), quote_literal(p_group)));
            END IF;
            IF p_partition IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM {{schema}}.group_cursor c WHERE c.topic_id = v_topic AND c.group_name = p_group
                   AND c.partition = p_partition AND c.owner = p_member AND c.next_owner IS NULL) THEN
                PERFORM {{schema}}._raise('PM012', format('partition %s of topic %s is not assigned to member %s',
                                                          p_partition, quote_literal(p_topic), left(quote_literal(p_member), 210)));
            END IF;
        END IF;
        RETURN;
    END LOOP;

    IF p_async AND NOT created THEN
        -- As in claim(): a lease lost in a crash is only a redelivery, and
        -- so is a riding commit lost in a crash (Consumer.Run's: nobody was
        -- told it was durable). Not when this call created the group (its
        -- start must be durable).
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF d_part IS NOT NULL AND c_part <> d_part THEN
        UPDATE {{schema}}.group_cursor c
           SET next_offset = done_to, claim_start = NULL, claim_end = NULL, claim_expires_at = NULL,
               claim_owner = NULL, committed_at = now_ts
         WHERE c.topic_id = v_topic AND c.group_name = p_group AND c.partition = d_part;
    END IF;

    v_last := least(tip - 1, c_next + p_max_records - 1);
    IF p_max_bytes IS NOT NULL THEN
        v_last := {{schema}}._claim_bytes_end(v_topic, c_part, c_next, v_last, p_max_bytes);
    END IF;
    SELECT s.relname, s.end_offset INTO seg_rel, seg_end FROM {{schema}}.segment s
     WHERE s.topic_id = v_topic AND s.partition = c_part AND s.start_offset <= c_next
     ORDER BY s.start_offset DESC LIMIT 1;
    IF NOT FOUND OR seg_end <= v_last
       OR NOT has_table_privilege(format('%I.%I', {{schema_lit}}, seg_rel), 'SELECT') THEN
        -- No segment, the range spans two, or the caller may read the record
        -- table but not this segment (a role granted table by table before
        -- the segment existed): read through the record table.
        seg_rel := NULL;
    END IF;

    -- The epoch is the claim's fencing token: random, never the one it
    -- replaces (_claim_token).
    c_epoch := {{schema}}._claim_token(c_epoch);
    claim_expires_at := now_ts + p_lease;
    UPDATE {{schema}}.group_cursor c
       SET next_offset = c_next, claim_epoch = c_epoch, claim_start = c_next,
           claim_end = v_last, claim_expires_at = claim_range.claim_expires_at,
           claim_owner = p_member, claimed_at = now_ts,
           committed_at = CASE WHEN c_part = d_part THEN now_ts ELSE c.committed_at END
     WHERE c.topic_id = v_topic AND c.group_name = p_group AND c.partition = c_part;
    partition := c_part;
    claim_epoch := c_epoch;
    first_offset := c_next;
    last_offset := v_last;
    topic_id := v_topic;
    relname := seg_rel;
    log_epoch := l_epoch;
    RETURN NEXT;
END $function$;

-- claim leases the next records of one partition to the caller and returns
-- them, in one round trip. It picks p_partition, or else the partition of
-- the topic with unread records and no live claim that was claimed least
-- recently. Returns no rows (and writes nothing) when there is nothing to
-- read. The claim lasts p_lease (database clock); commit() with the
-- returned claim_epoch advances the cursor, and a claim that expires first
-- is delivered again from the cursor. The group is created at p_start on
-- first use. Cursor rows are taken FOR UPDATE SKIP LOCKED: claimers never
-- wait on each other.
CREATE OR REPLACE FUNCTION {{schema}}.claim(p_topic text, p_group text, p_max_records integer DEFAULT 100, p_lease interval DEFAULT '00:00:30'::interval, p_partition integer DEFAULT NULL::integer, p_max_bytes bigint DEFAULT NULL::bigint, p_start text DEFAULT 'earliest'::text, p_member text DEFAULT NULL::text, p_require_owner boolean DEFAULT false, p_async boolean DEFAULT false)
 RETURNS TABLE(partition integer, claim_epoch bigint, claim_expires_at timestamp with time zone, "offset" bigint, "timestamp" timestamp with time zone, key bytea, value bytea, headers jsonb)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    cr    record;
    n     bigint;
    d_par integer;
    d_epo bigint;
BEGIN
    LOOP
        SELECT * INTO cr FROM {{schema}}.claim_range(p_topic, p_group, p_max_records, p_lease, p_partition, p_start,
                                                     p_member, p_require_owner, p_async, d_par, d_epo, p_max_bytes);
        IF cr.partition IS NULL THEN
            RETURN;
        END IF;
        RETURN QUERY
        SELECT cr.partition, cr.claim_epoch, cr.claim_expires_at, x."offset", x."timestamp", x.key, x.value, x.headers
        FROM {{schema}}._read_range(cr.topic_id, cr.partition, cr.first_offset, cr.last_offset) x;
        GET DIAGNOSTICS n = ROW_COUNT;
        EXIT WHEN n > 0;
        d_par := cr.partition;
        d_epo := cr.claim_epoch;
    END LOOP;
END $function$;

-- _read_range returns the records p_first..p_last of a partition of topic
-- id p_topic_id, in offset order, as claim() and fetch() hand them over. It
-- reads them from the segment tables the catalog (segment) names, one
-- statement each, not through the record table: a read through the record
-- table once returned only the records of the first of the two segments
-- its range spanned, 1.6 s after the second was attached, and a consumer
-- moves on past the last offset it was given, skipping the rest for good
-- (docs/reliability.md). A segment the caller may not read is read
-- through the record table. Every offset from the partition's start_offset
-- and compacted_to on (below those, retention dropped records and
-- compaction deleted some) up to its next offset is stored: a read that
-- misses one of them raises data_corrupted (XX001) and hands nothing
-- over (the Go readers' store.MissesStored). A segment retention drops
-- during the read fails it (42P01); the next read starts past it.
CREATE OR REPLACE FUNCTION {{schema}}._read_range(p_topic_id integer, p_partition integer, p_first bigint, p_last bigint)
 RETURNS TABLE("offset" bigint, "timestamp" timestamp with time zone, key bytea, value bytea, headers jsonb)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_holes bigint;  -- below it the partition may lack records
    v_last  bigint;
    sg      record;
    rel     text;
    n       bigint;
    got     bigint := 0;  -- records read from v_holes on
BEGIN
    SELECT greatest(tp.start_offset, tp.compacted_to), least(p_last, tp.next_offset - 1) INTO v_holes, v_last
      FROM {{schema}}.topic_partition tp WHERE tp.topic_id = p_topic_id AND tp.partition = p_partition;
    IF NOT FOUND OR p_first > v_last THEN
        RETURN;
    END IF;
    -- Each segment's part of the range, split at v_holes: the records
    -- from there on are counted.
    FOR sg IN
        SELECT s.relname, x.lo, x.hi, x.counted
          FROM {{schema}}.segment s
         CROSS JOIN LATERAL (VALUES
               (greatest(s.start_offset, p_first), least(s.end_offset - 1, v_last, v_holes - 1), false),
               (greatest(s.start_offset, p_first, v_holes), least(s.end_offset - 1, v_last), true)) x(lo, hi, counted)
         WHERE s.topic_id = p_topic_id AND s.partition = p_partition
           AND s.start_offset <= v_last AND s.end_offset > p_first AND x.lo <= x.hi
         ORDER BY x.lo
    LOOP
        rel := format('%I.%I', {{schema_lit}}, sg.relname);
        IF NOT has_table_privilege(rel, 'SELECT') THEN
            rel := format('%I.record', {{schema_lit}});
        END IF;
        -- EXECUTE: planned for its values each time, as the record
        -- table's read needs (pruned to the segment), and a plain
        -- table's read costs little to plan.
        RETURN QUERY EXECUTE format('SELECT r."offset", r."timestamp", r.key, r.value, r.headers FROM %s r'
                                    ' WHERE r.topic_id = $1 AND r.partition = $2 AND r."offset" BETWEEN $3 AND $4'
                                    ' ORDER BY r."offset"', rel)
            USING p_topic_id, p_partition, sg.lo, sg.hi;
        IF sg.counted THEN
            GET DIAGNOSTICS n = ROW_COUNT;
            got := got + n;
        END IF;
    END LOOP;
    IF got < v_last - greatest(p_first, v_holes) + 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'data_corrupted', MESSAGE = format(
            'topic id %s partition %s: read %s records of offsets %s to %s, which are all stored; nothing was handed over',
            p_topic_id, p_partition, got, greatest(p_first, v_holes), v_last);
    END IF;
END $function$;

-- _claim_token returns a random epoch in [1, 2^53-1] other than p_prev:
-- statements/lease_token.sql's draw and statements/claim_epoch.sql's
-- rule, which the Go client's claim statements apply too, in PL/pgSQL
-- rather than through _lease_token(). Called from a
-- statement, a SQL function (such as _lease_token, which a pinned
-- search_path keeps from being inlined) is planned again on every
-- execution; PL/pgSQL keeps its plans for the session. Measured with
-- pgbench, one prepared SELECT of the draw, 1 client, best of 5 (noisy
-- machine): 40 us for the old time-based expression, 50 us for this
-- function, 91 us for a SQL function calling _lease_token.
CREATE OR REPLACE FUNCTION {{schema}}._claim_token(p_prev bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    h text := replace(gen_random_uuid()::text, '-', '');
    v bigint := {{sql lease_token(h)}};
BEGIN
    RETURN {{sql claim_epoch(v, p_prev)}};
END $function$;

-- _claim_bytes_end returns the last offset of [p_from, p_to] such that the
-- key + value bytes of the records from p_from up to it stay within
-- p_max_bytes; at least the first record (p_from), whatever its size.
-- Planned per call so that the planner prunes the record table to the
-- segments of the range.
CREATE OR REPLACE FUNCTION {{schema}}._claim_bytes_end(p_topic_id integer, p_partition integer, p_from bigint, p_to bigint, p_max_bytes bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET plan_cache_mode TO 'force_custom_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_end bigint;
BEGIN
    SELECT max(s.o) INTO v_end FROM (
        SELECT r."offset" AS o, row_number() OVER (ORDER BY r."offset") AS rn,
               sum(coalesce(octet_length(r.value), 0) + coalesce(octet_length(r.key), 0))
                   OVER (ORDER BY r."offset") AS cum
        FROM {{schema}}.record r
        WHERE r.topic_id = p_topic_id AND r.partition = p_partition
          AND r."offset" BETWEEN p_from AND p_to
    ) s WHERE s.cum <= p_max_bytes OR s.rn = 1;
    RETURN coalesce(v_end, p_to);
END $function$;

-- _held locks the cursor of a claim and checks the claim is still held.
CREATE OR REPLACE FUNCTION {{schema}}._held(p_topic text, p_group text, p_partition integer, p_claim_epoch bigint)
 RETURNS {{schema}}.group_cursor
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t   {{schema}}.topic := {{schema}}._topic(p_topic);
    cur {{schema}}.group_cursor;
BEGIN
    SELECT * INTO cur FROM {{schema}}.group_cursor c
    WHERE c.topic_id = t.topic_id AND c.group_name = p_group AND c.partition = p_partition
    FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM007', format('unknown group %s on topic %s partition %s',
                                                  left(quote_literal(coalesce(p_group, '')), 210), quote_literal(t.name), p_partition));
    END IF;
    IF cur.claim_epoch IS DISTINCT FROM p_claim_epoch OR cur.claim_expires_at IS NULL THEN
        PERFORM {{schema}}._raise('PM009', format(
            'claim %s on partition %s is not held: it was committed, released, reset or claimed again',
            p_claim_epoch, p_partition));
    END IF;
    IF cur.claim_expires_at <= clock_timestamp() THEN
        PERFORM {{schema}}._raise('PM008', format('claim %s on partition %s expired at %s',
                                                  p_claim_epoch, p_partition, cur.claim_expires_at));
    END IF;
    RETURN cur;
END $function$;

-- commit advances the group's cursor past a claim (or to p_next_offset
-- inside it, for a partial commit) and ends the claim. Returns the new
-- cursor. Fails with PM008 if the claim expired and PM009 if it is no longer
-- held, and with PM124 when min_insync_replicas refuses it, writing nothing.
CREATE OR REPLACE FUNCTION {{schema}}.commit(p_topic text, p_group text, p_partition integer, p_claim_epoch bigint, p_next_offset bigint DEFAULT NULL::bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    cur  {{schema}}.group_cursor := {{schema}}._held(p_topic, p_group, p_partition, p_claim_epoch);
    v_next bigint := coalesce(p_next_offset, cur.claim_end + 1);
BEGIN
    IF v_next < cur.claim_start OR v_next > cur.claim_end + 1 THEN
        PERFORM {{schema}}._raise('PM011', format('commit offset %s outside the claim [%s, %s]',
                                                  v_next, cur.claim_start, cur.claim_end + 1));
    END IF;
    -- min_insync_replicas (common.sql): no trigger guards the cursor rows.
    PERFORM {{schema}}._insync_assert('offset commit');
    UPDATE {{schema}}.group_cursor c
       SET next_offset = v_next, claim_start = NULL, claim_end = NULL, claim_expires_at = NULL,
           claim_owner = NULL, committed_at = clock_timestamp()
     WHERE c.topic_id = cur.topic_id AND c.group_name = cur.group_name AND c.partition = cur.partition;
    RETURN v_next;
END $function$;

-- release ends a claim without moving the cursor: its records are delivered
-- again at once instead of after the lease.
CREATE OR REPLACE FUNCTION {{schema}}.release(p_topic text, p_group text, p_partition integer, p_claim_epoch bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    cur {{schema}}.group_cursor := {{schema}}._held(p_topic, p_group, p_partition, p_claim_epoch);
BEGIN
    UPDATE {{schema}}.group_cursor c
       SET claim_start = NULL, claim_end = NULL, claim_expires_at = NULL, claim_owner = NULL
     WHERE c.topic_id = cur.topic_id AND c.group_name = cur.group_name AND c.partition = cur.partition;
END $function$;

-- extend pushes a held claim's expiry to now + p_lease.
CREATE OR REPLACE FUNCTION {{schema}}.extend(p_topic text, p_group text, p_partition integer, p_claim_epoch bigint, p_lease interval DEFAULT '00:00:30'::interval)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    cur {{schema}}.group_cursor;
    expires timestamptz;
BEGIN
    -- The lease first: a bad one is PM004 whether or not the claim is held.
    IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '366 days' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive and at most 366 days');
    END IF;
    cur := {{schema}}._held(p_topic, p_group, p_partition, p_claim_epoch);
    expires := clock_timestamp() + p_lease;
    UPDATE {{schema}}.group_cursor c SET claim_expires_at = expires
     WHERE c.topic_id = cur.topic_id AND c.group_name = cur.group_name AND c.partition = cur.partition;
    RETURN expires;
END $function$;

-- fetch reads records by offset without claiming (replay, debugging).
CREATE OR REPLACE FUNCTION {{schema}}."fetch"(p_topic text, p_partition integer, p_from bigint, p_max_records integer DEFAULT 100)
 RETURNS TABLE(partition integer, "offset" bigint, "timestamp" timestamp with time zone, key bytea, value bytea, headers jsonb)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_topic);
BEGIN
    PERFORM {{schema}}._partition_check(t, p_partition);
    IF p_from IS NULL OR p_from < 0 THEN
        PERFORM {{schema}}._raise('PM011', 'offset must not be negative');
    END IF;
    RETURN QUERY
    SELECT p_partition, x."offset", x."timestamp", x.key, x.value, x.headers
    FROM {{schema}}._read_range(t.topic_id, p_partition, p_from, p_from + greatest(p_max_records, 0) - 1) x;
END $function$;

-- ---------------------------------------------------------------------------
-- Consumer groups and membership
-- ---------------------------------------------------------------------------

-- group_create creates a consumer group on a topic with a cursor per
-- partition at p_start ('earliest', 'latest', an offset or a timestamp).
-- Returns false if the group already existed (its cursors are unchanged).
CREATE OR REPLACE FUNCTION {{schema}}.group_create(p_topic text, p_group text, p_start text DEFAULT 'earliest'::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t {{schema}}.topic;
BEGIN
    -- The group's name first: a bad one is PM003 on any topic.
    PERFORM {{schema}}._check_name('group', p_group);
    t := {{schema}}._topic(p_topic);
    INSERT INTO {{schema}}.consumer_group (topic_id, group_name) VALUES (t.topic_id, p_group)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO {{schema}}.group_cursor (topic_id, group_name, partition, next_offset)
    SELECT t.topic_id, p_group, p.partition, {{schema}}._position(t.topic_id, p.partition, p_start)
    FROM {{schema}}.topic_partition p WHERE p.topic_id = t.topic_id;
    RETURN true;
END $function$;

-- group_reset moves a group's cursor (one partition or all) to 'earliest',
-- 'latest', an offset or a timestamp. Live claims are ended and fenced: their
-- commit fails with PM009.
CREATE OR REPLACE FUNCTION {{schema}}.group_reset(p_topic text, p_group text, p_to text, p_partition integer DEFAULT NULL::integer)
 RETURNS TABLE(partition integer, next_offset bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_topic);
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group) THEN
        PERFORM {{schema}}._raise('PM007', format('unknown group %s on topic %s',
                                                  left(quote_literal(coalesce(p_group, '')), 210), quote_literal(t.name)));
    END IF;
    IF p_partition IS NOT NULL THEN
        PERFORM {{schema}}._partition_check(t, p_partition);
    END IF;
    RETURN QUERY
    UPDATE {{schema}}.group_cursor c
       SET next_offset = {{schema}}._position(t.topic_id, c.partition, p_to),
           claim_epoch = c.claim_epoch + 1, claim_start = NULL, claim_end = NULL,
           claim_expires_at = NULL, claim_owner = NULL
     WHERE c.topic_id = t.topic_id AND c.group_name = p_group
       AND (p_partition IS NULL OR c.partition = p_partition)
    RETURNING c.partition, c.next_offset;
END $function$;

-- group_delete removes a group and its cursors. Returns false if it did not exist.
CREATE OR REPLACE FUNCTION {{schema}}.group_delete(p_topic text, p_group text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_topic);
BEGIN
    DELETE FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group;
    RETURN FOUND;
END $function$;

-- group_list: one row per group and partition with its lag (end - cursor).
-- Cheap: primary-key reads of the counter and cursor rows, no record scan.
-- One topic's groups are read through the cursor table's primary key (a
-- plpgsql branch: the SQL function's single generic plan, written for
-- either case, scanned every group of every topic to list one topic's).
CREATE OR REPLACE FUNCTION {{schema}}.group_list(p_topic text DEFAULT NULL::text, p_group text DEFAULT NULL::text)
 RETURNS TABLE(topic text, group_name text, partition integer, next_offset bigint, end_offset bigint, lag bigint, claim_epoch bigint, claim_owner text, claim_expires_at timestamp with time zone, committed_at timestamp with time zone, owner text, owner_epoch bigint, skipped bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_topic integer;
BEGIN
    IF p_topic IS NOT NULL THEN
        SELECT t.topic_id INTO v_topic FROM {{schema}}.topic t WHERE t.name = p_topic;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        RETURN QUERY
        SELECT p_topic, c.group_name, c.partition, c.next_offset, tp.next_offset,
               greatest(tp.next_offset - c.next_offset, 0), c.claim_epoch,
               CASE WHEN c.claim_expires_at > clock_timestamp() THEN c.claim_owner END,
               CASE WHEN c.claim_expires_at > clock_timestamp() THEN c.claim_expires_at END,
               c.committed_at, c.owner, c.owner_epoch, c.skipped
        FROM {{schema}}.group_cursor c
        JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
        WHERE c.topic_id = v_topic AND (p_group IS NULL OR c.group_name = p_group)
        ORDER BY c.group_name, c.partition;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT t.name, c.group_name, c.partition, c.next_offset, tp.next_offset,
           greatest(tp.next_offset - c.next_offset, 0), c.claim_epoch,
           CASE WHEN c.claim_expires_at > clock_timestamp() THEN c.claim_owner END,
           CASE WHEN c.claim_expires_at > clock_timestamp() THEN c.claim_expires_at END,
           c.committed_at, c.owner, c.owner_epoch, c.skipped
    FROM {{schema}}.group_cursor c
    JOIN {{schema}}.topic t ON t.topic_id = c.topic_id
    JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
    WHERE (p_group IS NULL OR c.group_name = p_group)
    ORDER BY t.name, c.group_name, c.partition;
END $function$;

-- group_summary: one row per group (of p_topic and/or named p_group when
-- given) with its partitions' cursors, ends, lag and skipped records
-- summed, its partitions with a live claim and its latest commit: what
-- `pgmsg group list` shows, as kafka-consumer-groups --list does, so that
-- its answer grows with the groups, not their partitions (group_list has
-- each partition). The same primary-key rows as group_list, no record scan.
CREATE OR REPLACE FUNCTION {{schema}}.group_summary(p_topic text DEFAULT NULL::text, p_group text DEFAULT NULL::text)
 RETURNS TABLE(topic text, group_name text, partitions integer, next_offset bigint, end_offset bigint, lag bigint, claimed integer, committed_at timestamp with time zone, skipped bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_topic integer;
BEGIN
    IF p_topic IS NOT NULL THEN
        -- One topic's groups through the cursor table's primary key.
        SELECT t.topic_id INTO v_topic FROM {{schema}}.topic t WHERE t.name = p_topic;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        RETURN QUERY
        SELECT p_topic, c.group_name, count(*)::integer, sum(c.next_offset)::bigint, sum(tp.next_offset)::bigint,
               sum(greatest(tp.next_offset - c.next_offset, 0))::bigint,
               (count(*) FILTER (WHERE c.claim_expires_at > clock_timestamp()))::integer,
               max(c.committed_at), sum(c.skipped)::bigint
        FROM {{schema}}.group_cursor c
        JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
        WHERE c.topic_id = v_topic AND (p_group IS NULL OR c.group_name = p_group)
        GROUP BY c.group_name
        ORDER BY c.group_name;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT t.name, g.group_name, g.partitions, g.next_offset, g.end_offset, g.lag, g.claimed, g.committed_at, g.skipped
    FROM (SELECT c.topic_id, c.group_name, count(*)::integer AS partitions,
                 sum(c.next_offset)::bigint AS next_offset, sum(tp.next_offset)::bigint AS end_offset,
                 sum(greatest(tp.next_offset - c.next_offset, 0))::bigint AS lag,
                 (count(*) FILTER (WHERE c.claim_expires_at > clock_timestamp()))::integer AS claimed,
                 max(c.committed_at) AS committed_at, sum(c.skipped)::bigint AS skipped
          FROM {{schema}}.group_cursor c
          JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
          WHERE (p_group IS NULL OR c.group_name = p_group)
          GROUP BY c.topic_id, c.group_name) g
    JOIN {{schema}}.topic t ON t.topic_id = g.topic_id
    ORDER BY t.name, g.group_name;
END $function$;

-- group_members lists a group's members with their partitions and whether
-- their session is still alive (database clock).
CREATE OR REPLACE FUNCTION {{schema}}.group_members(p_topic text, p_group text)
 RETURNS TABLE(member_id text, joined_at timestamp with time zone, heartbeat_at timestamp with time zone, session_timeout interval, alive boolean, partitions integer[])
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_topic);
BEGIN
    RETURN QUERY
    SELECT m.member_id, m.joined_at, m.heartbeat_at, m.session_timeout,
           m.heartbeat_at + m.session_timeout >= clock_timestamp(),
           coalesce((SELECT array_agg(c.partition ORDER BY c.partition) FROM {{schema}}.group_cursor c
                     WHERE c.topic_id = m.topic_id AND c.group_name = m.group_name AND c.owner = m.member_id), '{}')
    FROM {{schema}}.group_member m
    WHERE m.topic_id = t.topic_id AND m.group_name = p_group
    ORDER BY m.member_id;
END $function$;

-- _group_steady_extend moves a steady group's steady_until on to the
-- earliest end of its members' sessions, as group_heartbeat() does when it
-- finds the group steady, without looking at anything else: the steady
-- heartbeats call it when steady_until is near (within a third of the
-- member's session timeout), so that a group whose members keep
-- heartbeating stays steady and none of their heartbeats needs
-- group_heartbeat() (which did this once a session or so for every group:
-- 1,000 members in groups of 4 made 25 calls a second of it, ten times a
-- steady heartbeat's cost and a second round trip each). That is right
-- while steady_until is set: everything that could make the group
-- unsteady (a join, a leave, a member removed, new partitions) clears it
-- or rebalances, which clears it, with the group row locked; a session
-- timeout changes with it locked too. So the row is locked first, and
-- skipped when another transaction holds it (that one decides); the
-- members are then read in a snapshot taken after the lock (this function
-- is VOLATILE: each statement's own), which holds whatever a transaction
-- that held the lock committed, and the caller's own heartbeats. A member
-- whose session has ended leaves steady_until where it is; it only moves
-- forward. Returns whether it moved.
CREATE OR REPLACE FUNCTION {{schema}}._group_steady_extend(p_topic_id integer, p_group text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_until timestamptz;
BEGIN
    PERFORM 1 FROM {{schema}}.consumer_group g
     WHERE g.topic_id = p_topic_id AND g.group_name = p_group AND g.steady_until IS NOT NULL
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT min(m.heartbeat_at + m.session_timeout) INTO v_until FROM {{schema}}.group_member m
     WHERE m.topic_id = p_topic_id AND m.group_name = p_group;
    UPDATE {{schema}}.consumer_group g SET steady_until = v_until
     WHERE g.topic_id = p_topic_id AND g.group_name = p_group AND g.steady_until < v_until;
    RETURN FOUND;
END $function$;

-- group_heartbeat joins p_member to the group (created at p_start if new)
-- or keeps it alive, rebalances, and returns the member's assignment:
-- partitions it owns with their generation (owner_epoch) and whether each
-- is being handed over (revoking: finish the live claim, claim no more).
-- joined is true when the member was not in the group before this call
-- (first join, or its session had expired: its old partitions are lost).
CREATE OR REPLACE FUNCTION {{schema}}.group_heartbeat(p_topic text, p_group text, p_member text, p_session_timeout interval DEFAULT '00:00:10'::interval, p_start text DEFAULT 'earliest'::text)
 RETURNS TABLE(joined boolean, partitions integer[], owner_epochs bigint[], revoking boolean[])
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t        {{schema}}.topic;
    v_topic   integer;
    v_joined  boolean;
    v_steady  boolean;
    v_until   timestamptz;
    v_gen     bigint;
    v_parts   integer[];
    v_epochs  bigint[];
    v_revoking boolean[];
BEGIN
    -- A live member of a steady group that knows the group's generation
    -- is every interval of every member: heartbeat_steady, one UPDATE of
    -- its row by primary key, answering the assignment that row keeps.
    -- Nothing else can have changed: a rebalance moves the generation on,
    -- and no member's session ends before steady_until. The names need no
    -- check: a topic, group or member row holds only valid names. The
    -- group row is read, not locked: the answer is the assignment as of
    -- this statement's snapshot, as if the heartbeat had run just before a
    -- rebalance committing meanwhile; claims check ownership on the cursor
    -- row, so a member acting on it cannot take a partition that is no
    -- longer its own.
    {{sql heartbeat_steady((SELECT p_topic AS topic, p_group AS grp, p_member AS member, p_session_timeout AS session) a)}}
    RETURNING false, m.partitions, m.owner_epochs, m.revoking, m.topic_id, k.steady_until < m.heartbeat_at + m.session_timeout / 3
         INTO joined, partitions, owner_epochs, revoking, v_topic, v_steady;
    IF FOUND THEN
        IF v_steady THEN
            -- steady_until is near: move it on (_group_steady_extend).
            PERFORM {{schema}}._group_steady_extend(v_topic, p_group);
        END IF;
        RETURN NEXT;  -- the output columns, as RETURNING set them
        RETURN;
    END IF;
    -- Otherwise: a bad session timeout is PM004 after any bad name's
    -- PM003, whether or not the topic exists; a member that (re)joins has
    -- its names checked before anything is written.
    IF p_session_timeout IS NULL OR p_session_timeout <= interval '0' OR p_session_timeout > interval '366 days' THEN
        PERFORM {{schema}}._check_name('topic', p_topic);
        PERFORM {{schema}}._check_name('group', p_group);
        PERFORM {{schema}}._check_name('member', p_member);
        PERFORM {{schema}}._raise('PM004', 'session timeout must be positive and at most 366 days');
    END IF;
    SELECT g.topic_id INTO v_topic FROM {{schema}}.topic tt
      JOIN {{schema}}.consumer_group g ON g.topic_id = tt.topic_id AND g.group_name = p_group
     WHERE tt.name = p_topic
       FOR UPDATE OF g;
    IF FOUND THEN
        UPDATE {{schema}}.group_member m SET heartbeat_at = clock_timestamp(), session_timeout = p_session_timeout
         WHERE m.topic_id = v_topic AND m.group_name = p_group AND m.member_id = p_member
           AND m.heartbeat_at + m.session_timeout >= clock_timestamp();
        v_joined := NOT FOUND;
    ELSE
        v_joined := true;
    END IF;
    IF v_joined THEN
        PERFORM {{schema}}._check_name('topic', p_topic);
        PERFORM {{schema}}._check_name('group', p_group);
        PERFORM {{schema}}._check_name('member', p_member);
        t := {{schema}}._topic(p_topic);
        IF NOT EXISTS (SELECT 1 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group) THEN
            PERFORM {{schema}}.group_create(p_topic, p_group, p_start);
        END IF;
        PERFORM 1 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group FOR UPDATE;
        v_topic := t.topic_id;
    END IF;
    IF v_joined THEN
        -- New, or dead and not yet removed: (re)join with a clean slate.
        DELETE FROM {{schema}}.group_member m
         WHERE m.topic_id = v_topic AND m.group_name = p_group AND m.member_id = p_member;
        UPDATE {{schema}}.group_cursor c
           SET claim_epoch = c.claim_epoch + 1, claim_start = NULL, claim_end = NULL,
               claim_expires_at = NULL, claim_owner = NULL
         WHERE c.topic_id = v_topic AND c.group_name = p_group
           AND c.claim_expires_at > clock_timestamp() AND c.claim_owner = p_member;
        UPDATE {{schema}}.group_cursor c SET owner = NULL, next_owner = NULL
         WHERE c.topic_id = v_topic AND c.group_name = p_group AND (c.owner = p_member OR c.next_owner = p_member);
        INSERT INTO {{schema}}.group_member (topic_id, group_name, member_id, joined_at, heartbeat_at, session_timeout)
        VALUES (v_topic, p_group, p_member, clock_timestamp(), clock_timestamp(), p_session_timeout);
    END IF;
    -- A steady group (no member past its session, every partition owned by
    -- a live member and none being handed over, owners' counts within one
    -- of each other) is what _rebalance would leave unchanged: skip it.
    -- The test (_group_steady's, written out), the first moment a member's
    -- session can end and the member's assignment are one statement.
    IF NOT v_joined THEN
        WITH m AS (
            SELECT m.member_id, m.heartbeat_at + m.session_timeout >= clock_timestamp() AS alive,
                   m.heartbeat_at + m.session_timeout AS ends
              FROM {{schema}}.group_member m
             WHERE m.topic_id = v_topic AND m.group_name = p_group
        ), c AS (
            SELECT c.partition, c.owner, c.owner_epoch, c.next_owner,
                   (c.owner IS NOT NULL AND c.next_owner IS NULL
                    AND EXISTS (SELECT 1 FROM m WHERE m.member_id = c.owner)) AS settled
              FROM {{schema}}.group_cursor c
             WHERE c.topic_id = v_topic AND c.group_name = p_group
        )
        SELECT coalesce((SELECT bool_and(alive) FROM m)
                        AND coalesce((SELECT bool_and(settled) FROM c), true)
                        AND (SELECT max(n) - min(n) <= 1 FROM (SELECT (SELECT count(*) FROM c WHERE c.owner = m.member_id) AS n FROM m) k),
                        false),
               (SELECT min(ends) FROM m),
               (SELECT coalesce(array_agg(c.partition ORDER BY c.partition), '{}') FROM c WHERE c.owner = p_member),
               (SELECT coalesce(array_agg(c.owner_epoch ORDER BY c.partition), '{}') FROM c WHERE c.owner = p_member),
               (SELECT coalesce(array_agg(c.next_owner IS NOT NULL ORDER BY c.partition), '{}') FROM c WHERE c.owner = p_member)
          INTO v_steady, v_until, v_parts, v_epochs, v_revoking;
        IF v_steady THEN
            -- Members' sessions only end later than v_until from now on
            -- (a heartbeat that changes its session timeout comes here):
            -- until then the next heartbeats need not look.
            UPDATE {{schema}}.consumer_group g SET steady_until = v_until
             WHERE g.topic_id = v_topic AND g.group_name = p_group
               AND g.steady_until IS DISTINCT FROM v_until
            RETURNING g.generation INTO v_gen;
            IF NOT FOUND THEN
                SELECT g.generation INTO v_gen FROM {{schema}}.consumer_group g
                 WHERE g.topic_id = v_topic AND g.group_name = p_group;
            END IF;
            UPDATE {{schema}}.group_member m
               SET generation = v_gen, partitions = v_parts, owner_epochs = v_epochs, revoking = v_revoking
             WHERE m.topic_id = v_topic AND m.group_name = p_group AND m.member_id = p_member;
            RETURN QUERY SELECT false, v_parts, v_epochs, v_revoking;
            RETURN;
        END IF;
    END IF;
    PERFORM {{schema}}._rebalance(v_topic, p_group);
    RETURN QUERY
    SELECT v_joined,
           coalesce(array_agg(c.partition ORDER BY c.partition), '{}'),
           coalesce(array_agg(c.owner_epoch ORDER BY c.partition), '{}'),
           coalesce(array_agg(c.next_owner IS NOT NULL ORDER BY c.partition), '{}')
    FROM {{schema}}.group_cursor c
    WHERE c.topic_id = v_topic AND c.group_name = p_group AND c.owner = p_member;
END $function$;

-- group_leave removes a member at once: its live claims end (their commits
-- are fenced) and its partitions are reassigned without waiting for the
-- session timeout. Returns false if it was not a member.
CREATE OR REPLACE FUNCTION {{schema}}.group_leave(p_topic text, p_group text, p_member text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    t       {{schema}}.topic;
    v_found boolean;
BEGIN
    -- Bad names are the caller's mistake (PM003), not a member that was
    -- not in the group.
    PERFORM {{schema}}._check_name('topic', p_topic);
    PERFORM {{schema}}._check_name('group', p_group);
    PERFORM {{schema}}._check_name('member', p_member);
    t := {{schema}}._topic(p_topic);
    PERFORM 1 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM {{schema}}.group_member m
     WHERE m.topic_id = t.topic_id AND m.group_name = p_group AND m.member_id = p_member;
    v_found := FOUND;
    UPDATE {{schema}}.group_cursor c
       SET claim_epoch = c.claim_epoch + 1, claim_start = NULL, claim_end = NULL,
           claim_expires_at = NULL, claim_owner = NULL
     WHERE c.topic_id = t.topic_id AND c.group_name = p_group
       AND c.claim_expires_at > clock_timestamp() AND c.claim_owner = p_member;
    PERFORM {{schema}}._rebalance(t.topic_id, p_group);
    RETURN v_found;
END $function$;

-- _rebalance recomputes a group's assignment. The caller holds the
-- consumer_group row lock, so rebalances of one group never interleave.
-- Steps: remove dead members (ending their live claims, which fences their
-- late commits); spread partitions evenly (sizes differ by at most one,
-- members already owning more get the larger share); keep each member's
-- lowest partitions up to its share; hand the rest out. An unowned
-- partition moves at once; a partition taken from a live member is marked
-- next_owner and moves when that member's live claim ends (it may commit
-- it), so two members never process a partition at the same time. When a
-- partition's owner or next owner changed it notifies
-- 'group:<topic>:<group>' (notifier.GroupKey): the members heartbeat at
-- once and learn the change from that heartbeat, not at their next
-- interval.
CREATE OR REPLACE FUNCTION {{schema}}._rebalance(p_topic_id integer, p_group text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    now_ts   timestamptz := clock_timestamp();
    members  text[];
    n_mem    integer;
    n_parts  integer;
    base     integer;
    extra    integer;
    quota    integer;
    owned    integer[];
    free     integer[] := '{}';
    takers   text[] := '{}';
    needs    integer[] := '{}';
    i        integer;
    k        integer;
    j        integer := 1;
    n        bigint;
    moved    bigint := 0;  -- cursor rows whose owner or next owner changed
BEGIN
    -- Whatever this changes, the members' kept assignments are of an older
    -- generation now, and the group's steadiness is unknown until the next
    -- heartbeat checks it (group_heartbeat).
    UPDATE {{schema}}.consumer_group g SET generation = g.generation + 1, steady_until = NULL
     WHERE g.topic_id = p_topic_id AND g.group_name = p_group;
    WITH dead AS (
        DELETE FROM {{schema}}.group_member m
         WHERE m.topic_id = p_topic_id AND m.group_name = p_group
           AND m.heartbeat_at + m.session_timeout < now_ts
        RETURNING m.member_id
    )
    UPDATE {{schema}}.group_cursor c
       SET claim_epoch = c.claim_epoch + 1, claim_start = NULL, claim_end = NULL,
           claim_expires_at = NULL, claim_owner = NULL
     WHERE c.topic_id = p_topic_id AND c.group_name = p_group
       AND c.claim_expires_at > now_ts AND c.claim_owner IN (SELECT member_id FROM dead);

    -- Partitions of members that are gone become unowned.
    UPDATE {{schema}}.group_cursor c SET owner = NULL, next_owner = NULL
     WHERE c.topic_id = p_topic_id AND c.group_name = p_group AND c.owner IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM {{schema}}.group_member m WHERE m.topic_id = p_topic_id
                       AND m.group_name = p_group AND m.member_id = c.owner);
    GET DIAGNOSTICS moved = ROW_COUNT;

    SELECT array_agg(s.member_id ORDER BY s.cnt DESC, s.member_id) INTO members FROM (
        SELECT m.member_id, (SELECT count(*) FROM {{schema}}.group_cursor c WHERE c.topic_id = p_topic_id
                             AND c.group_name = p_group AND c.owner = m.member_id) AS cnt
        FROM {{schema}}.group_member m WHERE m.topic_id = p_topic_id AND m.group_name = p_group) s;
    n_mem := coalesce(cardinality(members), 0);
    IF n_mem = 0 THEN
        RETURN;
    END IF;
    SELECT count(*) INTO n_parts FROM {{schema}}.group_cursor c WHERE c.topic_id = p_topic_id AND c.group_name = p_group;
    base := n_parts / n_mem;
    extra := n_parts % n_mem;

    FOR i IN 1 .. n_mem LOOP
        quota := base + CASE WHEN i <= extra THEN 1 ELSE 0 END;
        SELECT coalesce(array_agg(c.partition ORDER BY c.partition), '{}') INTO owned
        FROM {{schema}}.group_cursor c WHERE c.topic_id = p_topic_id AND c.group_name = p_group AND c.owner = members[i];
        IF cardinality(owned) > quota THEN
            free := free || owned[quota + 1 :];
        ELSIF cardinality(owned) < quota THEN
            takers := takers || members[i];
            needs := needs || (quota - cardinality(owned));
        END IF;
    END LOOP;
    free := (SELECT coalesce(array_agg(c.partition ORDER BY c.partition), '{}') FROM {{schema}}.group_cursor c
             WHERE c.topic_id = p_topic_id AND c.group_name = p_group AND c.owner IS NULL) || free;

    -- Hand-overs are recomputed from scratch each time.
    UPDATE {{schema}}.group_cursor c SET next_owner = NULL
     WHERE c.topic_id = p_topic_id AND c.group_name = p_group AND c.next_owner IS NOT NULL
       AND c.partition <> ALL (free);
    GET DIAGNOSTICS n = ROW_COUNT;
    moved := moved + n;
    FOR i IN 1 .. coalesce(cardinality(takers), 0) LOOP
        FOR k IN 1 .. needs[i] LOOP
            UPDATE {{schema}}.group_cursor c
               SET owner       = CASE WHEN c.owner IS NULL THEN takers[i] ELSE c.owner END,
                   owner_epoch = CASE WHEN c.owner IS NULL THEN c.owner_epoch + 1 ELSE c.owner_epoch END,
                   owned_at    = CASE WHEN c.owner IS NULL THEN now_ts ELSE c.owned_at END,
                   next_owner  = CASE WHEN c.owner IS NULL THEN NULL ELSE takers[i] END
             WHERE c.topic_id = p_topic_id AND c.group_name = p_group AND c.partition = free[j]
               AND (c.owner IS NULL OR c.next_owner IS DISTINCT FROM takers[i]);
            GET DIAGNOSTICS n = ROW_COUNT;
            moved := moved + n;
            j := j + 1;
        END LOOP;
    END LOOP;

    -- A hand-over completes once the old owner holds no live claim.
    UPDATE {{schema}}.group_cursor c
       SET owner = c.next_owner, next_owner = NULL, owner_epoch = c.owner_epoch + 1, owned_at = now_ts
     WHERE c.topic_id = p_topic_id AND c.group_name = p_group AND c.next_owner IS NOT NULL
       AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now_ts);
    GET DIAGNOSTICS n = ROW_COUNT;
    moved := moved + n;
    IF moved > 0 THEN
        PERFORM pg_notify({{schema_lit}} || '_log', 'group:' || tt.name || ':' || p_group)
           FROM {{schema}}.topic tt WHERE tt.topic_id = p_topic_id;
    END IF;
END $function$;

-- _group_steady: no member of the group is past its session timeout, every
-- cursor row is owned by a member and none is being handed over, and the
-- members' partition counts differ by at most one. That is the fixed point
-- of _rebalance: it deletes no member, frees nothing, and every member's
-- quota (base or base + 1, the larger ones to the members owning the most)
-- equals what it owns.
CREATE OR REPLACE FUNCTION {{schema}}._group_steady(p_topic_id integer, p_group text)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RETURN coalesce((
        WITH m AS (
            SELECT m.member_id, m.heartbeat_at + m.session_timeout >= clock_timestamp() AS alive
              FROM {{schema}}.group_member m
             WHERE m.topic_id = p_topic_id AND m.group_name = p_group
        ), c AS (
            SELECT c.owner, (c.owner IS NOT NULL AND c.next_owner IS NULL
                             AND EXISTS (SELECT 1 FROM m WHERE m.member_id = c.owner)) AS settled
              FROM {{schema}}.group_cursor c
             WHERE c.topic_id = p_topic_id AND c.group_name = p_group
        ), counts AS (
            SELECT (SELECT count(*) FROM c WHERE c.owner = m.member_id) AS n FROM m
        )
        SELECT (SELECT bool_and(alive) FROM m)
           AND coalesce((SELECT bool_and(settled) FROM c), true)
           AND (SELECT max(n) - min(n) <= 1 FROM counts)
    ), false);
END $function$;

-- ---------------------------------------------------------------------------
-- Maintenance: retention, compaction, group expiry, the event log, metrics
-- ---------------------------------------------------------------------------

-- retention_run drops at most p_max_segments segments, oldest first, and
-- returns what it dropped. Per topic settings (all optional):
--   retention_ms / retention_bytes / retention_records  soft limits: the
--     oldest closed segment of a partition is dropped once one is exceeded
--     (its newest record is older than retention_ms; or the partition keeps
--     at least retention_bytes / retention_records without it) AND every
--     group of the topic has committed past it;
--   hard_limit_ms / hard_limit_bytes / hard_limit_records  caps: when one
--     is exceeded the segment goes even if a group has not read it; such
--     groups jump to the segment's end and their skipped count grows.
-- Dropping is DROP TABLE: no DELETE, no dead tuples, no vacuum work. Each
-- drop runs under a savepoint with lock_timeout 500ms: a segment whose
-- lock is busy (a long transaction reading it) is left for the next run.
CREATE OR REPLACE FUNCTION {{schema}}.retention_run(p_max_segments integer DEFAULT 16)
 RETURNS TABLE(topic text, partition integer, start_offset bigint, end_offset bigint, reason text, skipped bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET plan_cache_mode TO 'force_custom_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    seg      record;
    n        integer := 0;
    tip      bigint;
    slowest  bigint;
    last_ts  timestamptz;
    p_bytes  bigint;
    s_bytes  bigint;
    soft     boolean;
    hard     boolean;
    why      text;
    v_skip   bigint;
    rel      text;
BEGIN
    PERFORM set_config('lock_timeout', '500ms', true);
    FOR seg IN
        SELECT s.topic_id, s.partition, s.start_offset, s.end_offset, t.name, t.config
        FROM {{schema}}.segment s
        JOIN {{schema}}.topic t ON t.topic_id = s.topic_id
        JOIN {{schema}}.topic_partition tp ON tp.topic_id = s.topic_id AND tp.partition = s.partition
        WHERE s.start_offset = tp.start_offset AND s.end_offset <= tp.next_offset
          AND t.config ?| ARRAY['retention_ms', 'retention_bytes', 'retention_records',
                                'hard_limit_ms', 'hard_limit_bytes', 'hard_limit_records']
        ORDER BY s.created_at, s.topic_id, s.partition
    LOOP
        EXIT WHEN n >= p_max_segments;
        -- The table to drop is named from the segment's numbers, as
        -- _segment_create named it, and must be a partition of the topic's
        -- table: never a name another role could have written.
        rel := {{schema}}._segment_relname(seg.topic_id, seg.partition, seg.start_offset);
        CONTINUE WHEN rel IS NULL;
        SELECT tp.next_offset INTO tip FROM {{schema}}.topic_partition tp
         WHERE tp.topic_id = seg.topic_id AND tp.partition = seg.partition;
        -- Newest record of the segment: an index probe, not a scan.
        SELECT r."timestamp" INTO last_ts FROM {{schema}}.record r
         WHERE r.topic_id = seg.topic_id AND r.partition = seg.partition
           AND r."offset" >= seg.start_offset AND r."offset" < seg.end_offset
         ORDER BY r."offset" DESC LIMIT 1;
        s_bytes := {{schema}}._segment_bytes(rel);
        SELECT coalesce(sum({{schema}}._segment_bytes(
                   {{schema}}._segment_relname(s2.topic_id, s2.partition, s2.start_offset))), 0) INTO p_bytes
          FROM {{schema}}.segment s2
         WHERE s2.topic_id = seg.topic_id AND s2.partition = seg.partition;

        hard := (last_ts IS NOT NULL AND last_ts < clock_timestamp() - make_interval(secs => {{schema}}._setting(seg.config, 'hard_limit_ms') / 1000.0))
             OR p_bytes > {{schema}}._setting(seg.config, 'hard_limit_bytes')
             OR tip - seg.start_offset > {{schema}}._setting(seg.config, 'hard_limit_records');
        soft := (last_ts IS NULL OR last_ts < clock_timestamp() - make_interval(secs => {{schema}}._setting(seg.config, 'retention_ms') / 1000.0))
                 AND seg.config ? 'retention_ms'
             OR p_bytes - s_bytes >= {{schema}}._setting(seg.config, 'retention_bytes')
             OR tip - seg.end_offset >= {{schema}}._setting(seg.config, 'retention_records');
        hard := coalesce(hard, false);
        soft := coalesce(soft, false);
        CONTINUE WHEN NOT hard AND NOT soft;

        SELECT min(c.next_offset) INTO slowest FROM {{schema}}.group_cursor c
         WHERE c.topic_id = seg.topic_id AND c.partition = seg.partition;
        IF NOT hard AND slowest IS NOT NULL AND slowest < seg.end_offset THEN
            CONTINUE;  -- pinned by a group that has not read it yet
        END IF;
        why := CASE WHEN hard THEN 'hard_limit' ELSE 'retention' END;

        BEGIN
            v_skip := 0;
            IF hard THEN
                WITH moved AS (
                    UPDATE {{schema}}.group_cursor c
                       SET skipped = c.skipped + (seg.end_offset - c.next_offset),
                           next_offset = seg.end_offset,
                           claim_epoch = c.claim_epoch + CASE WHEN c.claim_expires_at IS NOT NULL THEN 1 ELSE 0 END,
                           claim_start = NULL, claim_end = NULL, claim_expires_at = NULL, claim_owner = NULL
                     WHERE c.topic_id = seg.topic_id AND c.partition = seg.partition
                       AND c.next_offset < seg.end_offset
                    RETURNING c.group_name, c.skipped
                ), ev AS (
                    INSERT INTO {{schema}}.maintenance_event (kind, topic, group_name, partition, detail)
                    SELECT 'retention_skip', seg.name, m.group_name, seg.partition,
                           jsonb_build_object('segment_start', seg.start_offset, 'segment_end', seg.end_offset,
                                              'skipped_total', m.skipped)
                    FROM moved m
                    RETURNING 1
                )
                SELECT count(*) INTO v_skip FROM ev;
            END IF;
            EXECUTE format('DROP TABLE %I.%I', {{schema_lit}}, rel);
            DELETE FROM {{schema}}.segment s
             WHERE s.topic_id = seg.topic_id AND s.partition = seg.partition AND s.start_offset = seg.start_offset;
            UPDATE {{schema}}.topic_partition tp SET start_offset = seg.end_offset
             WHERE tp.topic_id = seg.topic_id AND tp.partition = seg.partition;
            INSERT INTO {{schema}}.maintenance_event (kind, topic, partition, detail)
            VALUES ('retention_drop', seg.name, seg.partition,
                    jsonb_build_object('segment_start', seg.start_offset, 'segment_end', seg.end_offset,
                                       'bytes', s_bytes, 'reason', why, 'groups_skipped', v_skip));
            n := n + 1;
            topic := seg.name; partition := seg.partition; start_offset := seg.start_offset;
            end_offset := seg.end_offset; reason := why; skipped := v_skip;
            RETURN NEXT;
        EXCEPTION WHEN lock_not_available THEN
            -- Busy: try again next run.
            NULL;
        END;
    END LOOP;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}.compact_run(p_max_partitions integer DEFAULT 4)
 RETURNS TABLE(topic text, partition integer, closed_end bigint, removed bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_max_partitions < 0 THEN
        PERFORM {{schema}}._raise('PM004', format('compact_run: p_max_partitions must be >= 0, got %s', p_max_partitions));
    END IF;
    RETURN QUERY SELECT * FROM {{schema}}._compact_run(p_max_partitions);
END $function$;

-- compact_run compacts up to p_max_partitions partitions of topics whose
-- cleanup_policy contains 'compact' and that received records since their
-- last compaction. In the closed segments (all but the one being written)
-- it keeps the newest record of each key and deletes the older ones, and
-- deletes tombstones (NULL value) that are the newest for their key once
-- older than the topic's delete_retention_ms (default 1 day). Unkeyed
-- records are kept. Offsets of kept records never change: consumers of a
-- compacted topic see gaps (claim skips them). This is the one place pgmsg
-- DELETEs records; autovacuum reclaims the space.
CREATE OR REPLACE FUNCTION {{schema}}._compact_run(p_max_partitions integer DEFAULT 4)
 RETURNS TABLE(topic text, partition integer, closed_end bigint, removed bigint)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_custom_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    tp        record;
    v_closed  bigint;
    v_removed bigint;
    tomb_ms   bigint;
BEGIN
    FOR tp IN
        SELECT p.topic_id, p.partition, p.next_offset, t.name, t.config
        FROM {{schema}}.topic_partition p JOIN {{schema}}.topic t ON t.topic_id = p.topic_id
        WHERE t.config->>'cleanup_policy' LIKE '%compact%' AND p.next_offset > p.compacted_to
        ORDER BY p.compacted_to - p.next_offset
        LIMIT p_max_partitions
        FOR UPDATE OF p SKIP LOCKED
    LOOP
        SELECT max(s.start_offset) INTO v_closed FROM {{schema}}.segment s
         WHERE s.topic_id = tp.topic_id AND s.partition = tp.partition AND s.start_offset < tp.next_offset;
        tomb_ms := coalesce({{schema}}._setting(tp.config, 'delete_retention_ms'), 86400000);
        WITH latest AS (
            SELECT r.key, max(r."offset") AS o FROM {{schema}}.record r
            WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition AND r.key IS NOT NULL
            GROUP BY r.key
        ), del AS (
            DELETE FROM {{schema}}.record r USING latest l
            WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition AND r."offset" < coalesce(v_closed, 0)
              AND r.key = l.key
              AND (r."offset" < l.o
                   OR (r.value IS NULL AND r."timestamp" < clock_timestamp() - make_interval(secs => tomb_ms / 1000.0)))
            RETURNING 1
        )
        SELECT count(*) INTO v_removed FROM del;
        UPDATE {{schema}}.topic_partition p SET compacted_to = tp.next_offset
         WHERE p.topic_id = tp.topic_id AND p.partition = tp.partition;
        INSERT INTO {{schema}}.maintenance_event (kind, topic, partition, detail)
        VALUES ('compacted', tp.name, tp.partition, jsonb_build_object('closed_end', v_closed, 'removed', v_removed));
        topic := tp.name; partition := tp.partition; closed_end := coalesce(v_closed, 0); removed := v_removed;
        RETURN NEXT;
    END LOOP;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}.group_expire(p_default_ttl interval DEFAULT '7 days'::interval, p_max integer DEFAULT 100)
 RETURNS TABLE(topic text, group_name text, last_active timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_max < 0 THEN
        PERFORM {{schema}}._raise('PM004', format('group_expire: p_max must be >= 0, got %s', p_max));
    END IF;
    IF p_default_ttl < interval '0' THEN
        PERFORM {{schema}}._raise('PM004', format('group_expire: p_default_ttl must not be negative, got %s', p_default_ttl));
    END IF;
    RETURN QUERY SELECT * FROM {{schema}}._group_expire(p_default_ttl, p_max);
END $function$;

-- group_expire deletes up to p_max groups that have had no commit, no live
-- member and no creation for longer than their topic's group_ttl_ms (or
-- p_default_ttl), so that abandoned groups stop pinning retention and
-- backpressure. Each expiry is logged in maintenance_event.
CREATE OR REPLACE FUNCTION {{schema}}._group_expire(p_default_ttl interval DEFAULT '7 days'::interval, p_max integer DEFAULT 100)
 RETURNS TABLE(topic text, group_name text, last_active timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET jit TO 'off'
AS $function$
#variable_conflict use_column
BEGIN
    -- Each topic's cutoff once (its group_ttl_ms read only where it is
    -- set: _setting's exception block is a subtransaction a call), and a
    -- group's cursors and members read only when it was created before
    -- its cutoff: the pass ran every 10 s over every group of every topic.
    -- No JIT (above): the subqueries' estimate for 10,000 groups passed
    -- jit_above_cost, and compiling took longer than the query (95 ms a
    -- pass at 10,000 topics, 40 of them in LLVM).
    RETURN QUERY
    WITH cut AS (
        SELECT t.topic_id, t.name,
               clock_timestamp() - coalesce(make_interval(secs => CASE WHEN t.config ? 'group_ttl_ms'
                   THEN {{schema}}._setting(t.config, 'group_ttl_ms') / 1000.0 END), p_default_ttl) AS cutoff
        FROM {{schema}}.topic t
    ), idle AS (
        SELECT g.topic_id, g.group_name, k.name, k.cutoff,
               greatest(g.created_at,
                        (SELECT max(c.committed_at) FROM {{schema}}.group_cursor c
                          WHERE c.topic_id = g.topic_id AND c.group_name = g.group_name),
                        (SELECT max(m.heartbeat_at) FROM {{schema}}.group_member m
                          WHERE m.topic_id = g.topic_id AND m.group_name = g.group_name)) AS last_active
        FROM {{schema}}.consumer_group g JOIN cut k ON k.topic_id = g.topic_id
        WHERE g.created_at < k.cutoff
    ), gone AS (
        DELETE FROM {{schema}}.consumer_group g USING (
            SELECT i.topic_id, i.group_name, i.name, i.last_active FROM idle i
            WHERE i.last_active < i.cutoff
            ORDER BY i.last_active LIMIT p_max
        ) x
        WHERE g.topic_id = x.topic_id AND g.group_name = x.group_name
        RETURNING x.name, x.group_name, x.last_active
    ), ev AS (
        INSERT INTO {{schema}}.maintenance_event (kind, topic, group_name, detail)
        SELECT 'group_expired', gone.name, gone.group_name, jsonb_build_object('last_active', gone.last_active)
        FROM gone RETURNING topic, group_name, (detail->>'last_active')::timestamptz
    )
    SELECT * FROM ev;
END $function$;

-- maintenance_events lists the newest events first.
CREATE OR REPLACE FUNCTION {{schema}}.maintenance_events(p_limit integer DEFAULT 100, p_kind text DEFAULT NULL::text)
 RETURNS SETOF {{schema}}.maintenance_event
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_limit < 0 THEN
        PERFORM {{schema}}._raise('PM004', format('maintenance_events: p_limit must be >= 0, got %s', p_limit));
    END IF;
    RETURN QUERY
        SELECT * FROM {{schema}}.maintenance_event e
        WHERE p_kind IS NULL OR e.kind = p_kind
        ORDER BY e.event_id DESC LIMIT p_limit;
END $function$;

-- maintenance_events_prune deletes up to p_max events older than p_older.
CREATE OR REPLACE FUNCTION {{schema}}.maintenance_events_prune(p_older interval DEFAULT '30 days'::interval, p_max integer DEFAULT 10000)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    n bigint;
BEGIN
    IF p_max < 0 THEN
        PERFORM {{schema}}._raise('PM004', format('maintenance_events_prune: p_max must be >= 0, got %s', p_max));
    END IF;
    WITH gone AS (
        DELETE FROM {{schema}}.maintenance_event e
        WHERE e.event_id IN (SELECT e2.event_id FROM {{schema}}.maintenance_event e2
                             WHERE e2.at < clock_timestamp() - p_older ORDER BY e2.event_id LIMIT p_max)
        RETURNING 1
    )
    SELECT count(*) INTO n FROM gone;
    RETURN n;
END $function$;

-- topic_metrics: per partition, the end and start offsets, segments and
-- on-disk bytes. Cheap: catalog sizes and primary-key rows only.
CREATE OR REPLACE FUNCTION {{schema}}.topic_metrics()
 RETURNS TABLE(topic text, partition integer, start_offset bigint, end_offset bigint, segments integer, bytes bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT t.name, tp.partition, tp.start_offset, tp.next_offset, count(s.relname)::integer,
           coalesce(sum({{schema}}._segment_bytes(s.relname)), 0)::bigint
    FROM {{schema}}.topic_partition tp
    JOIN {{schema}}.topic t ON t.topic_id = tp.topic_id
    LEFT JOIN {{schema}}.segment s ON s.topic_id = tp.topic_id AND s.partition = tp.partition
    GROUP BY t.name, tp.partition, tp.start_offset, tp.next_offset
    ORDER BY t.name, tp.partition
$function$;

-- _oldest_unconsumed is the timestamp of the first record at or after
-- p_from in one partition, read from the segment tables that can hold it
-- (one index probe of one segment, unless retention dropped it). A probe of
-- the partitioned record table instead would plan, and lock, every segment
-- of every topic once per call: with 1,000 topics (12,000 segments) that
-- took seconds and ran out of lock memory ("out of shared memory").
CREATE OR REPLACE FUNCTION {{schema}}._oldest_unconsumed(p_topic_id integer, p_partition integer, p_from bigint)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    seg text;
    ts  timestamptz;
BEGIN
    FOR seg IN SELECT s.relname FROM {{schema}}.segment s
                WHERE s.topic_id = p_topic_id AND s.partition = p_partition AND s.end_offset > p_from
                ORDER BY s.start_offset
    LOOP
        BEGIN
            EXECUTE format('SELECT r."timestamp" FROM %I.%I r WHERE r.topic_id = $1 AND r.partition = $2 '
                           'AND r."offset" >= $3 ORDER BY r."offset" LIMIT 1', {{schema_lit}}, seg)
               INTO ts USING p_topic_id, p_partition, p_from;
        EXCEPTION WHEN undefined_table THEN
            ts := NULL;  -- retention dropped it meanwhile: the next one
        END;
        IF ts IS NOT NULL THEN
            RETURN ts;
        END IF;
    END LOOP;
    RETURN NULL;
END $function$;

-- group_metrics: per group and partition, the cursor, lag (end - cursor),
-- records skipped by hard retention, and the timestamp of the oldest
-- unconsumed record (one index probe each; NULL when caught up).
CREATE OR REPLACE FUNCTION {{schema}}.group_metrics()
 RETURNS TABLE(topic text, group_name text, partition integer, next_offset bigint, lag bigint, skipped bigint, oldest_unconsumed_at timestamp with time zone)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT t.name, c.group_name, c.partition, c.next_offset, greatest(tp.next_offset - c.next_offset, 0), c.skipped,
           CASE WHEN tp.next_offset > c.next_offset THEN
               {{schema}}._oldest_unconsumed(c.topic_id, c.partition, c.next_offset)
           END
    FROM {{schema}}.group_cursor c
    JOIN {{schema}}.topic t ON t.topic_id = c.topic_id
    JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
    ORDER BY t.name, c.group_name, c.partition
$function$;

-- Topic DDL, maintenance and segment creation create, attach and drop
-- tables, which only the owner of the record table may do; publishing
-- writes the counter rows and the record table, which only the owner may
-- write. They run as the schema's owner (SECURITY DEFINER,
-- arguments checked, path pinned), callable by the roles that
-- role_privileges() (auth.sql) names, not by PUBLIC. The segment helpers
-- (_segment_lock, _segment_create, _segment_ensure) are called by other
-- definer functions only.
REVOKE EXECUTE ON FUNCTION {{schema}}.topic_create(text, integer, jsonb), {{schema}}.topic_delete(text),
    {{schema}}.topic_delete(text, boolean),
    {{schema}}.topic_add_partitions(text, integer), {{schema}}.topic_configure(text, jsonb),
    {{schema}}.retention_run(integer), {{schema}}.compact_run(integer), {{schema}}.segments_ensure(),
    {{schema}}._segment_lock(integer), {{schema}}._segment_create(integer, integer, bigint, bigint),
    {{schema}}._segment_ensure(integer, integer, bigint, bigint, bigint),
    {{schema}}._offset_seq_create(integer, integer), {{schema}}._record_block(integer),
    {{schema}}.publish(text, bytea[], bytea[], jsonb[], timestamp with time zone[], integer, boolean),
    {{schema}}.publish_idempotent(text, text, bigint, bytea[], bytea[], jsonb[], timestamp with time zone[], integer, boolean),
    {{schema}}._publish_direct(text, integer, bytea[], bytea[], jsonb[], timestamp with time zone[]),
    {{schema}}.segment_ensure(text, integer), {{schema}}._segments_ahead(text, integer[]),
    {{schema}}._group_expire(interval, integer) FROM PUBLIC;
