DROP FUNCTION IF EXISTS {{schema}}.compact_run(integer);
DROP FUNCTION IF EXISTS {{schema}}.group_expire(interval, integer);
ALTER FUNCTION {{schema}}._compact_run(integer) RENAME TO compact_run;
ALTER FUNCTION {{schema}}._group_expire(interval, integer) RENAME TO group_expire;

CREATE OR REPLACE FUNCTION {{schema}}.partition_for_key(p_key bytea, p_partitions integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ({{schema}}.murmur2(p_key) & 2147483647) % p_partitions
$$;
DROP FUNCTION IF EXISTS {{schema}}._invalid_partitions(integer);
