-- Reverts 023.
DROP FUNCTION IF EXISTS {{schema}}.publish_idempotent(text, text, bigint, bytea[], bytea[], jsonb[], timestamptz[], integer, boolean);
DROP FUNCTION IF EXISTS {{schema}}.producer_state_expire(interval, integer);
DROP TABLE IF EXISTS {{schema}}.producer_state;

-- _roles_grant: back to 020's.
CREATE OR REPLACE FUNCTION {{schema}}._roles_grant()
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    s       text := {{schema_lit}};
    r       text;
    rel     text;
    n       integer := 0;
BEGIN
    FOREACH r IN ARRAY ARRAY['producer', 'consumer', 'worker', 'admin'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_' || r);
        n := n + 1;
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', s, s || '_' || r);
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_producer') THEN
        EXECUTE format('GRANT SELECT ON %I.topic, %I.segment TO %I', s, s, s || '_producer');
        EXECUTE format('GRANT SELECT, UPDATE ON %I.topic_partition TO %I', s, s || '_producer');
        EXECUTE format('GRANT INSERT ON %I.record TO %I', s, s || '_producer');
        -- Backpressure reads the groups' cursors; segment creation logs.
        EXECUTE format('GRANT SELECT ON %I.group_cursor, %I.consumer_group TO %I', s, s, s || '_producer');
        EXECUTE format('GRANT INSERT ON %I.maintenance_event TO %I', s, s || '_producer');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.maintenance_event_event_id_seq TO %I', s, s || '_producer');
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I._segment_lock(integer), %I._segment_create(integer, integer, bigint, bigint), '
                       '%I._segment_ensure(integer, integer, bigint, bigint, bigint) TO %I', s, s, s, s || '_producer');
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_consumer') THEN
        EXECUTE format('GRANT SELECT ON %I.topic, %I.topic_partition, %I.segment, %I.record TO %I',
                       s, s, s, s, s || '_consumer');
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.consumer_group, %I.group_cursor TO %I', s, s, s || '_consumer');
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.group_member TO %I', s, s || '_consumer');
        EXECUTE format('GRANT INSERT ON %I.maintenance_event TO %I', s, s || '_consumer');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.maintenance_event_event_id_seq TO %I', s, s || '_consumer');
        -- Consumers read a claimed range straight from its segment table;
        -- _segment_create grants new segments to whoever may read record.
        FOR rel IN SELECT g.relname FROM {{schema}}.segment g LOOP
            EXECUTE format('GRANT SELECT ON %I.%I TO %I', s, rel, s || '_consumer');
        END LOOP;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_worker') THEN
        EXECUTE format('GRANT SELECT, INSERT ON %I.queue TO %I', s, s || '_worker');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.queue_queue_id_seq, %I.job_id_seq TO %I', s, s, s || '_worker');
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.job TO %I', s, s || '_worker');
        EXECUTE format('GRANT SELECT, INSERT ON %I.job_archive TO %I', s, s || '_worker');
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON %I.job_payload TO %I', s, s || '_worker');
        EXECUTE format('GRANT INSERT ON %I.maintenance_event TO %I', s, s || '_worker');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.maintenance_event_event_id_seq TO %I', s, s || '_worker');
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_admin') THEN
        FOR rel IN
            SELECT c.relname FROM pg_class c WHERE c.relnamespace = s::regnamespace
               AND c.relkind IN ('r', 'p') AND c.relname <> 'pgmsg_migration'
        LOOP
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON %I.%I TO %I', s, rel, s || '_admin');
        END LOOP;
        EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO %I', s, s || '_admin');
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I._segment_lock(integer), %I._segment_create(integer, integer, bigint, bigint), '
                       '%I._segment_ensure(integer, integer, bigint, bigint, bigint), %I.topic_create(text, integer, jsonb), '
                       '%I.topic_delete(text), %I.topic_add_partitions(text, integer), %I.topic_configure(text, jsonb), '
                       '%I.retention_run(integer), %I.compact_run(integer), %I.segments_ensure() TO %I',
                       s, s, s, s, s, s, s, s, s, s, s || '_admin');
    END IF;
    RETURN n;
END $function$;
