-- 017: least-privilege roles (issue 14, finding 6).
--
-- Before 017 an application role needed DML on every table of the schema,
-- the token table included, because pgmsg's functions run with the
-- caller's rights. 017 creates four group roles (NOLOGIN) named after the
-- schema and grants each the table privileges its job needs and no more:
--
--   <schema>_producer  publish to topics (and read topic metadata)
--   <schema>_consumer  read topics, run consumer groups (claim, commit,
--                      membership), no writes to the log
--   <schema>_worker    enqueue, claim and finish jobs; nothing of the log
--   <schema>_admin     everything, tokens included
--
-- Grant them to login roles: GRANT pgmsg_producer TO my_app. Only admin
-- may read or write the token table; nobody but the schema's owner may
-- touch pgmsg_migration. Functions stay SECURITY INVOKER (they run with
-- these privileges), so the Go client's prepared statements on the hot
-- paths need nothing more than the functions do.
--
-- Roles are cluster-wide and need CREATEROLE: when the migrating role
-- cannot create them, 017 creates nothing and says so (NOTICE); the
-- grants below can be given by hand (docs/operations.md).
-- _roles_grant() (re)applies the grants, for segments and roles created
-- later.

CREATE FUNCTION {{schema}}._roles_grant() RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
END $$;

-- Topic DDL and maintenance create, attach and drop tables, which only the
-- owner of the record table may do: they run as the schema's owner
-- (SECURITY DEFINER, arguments checked as before, path pinned), callable
-- by the admin role, not by PUBLIC.
ALTER FUNCTION {{schema}}.topic_create(text, integer, jsonb) SECURITY DEFINER;
ALTER FUNCTION {{schema}}.topic_delete(text) SECURITY DEFINER;
ALTER FUNCTION {{schema}}.topic_add_partitions(text, integer) SECURITY DEFINER;
ALTER FUNCTION {{schema}}.topic_configure(text, jsonb) SECURITY DEFINER;
ALTER FUNCTION {{schema}}.retention_run(integer) SECURITY DEFINER;
ALTER FUNCTION {{schema}}.compact_run(integer) SECURITY DEFINER;
ALTER FUNCTION {{schema}}.segments_ensure() SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION {{schema}}.topic_create(text, integer, jsonb), {{schema}}.topic_delete(text),
    {{schema}}.topic_add_partitions(text, integer), {{schema}}.topic_configure(text, jsonb),
    {{schema}}.retention_run(integer), {{schema}}.compact_run(integer), {{schema}}.segments_ensure(),
    {{schema}}._roles_grant() FROM PUBLIC;

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['producer', 'consumer', 'worker', 'admin'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = {{schema_lit}} || '_' || r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', {{schema_lit}} || '_' || r);
            EXCEPTION WHEN insufficient_privilege THEN
                RAISE NOTICE 'pgmsg: role % not created (the migrating role lacks CREATEROLE); see docs/operations.md',
                    {{schema_lit}} || '_' || r;
            END;
        END IF;
    END LOOP;
    PERFORM {{schema}}._roles_grant();
END $$;
