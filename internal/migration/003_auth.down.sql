-- pgmsg 003 down: removes tokens and the schema's roles. The roles lose
-- their grants and are dropped; a role that still holds privileges
-- elsewhere, or that other roles were granted, is kept, with a NOTICE.
DO $$
DECLARE
    r    text;
    name text;
BEGIN
    FOREACH r IN ARRAY ARRAY['producer', 'consumer', 'worker', 'admin'] LOOP
        name := {{schema_lit}} || '_' || r;
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = name);
        BEGIN
            EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM %I', {{schema_lit}}, name);
            EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA %I FROM %I', {{schema_lit}}, name);
            EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM %I', {{schema_lit}}, name);
            EXECUTE format('REVOKE ALL ON SCHEMA %I FROM %I', {{schema_lit}}, name);
            EXECUTE format('DROP ROLE %I', name);
        EXCEPTION WHEN dependent_objects_still_exist OR insufficient_privilege THEN
            RAISE NOTICE 'pgmsg: role % kept: %', name, SQLERRM;
        END;
    END LOOP;
END $$;

DROP TABLE IF EXISTS {{schema}}.token;
