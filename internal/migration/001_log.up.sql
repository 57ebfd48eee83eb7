-- pgmsg 001: the log (topics, partitions, segments, records, consumer groups).
--
-- {{schema}} is replaced by the quoted schema name and {{schema_lit}} by the
-- schema name as a quoted string literal before this file runs (see
-- internal/migration). Nothing else is templated.

CREATE TABLE {{schema}}.topic (
    topic_id         integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             text        NOT NULL UNIQUE,
    partitions       integer     NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
    -- Records per segment (one range partition of one topic partition).
    segment_records  bigint      NOT NULL DEFAULT 1048576 CHECK (segment_records >= 16),
    -- Largest key + value + headers accepted for one record, in bytes.
    max_record_bytes integer     NOT NULL DEFAULT 1048576 CHECK (max_record_bytes > 0),
    -- Free-form settings for later features (retention, cleanup policy ...).
    config           jsonb       NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT topic_name_valid CHECK (name ~ '^[A-Za-z0-9._-]{1,200}$')
);

-- One row per topic partition: the offset counter of the seeds. Publishers
-- lock this row (UPDATE) to reserve a contiguous offset range; the lock is
-- what makes offsets gapless and increasing in commit order. No indexed
-- column is ever updated and fillfactor leaves room, so updates are HOT.
CREATE TABLE {{schema}}.topic_partition (
    topic_id     integer NOT NULL REFERENCES {{schema}}.topic ON DELETE CASCADE,
    partition    integer NOT NULL,
    next_offset  bigint  NOT NULL DEFAULT 0,   -- offset the next record gets
    start_offset bigint  NOT NULL DEFAULT 0,   -- lowest offset still stored
    segment_end  bigint  NOT NULL DEFAULT 0,   -- exclusive end of created segments
    compacted_to bigint  NOT NULL DEFAULT 0,   -- next_offset when compaction last ran
    PRIMARY KEY (topic_id, partition)
) WITH (fillfactor = 50);

-- Segments: one range partition of the record table per (topic, partition,
-- offset range). Retention (a later migration) drops whole segments.
CREATE TABLE {{schema}}.segment (
    topic_id     integer NOT NULL,
    partition    integer NOT NULL,
    start_offset bigint  NOT NULL,
    end_offset   bigint  NOT NULL,            -- exclusive
    relname      text    NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic_id, partition, start_offset),
    FOREIGN KEY (topic_id, partition) REFERENCES {{schema}}.topic_partition ON DELETE CASCADE
);

-- Records. LIST-partitioned by topic; each topic's table is RANGE-partitioned
-- by (partition, offset) into segments. The primary key is the only index.
CREATE TABLE {{schema}}.record (
    topic_id    integer     NOT NULL,
    partition   integer     NOT NULL,
    "offset"    bigint      NOT NULL,
    "timestamp" timestamptz NOT NULL,
    key         bytea,
    value       bytea,
    headers     jsonb,
    PRIMARY KEY (topic_id, partition, "offset")
) PARTITION BY LIST (topic_id);

CREATE TABLE {{schema}}.consumer_group (
    topic_id       integer     NOT NULL REFERENCES {{schema}}.topic ON DELETE CASCADE,
    group_name     text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic_id, group_name),
    CONSTRAINT consumer_group_name_valid CHECK (group_name ~ '^[A-Za-z0-9._-]{1,200}$')
);

-- One durable cursor per (topic, group, partition) plus at most one claim.
-- A claim is held while claim_expires_at is set and in the future; its
-- identity is claim_epoch, which every claim and reset increments.
CREATE TABLE {{schema}}.group_cursor (
    topic_id         integer NOT NULL,
    group_name       text    NOT NULL,
    partition        integer NOT NULL,
    next_offset      bigint  NOT NULL,
    claim_epoch      bigint  NOT NULL DEFAULT 0,
    claim_start      bigint,
    claim_end        bigint,                   -- inclusive
    claim_expires_at timestamptz,
    claim_owner      text,
    claimed_at       timestamptz,
    committed_at     timestamptz,
    -- Membership (group_heartbeat): the member the partition is assigned
    -- to, the assignment's generation, and the member it is being handed to
    -- once the owner's live claim ends.
    owner            text,
    owner_epoch      bigint NOT NULL DEFAULT 0,
    next_owner       text,
    owned_at         timestamptz,
    -- Records this group never read because retention's hard limit dropped
    -- them first (never silent: also logged in maintenance_event).
    skipped          bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, group_name, partition),
    FOREIGN KEY (topic_id, group_name) REFERENCES {{schema}}.consumer_group ON DELETE CASCADE
) WITH (fillfactor = 50);

-- Live members of a group (group_heartbeat). A member whose last heartbeat
-- is older than its session timeout (database clock) is dead: the next
-- heartbeat of any member removes it and reassigns its partitions.
CREATE TABLE {{schema}}.group_member (
    topic_id        integer     NOT NULL,
    group_name      text        NOT NULL,
    member_id       text        NOT NULL,
    joined_at       timestamptz NOT NULL,
    heartbeat_at    timestamptz NOT NULL,
    session_timeout interval    NOT NULL,
    PRIMARY KEY (topic_id, group_name, member_id),
    FOREIGN KEY (topic_id, group_name) REFERENCES {{schema}}.consumer_group ON DELETE CASCADE
);

-- ---------------------------------------------------------------------------
-- Errors. Every error pgmsg raises has SQLSTATE class PM; the Go library maps
-- each code to a sentinel (errors.go) and docs/sql-api.md lists them.
-- ---------------------------------------------------------------------------
CREATE FUNCTION {{schema}}._raise(p_code text, p_message text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message;
END $$;

CREATE FUNCTION {{schema}}.valid_name(p_name text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_name IS NOT NULL AND p_name ~ '^[A-Za-z0-9._-]{1,200}$'
$$;

CREATE FUNCTION {{schema}}._check_name(p_kind text, p_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT {{schema}}.valid_name(p_name) THEN
        PERFORM {{schema}}._raise('PM003', format(
            'invalid %s name %s: use 1-200 letters, digits, ".", "_" or "-"',
            p_kind, left(quote_literal(coalesce(p_name, '')), 60)));
    END IF;
END $$;

CREATE FUNCTION {{schema}}._topic(p_name text) RETURNS {{schema}}.topic
LANGUAGE plpgsql STABLE AS $$
DECLARE
    t {{schema}}.topic;
BEGIN
    SELECT * INTO t FROM {{schema}}.topic WHERE name = p_name;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM001', format('unknown topic %s', left(quote_literal(coalesce(p_name, '')), 210)));
    END IF;
    RETURN t;
END $$;

-- ---------------------------------------------------------------------------
-- Kafka-compatible partitioner: murmur2 exactly as Kafka's
-- org.apache.kafka.common.utils.Utils.murmur2, then toPositive % partitions.
-- 32-bit multiplication is split so bigint never overflows.
-- ---------------------------------------------------------------------------
CREATE FUNCTION {{schema}}._mul32(a bigint, b bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ((a * (b & 65535)) + (((a * (b >> 16)) & 65535) << 16)) & 4294967295
$$;

CREATE FUNCTION {{schema}}.murmur2(p_data bytea) RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    len  integer := length(p_data);
    m    constant bigint := 1540483477;   -- 0x5bd1e995
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
        k := {{schema}}._mul32(k, m);
        k := k # (k >> 24);
        k := {{schema}}._mul32(k, m);
        h := {{schema}}._mul32(h, m);
        h := h # k;
        i := i + 4;
    END LOOP;
    IF tail = 3 THEN h := h # (get_byte(p_data, base + 2)::bigint << 16); END IF;
    IF tail >= 2 THEN h := h # (get_byte(p_data, base + 1)::bigint << 8); END IF;
    IF tail >= 1 THEN
        h := h # get_byte(p_data, base)::bigint;
        h := {{schema}}._mul32(h, m);
    END IF;
    h := h # (h >> 13);
    h := {{schema}}._mul32(h, m);
    h := h # (h >> 15);
    IF h >= 2147483648 THEN h := h - 4294967296; END IF;
    RETURN h::integer;
END $$;

CREATE FUNCTION {{schema}}.partition_for_key(p_key bytea, p_partitions integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ({{schema}}.murmur2(p_key) & 2147483647) % p_partitions
$$;

-- ---------------------------------------------------------------------------
-- Segments
-- ---------------------------------------------------------------------------

-- _segment_lock takes the lock segment creation needs on the topic's
-- table, so that callers can take it before any counter row.
CREATE FUNCTION {{schema}}._segment_lock(p_topic_id integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('LOCK TABLE %I.%I IN SHARE UPDATE EXCLUSIVE MODE', {{schema_lit}}, 'record_' || p_topic_id);
END $$;

-- _segment_create creates and attaches the segment [p_lo, p_hi) of one
-- partition. CREATE + ATTACH takes SHARE UPDATE EXCLUSIVE on the topic's
-- table (CREATE ... PARTITION OF would take ACCESS EXCLUSIVE and block every
-- reader and writer of the topic). Identifiers are built from integers only
-- and still go through %I.
CREATE FUNCTION {{schema}}._segment_create(p_topic_id integer, p_partition integer, p_lo bigint, p_hi bigint)
RETURNS void LANGUAGE plpgsql
-- Runs as the schema owner: an application role needs no CREATE privilege
-- and no ownership of the topic's table to publish.
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

-- _segment_ensure creates segments until the partition's segments reach
-- p_needed plus two segments of headroom. The caller holds the partition's
-- counter row lock, so two publishers never create the same segment.
-- Why two: with a quarter segment of headroom, inserts by other sessions
-- that started right after the creating transaction committed were
-- intermittently not routed to the just-attached segment ("no partition of
-- relation found for row", ~10 in 3,200 concurrent publishes, reproduced by
-- TestPublishIntoFreshSegmentsConcurrently); with two segments ahead no
-- other session inserts into a segment in the moments after its attach.
CREATE FUNCTION {{schema}}._segment_ensure(p_topic_id integer, p_partition integer, p_segment_end bigint,
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

-- ---------------------------------------------------------------------------
-- Topics
-- ---------------------------------------------------------------------------

-- topic_create creates a topic with p_partitions partitions. p_config may
-- hold segment_records and max_record_bytes (numbers) and any other settings,
-- which are stored for later features.
CREATE FUNCTION {{schema}}.topic_create(p_name text, p_partitions integer DEFAULT 1, p_config jsonb DEFAULT '{}')
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

CREATE FUNCTION {{schema}}._partitions_add(t {{schema}}.topic, p_from integer, p_to integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    p integer;
BEGIN
    FOR p IN p_from .. p_to - 1 LOOP
        INSERT INTO {{schema}}.topic_partition (topic_id, partition) VALUES (t.topic_id, p);
        PERFORM {{schema}}._segment_create(t.topic_id, p, 0, t.segment_records);
        UPDATE {{schema}}.topic_partition SET segment_end = t.segment_records
        WHERE topic_id = t.topic_id AND partition = p;
        -- Existing groups get a cursor at the start of the new partition, so
        -- they read it from its first record (as Kafka consumers do).
        INSERT INTO {{schema}}.group_cursor (topic_id, group_name, partition, next_offset)
        SELECT t.topic_id, g.group_name, p, 0 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id;
    END LOOP;
END $$;

-- topic_add_partitions grows a topic to p_partitions partitions (never shrinks).
CREATE FUNCTION {{schema}}.topic_add_partitions(p_name text, p_partitions integer)
RETURNS {{schema}}.topic LANGUAGE plpgsql AS $$
DECLARE
    t {{schema}}.topic;
BEGIN
    PERFORM {{schema}}._topic(p_name);
    SELECT * INTO t FROM {{schema}}.topic WHERE name = p_name FOR UPDATE;
    IF p_partitions IS NULL OR p_partitions <= t.partitions OR p_partitions > 1024 THEN
        PERFORM {{schema}}._raise('PM004', format('partitions must be more than the current %s and at most 1024, got %s',
                                                  t.partitions, coalesce(p_partitions::text, 'NULL')));
    END IF;
    PERFORM {{schema}}._partitions_add(t, t.partitions, p_partitions);
    UPDATE {{schema}}.topic SET partitions = p_partitions WHERE topic_id = t.topic_id RETURNING * INTO t;
    RETURN t;
END $$;

-- topic_configure changes a topic's settings: each key of p_settings is
-- set, and a key whose value is JSON null is removed. segment_records
-- (applies to segments created from now on) and max_record_bytes are
-- validated as in topic_create.
CREATE FUNCTION {{schema}}.topic_configure(p_name text, p_settings jsonb)
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

-- topic_delete drops a topic, its records (whole tables, no DELETE) and its groups.
CREATE FUNCTION {{schema}}.topic_delete(p_name text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_name);
BEGIN
    EXECUTE format('DROP TABLE %I.%I', {{schema_lit}}, 'record_' || t.topic_id);
    DELETE FROM {{schema}}.topic WHERE topic_id = t.topic_id;
END $$;

CREATE FUNCTION {{schema}}.topic_list()
RETURNS TABLE (name text, partitions integer, segment_records bigint, max_record_bytes integer,
               config jsonb, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT t.name, t.partitions, t.segment_records, t.max_record_bytes, t.config, t.created_at
    FROM {{schema}}.topic t ORDER BY t.name
$$;

-- topic_describe: per partition, the first stored and next offsets, the
-- record count (gapless, so next - start) and the bytes of its segments.
CREATE FUNCTION {{schema}}.topic_describe(p_name text)
RETURNS TABLE (partition integer, start_offset bigint, next_offset bigint, records bigint,
               segments integer, approx_bytes bigint)
LANGUAGE plpgsql STABLE AS $$
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
END $$;

-- ---------------------------------------------------------------------------
-- Publish
-- ---------------------------------------------------------------------------

-- _backpressure raises PM014 when publishing p_n more records would put the
-- partition more than the topic's max_lag_records ahead of its slowest
-- group. Only topics with the setting pay for the check (primary-key reads
-- of the group cursors). Expired groups are deleted by maintenance and stop
-- counting then.
CREATE FUNCTION {{schema}}._backpressure(t {{schema}}.topic, p_partition integer, p_n integer)
RETURNS void LANGUAGE plpgsql AS $$
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
        PERFORM {{schema}}._raise('PM014', format(
            'backpressure: topic %s partition %s would be %s records ahead of group %s (max_lag_records %s)',
            quote_literal(t.name), p_partition, tip + p_n - slowest, quote_literal(grp), max_lag));
    END IF;
END $$;

-- _append reserves offsets on one partition and inserts the batch, in the
-- caller's transaction. The counter UPDATE takes the partition's row lock,
-- held until commit: that is what orders commits by offset. It is the only
-- lock a publisher waits on.
CREATE FUNCTION {{schema}}._append(t {{schema}}.topic, p_partition integer, p_values bytea[], p_keys bytea[],
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

-- segment_ensure creates the segments of one partition ahead of need (two
-- segments of headroom), in its own transaction: lock order is the topic
-- table's SHARE UPDATE EXCLUSIVE lock first, then the counter row, so it
-- cannot deadlock with publishers. Returns the segments created, or -1
-- when a publisher holds the counter row (try again later). The Go
-- client calls it after a publish reports segments_low; maintenance calls
-- segments_ensure() for all partitions.
CREATE FUNCTION {{schema}}.segment_ensure(p_topic text, p_partition integer) RETURNS integer
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

-- publish appends a batch of records to a topic in the caller's transaction
-- and returns one row per partition written: its first offset and count.
-- Arrays are parallel (keys, headers and timestamps may be NULL or shorter:
-- missing entries are NULL). Partition: p_partition if given, else each
-- record's key hashed as Kafka does, else one random partition for all
-- unkeyed records of the call. Partitions are locked in ascending order so
-- concurrent multi-partition publishes cannot deadlock.
CREATE FUNCTION {{schema}}.publish(p_topic text, p_values bytea[], p_keys bytea[] DEFAULT NULL,
                                   p_headers jsonb[] DEFAULT NULL, p_timestamps timestamptz[] DEFAULT NULL,
                                   p_partition integer DEFAULT NULL, p_notify boolean DEFAULT true)
RETURNS TABLE (partition integer, base_offset bigint, record_count integer, "timestamp" timestamptz,
               segments_low boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    t      {{schema}}.topic := {{schema}}._topic(p_topic);
    n      integer := coalesce(cardinality(p_values), 0);
    now_ts timestamptz := clock_timestamp();
    spread integer;
    part   record;
BEGIN
    IF n = 0 THEN
        PERFORM {{schema}}._raise('PM010', 'empty batch: publish needs at least one record');
    END IF;
    IF coalesce(cardinality(p_keys), 0) > n OR coalesce(cardinality(p_headers), 0) > n
       OR coalesce(cardinality(p_timestamps), 0) > n THEN
        PERFORM {{schema}}._raise('PM004', 'keys, headers and timestamps must not be longer than values');
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

-- ---------------------------------------------------------------------------
-- Consumer groups
-- ---------------------------------------------------------------------------

-- _position resolves 'earliest', 'latest', an offset or a timestamp to an
-- offset of one partition. A timestamp resolves to the first record at or
-- after it (a scan of the partition: there is no time index), else the end.
CREATE FUNCTION {{schema}}._position(p_topic_id integer, p_partition integer, p_spec text)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
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
    BEGIN
        ts := p_spec::timestamptz;
    EXCEPTION WHEN OTHERS THEN
        PERFORM {{schema}}._raise('PM011', format('invalid position %s: use earliest, latest, an offset or a timestamp',
                                                  left(quote_literal(p_spec), 80)));
    END;
    SELECT min(r."offset") INTO o FROM {{schema}}.record r
    WHERE r.topic_id = p_topic_id AND r.partition = p_partition AND r."timestamp" >= ts;
    RETURN coalesce(o, tp.next_offset);
END $$;

-- group_create creates a consumer group on a topic with a cursor per
-- partition at p_start ('earliest', 'latest', an offset or a timestamp).
-- Returns false if the group already existed (its cursors are unchanged).
CREATE FUNCTION {{schema}}.group_create(p_topic text, p_group text, p_start text DEFAULT 'earliest')
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_topic);
BEGIN
    PERFORM {{schema}}._check_name('group', p_group);
    INSERT INTO {{schema}}.consumer_group (topic_id, group_name) VALUES (t.topic_id, p_group)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO {{schema}}.group_cursor (topic_id, group_name, partition, next_offset)
    SELECT t.topic_id, p_group, p.partition, {{schema}}._position(t.topic_id, p.partition, p_start)
    FROM {{schema}}.topic_partition p WHERE p.topic_id = t.topic_id;
    RETURN true;
END $$;

-- claim leases the next records of one partition to the caller and returns
-- them, in one round trip. It picks p_partition, or else the partition of
-- the topic with unread records and no live claim that was claimed least
-- recently. Returns no rows (and writes nothing) when there is nothing to
-- read. The claim lasts p_lease (database clock); commit() with the
-- returned claim_epoch advances the cursor, and a claim that expires first
-- is delivered again from the cursor. The group is created at p_start on
-- first use. Cursor rows are taken FOR UPDATE SKIP LOCKED: claimers never
-- wait on each other.
CREATE FUNCTION {{schema}}.claim(p_topic text, p_group text, p_max_records integer DEFAULT 100,
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

-- _held locks the cursor of a claim and checks the claim is still held.
CREATE FUNCTION {{schema}}._held(p_topic text, p_group text, p_partition integer, p_claim_epoch bigint)
RETURNS {{schema}}.group_cursor LANGUAGE plpgsql AS $$
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
            'claim %s on partition %s is not held: it was committed, released, reset or claimed again (current claim %s)',
            p_claim_epoch, p_partition, cur.claim_epoch));
    END IF;
    IF cur.claim_expires_at <= clock_timestamp() THEN
        PERFORM {{schema}}._raise('PM008', format('claim %s on partition %s expired at %s',
                                                  p_claim_epoch, p_partition, cur.claim_expires_at));
    END IF;
    RETURN cur;
END $$;

-- commit advances the group's cursor past a claim (or to p_next_offset
-- inside it, for a partial commit) and ends the claim. Returns the new
-- cursor. Fails with PM008 if the claim expired and PM009 if it is no longer
-- held, writing nothing.
CREATE FUNCTION {{schema}}.commit(p_topic text, p_group text, p_partition integer, p_claim_epoch bigint,
                                  p_next_offset bigint DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    cur  {{schema}}.group_cursor := {{schema}}._held(p_topic, p_group, p_partition, p_claim_epoch);
    v_next bigint := coalesce(p_next_offset, cur.claim_end + 1);
BEGIN
    IF v_next < cur.claim_start OR v_next > cur.claim_end + 1 THEN
        PERFORM {{schema}}._raise('PM011', format('commit offset %s outside the claim [%s, %s]',
                                                  v_next, cur.claim_start, cur.claim_end + 1));
    END IF;
    UPDATE {{schema}}.group_cursor c
       SET next_offset = v_next, claim_start = NULL, claim_end = NULL, claim_expires_at = NULL,
           claim_owner = NULL, committed_at = clock_timestamp()
     WHERE c.topic_id = cur.topic_id AND c.group_name = cur.group_name AND c.partition = cur.partition;
    RETURN v_next;
END $$;

-- release ends a claim without moving the cursor: its records are delivered
-- again at once instead of after the lease.
CREATE FUNCTION {{schema}}.release(p_topic text, p_group text, p_partition integer, p_claim_epoch bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    cur {{schema}}.group_cursor := {{schema}}._held(p_topic, p_group, p_partition, p_claim_epoch);
BEGIN
    UPDATE {{schema}}.group_cursor c
       SET claim_start = NULL, claim_end = NULL, claim_expires_at = NULL, claim_owner = NULL
     WHERE c.topic_id = cur.topic_id AND c.group_name = cur.group_name AND c.partition = cur.partition;
END $$;

-- extend pushes a held claim's expiry to now + p_lease.
CREATE FUNCTION {{schema}}.extend(p_topic text, p_group text, p_partition integer, p_claim_epoch bigint,
                                  p_lease interval DEFAULT '30 seconds')
RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
    cur {{schema}}.group_cursor := {{schema}}._held(p_topic, p_group, p_partition, p_claim_epoch);
    expires timestamptz := clock_timestamp() + p_lease;
BEGIN
    IF p_lease IS NULL OR p_lease <= interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive');
    END IF;
    UPDATE {{schema}}.group_cursor c SET claim_expires_at = expires
     WHERE c.topic_id = cur.topic_id AND c.group_name = cur.group_name AND c.partition = cur.partition;
    RETURN expires;
END $$;

-- group_reset moves a group's cursor (one partition or all) to 'earliest',
-- 'latest', an offset or a timestamp. Live claims are ended and fenced: their
-- commit fails with PM009.
CREATE FUNCTION {{schema}}.group_reset(p_topic text, p_group text, p_to text, p_partition integer DEFAULT NULL)
RETURNS TABLE (partition integer, next_offset bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_topic);
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group) THEN
        PERFORM {{schema}}._raise('PM007', format('unknown group %s on topic %s',
                                                  left(quote_literal(coalesce(p_group, '')), 210), quote_literal(t.name)));
    END IF;
    IF p_partition IS NOT NULL AND (p_partition < 0 OR p_partition >= t.partitions) THEN
        PERFORM {{schema}}._raise('PM005', format('partition %s out of range: topic %s has %s partitions',
                                                  p_partition, quote_literal(t.name), t.partitions));
    END IF;
    RETURN QUERY
    UPDATE {{schema}}.group_cursor c
       SET next_offset = {{schema}}._position(t.topic_id, c.partition, p_to),
           claim_epoch = c.claim_epoch + 1, claim_start = NULL, claim_end = NULL,
           claim_expires_at = NULL, claim_owner = NULL
     WHERE c.topic_id = t.topic_id AND c.group_name = p_group
       AND (p_partition IS NULL OR c.partition = p_partition)
    RETURNING c.partition, c.next_offset;
END $$;

-- group_delete removes a group and its cursors. Returns false if it did not exist.
CREATE FUNCTION {{schema}}.group_delete(p_topic text, p_group text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_topic);
BEGIN
    DELETE FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group;
    RETURN FOUND;
END $$;

-- group_list: one row per group and partition with its lag (end - cursor).
-- Cheap: primary-key reads of the counter and cursor rows, no record scan.
CREATE FUNCTION {{schema}}.group_list(p_topic text DEFAULT NULL, p_group text DEFAULT NULL)
RETURNS TABLE (topic text, group_name text, partition integer, next_offset bigint, end_offset bigint,
               lag bigint, claim_epoch bigint, claim_owner text, claim_expires_at timestamptz,
               committed_at timestamptz, owner text, owner_epoch bigint, skipped bigint)
LANGUAGE sql STABLE AS $$
    SELECT t.name, c.group_name, c.partition, c.next_offset, tp.next_offset,
           greatest(tp.next_offset - c.next_offset, 0), c.claim_epoch,
           CASE WHEN c.claim_expires_at > clock_timestamp() THEN c.claim_owner END,
           CASE WHEN c.claim_expires_at > clock_timestamp() THEN c.claim_expires_at END,
           c.committed_at, c.owner, c.owner_epoch, c.skipped
    FROM {{schema}}.group_cursor c
    JOIN {{schema}}.topic t ON t.topic_id = c.topic_id
    JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
    WHERE (p_topic IS NULL OR t.name = p_topic) AND (p_group IS NULL OR c.group_name = p_group)
    ORDER BY t.name, c.group_name, c.partition
$$;

-- fetch reads records by offset without claiming (replay, debugging).
CREATE FUNCTION {{schema}}.fetch(p_topic text, p_partition integer, p_from bigint, p_max_records integer DEFAULT 100)
RETURNS TABLE (partition integer, "offset" bigint, "timestamp" timestamptz, key bytea, value bytea, headers jsonb)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
DECLARE
    t {{schema}}.topic := {{schema}}._topic(p_topic);
BEGIN
    IF p_partition IS NULL OR p_partition < 0 OR p_partition >= t.partitions THEN
        PERFORM {{schema}}._raise('PM005', format('partition %s out of range: topic %s has %s partitions',
                                                  coalesce(p_partition::text, 'NULL'), quote_literal(t.name), t.partitions));
    END IF;
    IF p_from IS NULL OR p_from < 0 THEN
        PERFORM {{schema}}._raise('PM011', 'offset must not be negative');
    END IF;
    RETURN QUERY
    SELECT r.partition, r."offset", r."timestamp", r.key, r.value, r.headers
    FROM {{schema}}.record r
    WHERE r.topic_id = t.topic_id AND r.partition = p_partition
      AND r."offset" >= p_from AND r."offset" < p_from + greatest(p_max_records, 0)
    ORDER BY r."offset";
END $$;

-- ---------------------------------------------------------------------------
-- Group membership: automatic, sticky partition assignment (docs/architecture.md)
-- ---------------------------------------------------------------------------

-- _rebalance recomputes a group's assignment. The caller holds the
-- consumer_group row lock, so rebalances of one group never interleave.
-- Steps: remove dead members (ending their live claims, which fences their
-- late commits); spread partitions evenly (sizes differ by at most one,
-- members already owning more get the larger share); keep each member's
-- lowest partitions up to its share; hand the rest out. An unowned
-- partition moves at once; a partition taken from a live member is marked
-- next_owner and moves when that member's live claim ends (it may commit
-- it), so two members never process a partition at the same time.
CREATE FUNCTION {{schema}}._rebalance(p_topic_id integer, p_group text) RETURNS void
LANGUAGE plpgsql AS $$
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
BEGIN
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
    FOR i IN 1 .. coalesce(cardinality(takers), 0) LOOP
        FOR k IN 1 .. needs[i] LOOP
            UPDATE {{schema}}.group_cursor c
               SET owner       = CASE WHEN c.owner IS NULL THEN takers[i] ELSE c.owner END,
                   owner_epoch = CASE WHEN c.owner IS NULL THEN c.owner_epoch + 1 ELSE c.owner_epoch END,
                   owned_at    = CASE WHEN c.owner IS NULL THEN now_ts ELSE c.owned_at END,
                   next_owner  = CASE WHEN c.owner IS NULL THEN NULL ELSE takers[i] END
             WHERE c.topic_id = p_topic_id AND c.group_name = p_group AND c.partition = free[j]
               AND (c.owner IS NULL OR c.next_owner IS DISTINCT FROM takers[i]);
            j := j + 1;
        END LOOP;
    END LOOP;

    -- A hand-over completes once the old owner holds no live claim.
    UPDATE {{schema}}.group_cursor c
       SET owner = c.next_owner, next_owner = NULL, owner_epoch = c.owner_epoch + 1, owned_at = now_ts
     WHERE c.topic_id = p_topic_id AND c.group_name = p_group AND c.next_owner IS NOT NULL
       AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now_ts);
END $$;

-- group_heartbeat joins p_member to the group (created at p_start if new)
-- or keeps it alive, rebalances, and returns the member's assignment:
-- partitions it owns with their generation (owner_epoch) and whether each
-- is being handed over (revoking: finish the live claim, claim no more).
-- joined is true when the member was not in the group before this call
-- (first join, or its session had expired: its old partitions are lost).
CREATE FUNCTION {{schema}}.group_heartbeat(p_topic text, p_group text, p_member text,
                                           p_session_timeout interval DEFAULT '10 seconds',
                                           p_start text DEFAULT 'earliest')
RETURNS TABLE (joined boolean, partitions integer[], owner_epochs bigint[], revoking boolean[])
LANGUAGE plpgsql AS $$
DECLARE
    t        {{schema}}.topic := {{schema}}._topic(p_topic);
    v_joined boolean;
BEGIN
    PERFORM {{schema}}._check_name('member', p_member);
    IF p_session_timeout IS NULL OR p_session_timeout <= interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'session timeout must be positive');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group) THEN
        PERFORM {{schema}}.group_create(p_topic, p_group, p_start);
    END IF;
    PERFORM 1 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group FOR UPDATE;
    UPDATE {{schema}}.group_member m SET heartbeat_at = clock_timestamp(), session_timeout = p_session_timeout
     WHERE m.topic_id = t.topic_id AND m.group_name = p_group AND m.member_id = p_member
       AND m.heartbeat_at + m.session_timeout >= clock_timestamp();
    v_joined := NOT FOUND;
    IF v_joined THEN
        -- New, or dead and not yet removed: (re)join with a clean slate.
        DELETE FROM {{schema}}.group_member m
         WHERE m.topic_id = t.topic_id AND m.group_name = p_group AND m.member_id = p_member;
        UPDATE {{schema}}.group_cursor c
           SET claim_epoch = c.claim_epoch + 1, claim_start = NULL, claim_end = NULL,
               claim_expires_at = NULL, claim_owner = NULL
         WHERE c.topic_id = t.topic_id AND c.group_name = p_group
           AND c.claim_expires_at > clock_timestamp() AND c.claim_owner = p_member;
        UPDATE {{schema}}.group_cursor c SET owner = NULL, next_owner = NULL
         WHERE c.topic_id = t.topic_id AND c.group_name = p_group AND (c.owner = p_member OR c.next_owner = p_member);
        INSERT INTO {{schema}}.group_member (topic_id, group_name, member_id, joined_at, heartbeat_at, session_timeout)
        VALUES (t.topic_id, p_group, p_member, clock_timestamp(), clock_timestamp(), p_session_timeout);
    END IF;
    PERFORM {{schema}}._rebalance(t.topic_id, p_group);
    RETURN QUERY
    SELECT v_joined,
           coalesce(array_agg(c.partition ORDER BY c.partition), '{}'),
           coalesce(array_agg(c.owner_epoch ORDER BY c.partition), '{}'),
           coalesce(array_agg(c.next_owner IS NOT NULL ORDER BY c.partition), '{}')
    FROM {{schema}}.group_cursor c
    WHERE c.topic_id = t.topic_id AND c.group_name = p_group AND c.owner = p_member;
END $$;

-- group_leave removes a member at once: its live claims end (their commits
-- are fenced) and its partitions are reassigned without waiting for the
-- session timeout. Returns false if it was not a member.
CREATE FUNCTION {{schema}}.group_leave(p_topic text, p_group text, p_member text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    t       {{schema}}.topic := {{schema}}._topic(p_topic);
    v_found boolean;
BEGIN
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
END $$;

-- group_members lists a group's members with their partitions and whether
-- their session is still alive (database clock).
CREATE FUNCTION {{schema}}.group_members(p_topic text, p_group text)
RETURNS TABLE (member_id text, joined_at timestamptz, heartbeat_at timestamptz, session_timeout interval,
               alive boolean, partitions integer[])
LANGUAGE plpgsql STABLE AS $$
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
END $$;
