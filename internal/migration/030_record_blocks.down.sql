-- pgmsg 030 down: each topic's table is a partition of the record table
-- again and the blocks are dropped. Nothing is copied; the attach reads
-- the stored records once, as the up step's did.
DROP INDEX {{schema}}.record_key;

DO $migrate$
DECLARE
    tid    integer;
    block  text;
    tids   integer[];
    blocks text[];
BEGIN
    SELECT coalesce(array_agg(substr(c.relname, 8)::integer ORDER BY substr(c.relname, 8)::integer), '{}'),
           coalesce(array_agg(b.relname::text ORDER BY substr(c.relname, 8)::integer), '{}')
      INTO tids, blocks
      FROM pg_inherits bi JOIN pg_class b ON b.oid = bi.inhrelid
      JOIN pg_inherits i ON i.inhparent = b.oid
      JOIN pg_class c ON c.oid = i.inhrelid
     WHERE bi.inhparent = format('%I.record', {{schema_lit}})::regclass
       AND b.relname ~ '^record_b[0-9]+$' AND c.relname ~ '^record_[0-9]+$';
    FOR i IN 1 .. cardinality(tids) LOOP
        tid := tids[i];
        block := blocks[i];
        EXECUTE format('ALTER TABLE %I.%I DETACH PARTITION %I.%I',
                       {{schema_lit}}, block, {{schema_lit}}, 'record_' || tid);
    END LOOP;
    FOR block IN SELECT b.relname FROM pg_inherits bi JOIN pg_class b ON b.oid = bi.inhrelid
                  WHERE bi.inhparent = format('%I.record', {{schema_lit}})::regclass
                    AND b.relname ~ '^record_b[0-9]+$' LOOP
        EXECUTE format('DROP TABLE %I.%I', {{schema_lit}}, block);
    END LOOP;
    FOREACH tid IN ARRAY tids LOOP
        EXECUTE format('ALTER TABLE %I.record ATTACH PARTITION %I.%I FOR VALUES IN (%s)',
                       {{schema_lit}}, {{schema_lit}}, 'record_' || tid, tid);
    END LOOP;
END $migrate$;

ALTER TABLE {{schema}}.record ADD CONSTRAINT record_pkey PRIMARY KEY (topic_id, partition, "offset");
