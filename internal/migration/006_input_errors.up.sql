-- 006: input errors raised inside pgmsg functions get pgmsg codes.
--
-- TestHostileSQLArguments found three functions that let PostgreSQL's own
-- error escape for a bad argument: partition_for_key(key, 0) divided by zero
-- (22012), and group_expire / compact_run with a negative limit failed on
-- LIMIT (2201W). The API promises SQLSTATE class PM for input errors, so
-- each now raises PM004 (invalid argument) first.

-- _invalid_partitions raises PM004 for a partition count outside 1..1024.
-- IMMUTABLE so that partition_for_key stays an inlinable SQL function: an
-- immutable function that raises on bad input is fine (int4div does too).
CREATE FUNCTION {{schema}}._invalid_partitions(p_partitions integer) RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'PM004',
        MESSAGE = format('partitions must be between 1 and 1024, got %s', coalesce(p_partitions::text, 'NULL'));
END $$;

CREATE OR REPLACE FUNCTION {{schema}}.partition_for_key(p_key bytea, p_partitions integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_partitions BETWEEN 1 AND 1024
                THEN ({{schema}}.murmur2(p_key) & 2147483647) % p_partitions
                ELSE {{schema}}._invalid_partitions(p_partitions) END
$$;

-- The maintenance functions keep their bodies (004) under an internal name;
-- the public names check their limits and call them.
ALTER FUNCTION {{schema}}.group_expire(interval, integer) RENAME TO _group_expire;
ALTER FUNCTION {{schema}}.compact_run(integer) RENAME TO _compact_run;

CREATE FUNCTION {{schema}}.group_expire(p_default_ttl interval DEFAULT '7 days', p_max integer DEFAULT 100)
RETURNS TABLE (topic text, group_name text, last_active timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_max < 0 THEN
        PERFORM {{schema}}._raise('PM004', format('group_expire: p_max must be >= 0, got %s', p_max));
    END IF;
    IF p_default_ttl < interval '0' THEN
        PERFORM {{schema}}._raise('PM004', format('group_expire: p_default_ttl must not be negative, got %s', p_default_ttl));
    END IF;
    RETURN QUERY SELECT * FROM {{schema}}._group_expire(p_default_ttl, p_max);
END $$;

CREATE FUNCTION {{schema}}.compact_run(p_max_partitions integer DEFAULT 4)
RETURNS TABLE (topic text, partition integer, closed_end bigint, removed bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_max_partitions < 0 THEN
        PERFORM {{schema}}._raise('PM004', format('compact_run: p_max_partitions must be >= 0, got %s', p_max_partitions));
    END IF;
    RETURN QUERY SELECT * FROM {{schema}}._compact_run(p_max_partitions);
END $$;
