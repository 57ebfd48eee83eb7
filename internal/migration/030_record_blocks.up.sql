-- pgmsg 030: the record table is LIST-partitioned into blocks of 100 topic
-- ids (record_b<k>: topics 100k to 100k + 99), each LIST-partitioned by
-- topic_id into the topics' tables, where each topic's table was a
-- partition of the record table itself. Attaching a topic's table
-- changed the record table's partition descriptor, which lists every
-- topic, and the creating session and every session using the record
-- table afterwards rebuilt it: topic_create cost more with each topic.
-- Now it changes its block's (functions/log.sql, _record_block).
--
-- Each topic's table is detached from the record table and attached to
-- its block, whose block is attached to the record table first. Nothing
-- is copied: the records stay in their segment tables, with their grants.
-- The attach checks that the topic's rows belong to it, so it reads the
-- stored records once (under the migration's locks). The record table
-- itself is kept (its grants, defaults, triggers and owner).
-- The record table's primary key becomes a unique index on the same
-- columns (record_key): every segment's primary key was a pg_constraint
-- row, and PostgreSQL scans all of pg_constraint (by confrelid, which no
-- index covers) for each partition created or attached, so each segment
-- made every later topic_create and segment slower. A unique index has no
-- constraint row. Dropped first, built last: the build reads every
-- segment once (the attaches below read them too).
ALTER TABLE {{schema}}.record DROP CONSTRAINT record_pkey;

DO $migrate$
DECLARE
    size  constant integer := 100;
    k     integer;
    tid   integer;
    tids  integer[];
BEGIN
    SELECT coalesce(array_agg(substr(c.relname, 8)::integer ORDER BY 1), '{}') INTO tids
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = format('%I.record', {{schema_lit}})::regclass
       AND c.relname ~ '^record_[0-9]+$';
    FOREACH tid IN ARRAY tids LOOP
        EXECUTE format('ALTER TABLE %I.record DETACH PARTITION %I.%I',
                       {{schema_lit}}, {{schema_lit}}, 'record_' || tid);
    END LOOP;
    FOR k IN SELECT DISTINCT t / size FROM unnest(tids) t ORDER BY 1 LOOP
        EXECUTE format('CREATE TABLE %I.%I (LIKE %I.record INCLUDING DEFAULTS) PARTITION BY LIST (topic_id)',
                       {{schema_lit}}, 'record_b' || k, {{schema_lit}});
        EXECUTE format('ALTER TABLE %I.record ATTACH PARTITION %I.%I FOR VALUES IN (%s)',
                       {{schema_lit}}, {{schema_lit}}, 'record_b' || k,
                       (SELECT string_agg(i::text, ', ') FROM generate_series(k * size, k * size + size - 1) i));
    END LOOP;
    FOREACH tid IN ARRAY tids LOOP
        EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES IN (%s)',
                       {{schema_lit}}, 'record_b' || (tid / size), {{schema_lit}}, 'record_' || tid, tid);
    END LOOP;
END $migrate$;

CREATE UNIQUE INDEX record_key ON {{schema}}.record (topic_id, partition, "offset");
