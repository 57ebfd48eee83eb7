-- 012: every function in the schema runs with search_path pinned to
-- pg_catalog, pg_temp (issue 14, finding 5).
--
-- Before 012 most functions ran with the caller's search_path. A role that
-- can create objects in a schema on that path (public, on PostgreSQL 14 and
-- older) could plant, e.g., format(text, text, text): a better match than
-- pg_catalog.format(text, VARIADIC "any"), so pgmsg's functions would call it
-- inside the session of whoever calls them (pgmsg serve, whose role can write
-- the token table). With the path pinned, built-ins resolve in pg_catalog
-- only, and pg_temp comes last, so neither a schema on the caller's path nor
-- a temporary object can stand in for them. pgmsg's own objects were already
-- always written {{schema}}-qualified (pgmsg's tests run with an empty
-- search_path), so no body needs restating.
--
-- New functions: every later migration that creates or replaces a function
-- in the schema must give it SET search_path = pg_catalog, pg_temp (CREATE
-- OR REPLACE drops settings it does not restate). TestFunctionsPinSearchPath
-- fails otherwise.
--
-- ALTER FUNCTION ... SET adds or replaces search_path only: settings such as
-- plan_cache_mode stay.

-- murmur2 with _mul32 written out. _mul32 is a SQL function that the
-- planner inlined into murmur2's expressions; a function with a SET clause is
-- never inlined, and calling it (three times per 4 bytes of key) made
-- partition_for_key some 25 times slower. Same arithmetic, same results
-- (TestMurmur2MatchesKafka checks them against Kafka's).
CREATE OR REPLACE FUNCTION {{schema}}.murmur2(p_data bytea) RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
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
END $$;

-- maintenance_events and maintenance_events_prune check their limits (PM004)
-- instead of letting LIMIT fail with 2201W. maintenance_events used to be
-- inlined into the caller's query, so its LIMIT error surfaced as the
-- caller's own; pinned, it is no longer inlined and the error would come
-- from inside a pgmsg function without a pgmsg code (TestHostileSQLArguments).
CREATE OR REPLACE FUNCTION {{schema}}.maintenance_events(p_limit integer DEFAULT 100, p_kind text DEFAULT NULL)
RETURNS SETOF {{schema}}.maintenance_event
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_limit < 0 THEN
        PERFORM {{schema}}._raise('PM004', format('maintenance_events: p_limit must be >= 0, got %s', p_limit));
    END IF;
    RETURN QUERY
        SELECT * FROM {{schema}}.maintenance_event e
        WHERE p_kind IS NULL OR e.kind = p_kind
        ORDER BY e.event_id DESC LIMIT p_limit;
END $$;

CREATE OR REPLACE FUNCTION {{schema}}.maintenance_events_prune(p_older interval DEFAULT '30 days', p_max integer DEFAULT 10000)
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
END $$;

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = {{schema_lit}} AND p.prokind = 'f'
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = pg_catalog, pg_temp', f);
    END LOOP;
END $$;
