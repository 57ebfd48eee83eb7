-- Reverts 012: functions run with the caller's search_path again, except the
-- three SECURITY DEFINER segment functions (_segment_lock, _segment_create,
-- _segment_ensure), which have pinned it since 001.

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = {{schema_lit}} AND p.prokind = 'f'
           AND p.proname NOT IN ('_segment_lock', '_segment_create', '_segment_ensure')
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s RESET search_path', f);
    END LOOP;
END $$;

-- murmur2 as 001 defined it, calling _mul32.
CREATE OR REPLACE FUNCTION {{schema}}.murmur2(p_data bytea) RETURNS integer
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

-- maintenance_events and maintenance_events_prune as 004 defined them.
CREATE OR REPLACE FUNCTION {{schema}}.maintenance_events(p_limit integer DEFAULT 100, p_kind text DEFAULT NULL)
RETURNS SETOF {{schema}}.maintenance_event
LANGUAGE sql STABLE AS $$
    SELECT * FROM {{schema}}.maintenance_event e
    WHERE p_kind IS NULL OR e.kind = p_kind
    ORDER BY e.event_id DESC LIMIT p_limit
$$;

CREATE OR REPLACE FUNCTION {{schema}}.maintenance_events_prune(p_older interval DEFAULT '30 days', p_max integer DEFAULT 10000)
RETURNS bigint LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM {{schema}}.maintenance_event e
        WHERE e.event_id IN (SELECT e2.event_id FROM {{schema}}.maintenance_event e2
                             WHERE e2.at < clock_timestamp() - p_older ORDER BY e2.event_id LIMIT p_max)
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;
