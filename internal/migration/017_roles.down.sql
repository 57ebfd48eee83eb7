-- Reverts 017: topic DDL and maintenance run with the caller's rights and
-- are executable by PUBLIC again; the schema's roles lose their grants and
-- are dropped (a role that still holds privileges elsewhere, or that other
-- roles were granted, is kept, with a NOTICE).

ALTER FUNCTION {{schema}}.topic_create(text, integer, jsonb) SECURITY INVOKER;
ALTER FUNCTION {{schema}}.topic_delete(text) SECURITY INVOKER;
ALTER FUNCTION {{schema}}.topic_add_partitions(text, integer) SECURITY INVOKER;
ALTER FUNCTION {{schema}}.topic_configure(text, jsonb) SECURITY INVOKER;
ALTER FUNCTION {{schema}}.retention_run(integer) SECURITY INVOKER;
ALTER FUNCTION {{schema}}.compact_run(integer) SECURITY INVOKER;
ALTER FUNCTION {{schema}}.segments_ensure() SECURITY INVOKER;
GRANT EXECUTE ON FUNCTION {{schema}}.topic_create(text, integer, jsonb), {{schema}}.topic_delete(text),
    {{schema}}.topic_add_partitions(text, integer), {{schema}}.topic_configure(text, jsonb),
    {{schema}}.retention_run(integer), {{schema}}.compact_run(integer), {{schema}}.segments_ensure() TO PUBLIC;

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

DROP FUNCTION {{schema}}._roles_grant();
