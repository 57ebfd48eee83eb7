-- pgmsg functions: bearer tokens for the HTTP server and the grants of
-- the schema's roles. Applied last, as described in common.sql: the
-- grants below cover every function and table the other files and the
-- versioned migrations created.

-- token_list returns every token, revoked ones too (never the hashes).
CREATE OR REPLACE FUNCTION {{schema}}.token_list()
 RETURNS TABLE(token_id bigint, name text, prefix text, scopes text[], created_at timestamp with time zone, expires_at timestamp with time zone, revoked_at timestamp with time zone, last_used_at timestamp with time zone)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT t.token_id, t.name, t.prefix, t.scopes, t.created_at, t.expires_at, t.revoked_at, t.last_used_at
    FROM {{schema}}.token t ORDER BY t.token_id
$function$;

-- token_revoke revokes a live token by id; PMA01 if there is none.
CREATE OR REPLACE FUNCTION {{schema}}.token_revoke(p_token_id bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    UPDATE {{schema}}.token SET revoked_at = now() WHERE token_id = p_token_id AND revoked_at IS NULL;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PMA01', format('unknown token %s (or already revoked)', coalesce(p_token_id::text, 'NULL')));
    END IF;
END $function$;

-- token_verify returns the live (not revoked, not expired) token with this
-- hash, or no row, as token_verify_id() does for the token's id.
CREATE OR REPLACE FUNCTION {{schema}}.token_verify(p_token_hash bytea)
 RETURNS TABLE(token_id bigint, name text, prefix text, scopes text[], created_at timestamp with time zone, expires_at timestamp with time zone, revoked_at timestamp with time zone, last_used_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    -- token_verify_id() holds the rule (live, and last_used_at).
    RETURN QUERY SELECT v.token_id, v.name, v.prefix, v.scopes, v.created_at, v.expires_at, v.revoked_at, v.last_used_at
                   FROM {{schema}}.token_verify_id(
                        (SELECT t.token_id FROM {{schema}}.token t WHERE t.token_hash = p_token_hash)) v;
END $function$;

-- token_create stores a token given the sha256 of its secret (the secret
-- itself never reaches the database) and, in p_scram, its SCRAM verifiers
-- for the Kafka listener's SASL/SCRAM, at most one per mechanism, each
-- 'SCRAM-SHA-256$ITERATIONS:SALT$STOREDKEY:SERVERKEY' (base64, RFC 5802's
-- values; PostgreSQL's own form) or the same with SCRAM-SHA-512. Without
-- verifiers the token works everywhere but with SCRAM. Fails with PM003
-- for a bad name, PM004 for bad scopes or verifiers and PMA03 when a live
-- token has the name already, before it writes anything.
CREATE OR REPLACE FUNCTION {{schema}}.token_create(p_name text, p_token_hash bytea, p_prefix text, p_scopes text[], p_expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_scram text[] DEFAULT NULL::text[])
 RETURNS {{schema}}.token
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    tok        {{schema}}.token;
    v          text;
    m          text[];
    mechs      text[] := '{}';
    salts      bytea[] := '{}';
    iters      integer[] := '{}';
    stored     bytea[] := '{}';
    server     bytea[] := '{}';
    d_salt     bytea;
    d_stored   bytea;
    d_server   bytea;
    key_len    integer;
BEGIN
    PERFORM {{schema}}._check_name('token', p_name);
    PERFORM {{schema}}._check_scopes(p_scopes);
    IF p_token_hash IS NULL OR octet_length(p_token_hash) <> 32 THEN
        PERFORM {{schema}}._raise('PM004', 'token hash must be 32 bytes (sha256)');
    END IF;
    IF p_expires_at IS NOT NULL AND p_expires_at <= now() THEN
        PERFORM {{schema}}._raise('PM004', 'token expiry must be in the future');
    END IF;
    IF NOT {{schema}}._time_ok(p_expires_at) THEN
        PERFORM {{schema}}._raise('PM004', 'token expiry must be in the UTC years 0001 to 9999');
    END IF;
    FOREACH v IN ARRAY coalesce(p_scram, '{}') LOOP
        m := regexp_match(v, '^(SCRAM-SHA-256|SCRAM-SHA-512)\$([0-9]{1,9}):([A-Za-z0-9+/=]{1,200})\$([A-Za-z0-9+/=]{1,200}):([A-Za-z0-9+/=]{1,200})$');
        IF m IS NULL THEN
            PERFORM {{schema}}._raise('PM004', 'a SCRAM verifier is SCRAM-SHA-256 or SCRAM-SHA-512, then $ITERATIONS:SALT$STOREDKEY:SERVERKEY in base64');
        END IF;
        BEGIN
            d_salt := decode(m[3], 'base64');
            d_stored := decode(m[4], 'base64');
            d_server := decode(m[5], 'base64');
        EXCEPTION WHEN invalid_parameter_value THEN
            PERFORM {{schema}}._raise('PM004', format('the %s verifier is not valid base64', m[1]));
        END;
        key_len := CASE m[1] WHEN 'SCRAM-SHA-256' THEN 32 ELSE 64 END;
        IF octet_length(d_stored) <> key_len OR octet_length(d_server) <> key_len THEN
            PERFORM {{schema}}._raise('PM004', format('the %s verifier''s keys must be %s bytes', m[1], key_len));
        END IF;
        IF octet_length(d_salt) NOT BETWEEN 16 AND 64 THEN
            PERFORM {{schema}}._raise('PM004', format('the %s verifier''s salt must be 16 to 64 bytes', m[1]));
        END IF;
        IF m[2]::integer NOT BETWEEN 4096 AND 16384 THEN
            PERFORM {{schema}}._raise('PM004', format('the %s verifier''s iterations must be 4096 to 16384', m[1]));
        END IF;
        IF m[1] = ANY (mechs) THEN
            PERFORM {{schema}}._raise('PM004', format('two %s verifiers', m[1]));
        END IF;
        mechs := mechs || m[1];
        salts := salts || d_salt;
        iters := iters || m[2]::integer;
        stored := stored || d_stored;
        server := server || d_server;
    END LOOP;
    PERFORM pg_advisory_xact_lock(hashtext({{schema_lit}} || '.token.' || p_name));
    IF EXISTS (SELECT 1 FROM {{schema}}.token t WHERE t.name = p_name AND t.revoked_at IS NULL) THEN
        PERFORM {{schema}}._raise('PMA03', format('token %s already exists', quote_literal(p_name)));
    END IF;
    INSERT INTO {{schema}}.token (name, token_hash, prefix, scopes, expires_at)
    VALUES (p_name, p_token_hash, coalesce(p_prefix, ''), p_scopes, p_expires_at)
    RETURNING * INTO tok;
    INSERT INTO {{schema}}.token_scram (token_id, mechanism, salt, iterations, stored_key, server_key)
    SELECT tok.token_id, x.mech, x.salt, x.iter, x.stored, x.server
    FROM unnest(mechs, salts, iters, stored, server) AS x(mech, salt, iter, stored, server);
    RETURN tok;
END $function$;

-- token_scram returns the live (not revoked, not expired) token named
-- p_name with its SCRAM verifier of p_mechanism (salt, iterations,
-- stored_key, server_key), NULL when the token has none (created before
-- token_create without verifiers); no row when no live token has the
-- name. For the Kafka listener's SASL/SCRAM, which learns the username
-- before the proof. SECURITY INVOKER on purpose: only a role that may read
-- the token tables (the admin, which `pgmsg serve` runs as) gets the
-- verifiers; any other is refused by the tables' privileges.
CREATE OR REPLACE FUNCTION {{schema}}.token_scram(p_name text, p_mechanism text)
 RETURNS TABLE(token_id bigint, name text, prefix text, scopes text[], created_at timestamp with time zone, expires_at timestamp with time zone, revoked_at timestamp with time zone, last_used_at timestamp with time zone, salt bytea, iterations integer, stored_key bytea, server_key bytea)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT t.token_id, t.name, t.prefix, t.scopes, t.created_at, t.expires_at, t.revoked_at, t.last_used_at,
           s.salt, s.iterations, s.stored_key, s.server_key
    FROM {{schema}}.token t
    LEFT JOIN {{schema}}.token_scram s ON s.token_id = t.token_id AND s.mechanism = p_mechanism
    WHERE t.name = p_name AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
$function$;

-- token_verify_id returns the live (not revoked, not expired) token with
-- the id, or no row. It records last use at most once a minute per token,
-- so verifying is a primary-key read and only rarely a write.
-- token_verify() calls it with the id of a secret's hash; the Kafka
-- listener calls it once a SCRAM proof matched, and to check the token
-- again while the connection lasts (SCRAM leaves it no secret to hash).
CREATE OR REPLACE FUNCTION {{schema}}.token_verify_id(p_token_id bigint)
 RETURNS TABLE(token_id bigint, name text, prefix text, scopes text[], created_at timestamp with time zone, expires_at timestamp with time zone, revoked_at timestamp with time zone, last_used_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    tok {{schema}}.token;
BEGIN
    SELECT * INTO tok FROM {{schema}}.token t
    WHERE t.token_id = p_token_id AND t.revoked_at IS NULL
      AND (t.expires_at IS NULL OR t.expires_at > now());
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF tok.last_used_at IS NULL OR tok.last_used_at < now() - interval '1 minute' THEN
        UPDATE {{schema}}.token t SET last_used_at = now() WHERE t.token_id = tok.token_id;
        tok.last_used_at := now();
    END IF;
    RETURN QUERY SELECT tok.token_id, tok.name, tok.prefix, tok.scopes, tok.created_at,
                        tok.expires_at, tok.revoked_at, tok.last_used_at;
END $function$;

-- _check_scopes raises PM004 unless every scope is admin, read or KIND:PATTERN.
CREATE OR REPLACE FUNCTION {{schema}}._check_scopes(p_scopes text[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    s text;
BEGIN
    IF p_scopes IS NULL OR cardinality(p_scopes) = 0 THEN
        PERFORM {{schema}}._raise('PM004', 'a token needs at least one scope');
    END IF;
    FOREACH s IN ARRAY p_scopes LOOP
        IF s IS NULL OR NOT (s = 'admin' OR s = 'read'
                             OR s ~ '^(publish|consume|enqueue|claim):[A-Za-z0-9._*-]{1,200}$'
                             OR s ~ '^consume:[A-Za-z0-9._*-]{1,200}/group:[A-Za-z0-9._*-]{1,200}$') THEN
            PERFORM {{schema}}._raise('PM004', format(
                'invalid scope %s: use admin, read, publish|consume|enqueue|claim:PATTERN or consume:PATTERN/group:PATTERN (letters, digits, ".", "_", "-", "*")',
                left(quote_literal(coalesce(s, 'NULL')), 80)));
        END IF;
    END LOOP;
END $function$;

-- role_privileges is the one table of what each of the schema's roles
-- (003_auth.up.sql) may do: _roles_grant() grants exactly these rows and nothing
-- else, docs/operations.md ("Database roles") lists them, and
-- TestRolesGrantsMatchTable compares the database's grants with them.
--   kind      schema | table | sequence | function | segments
--   object    a table, sequence or function (with its argument types) of
--             the schema; "segments" means every segment table
--   privilege what GRANT takes: "SELECT, INSERT", "UPDATE (a, b)", ...
-- Principles (docs/operations.md): the log's tables (topic,
-- topic_partition, segment, record and its segments) are written by the
-- owner only, through SECURITY DEFINER functions that check what they
-- write (publishing included), so no owner-run code reads a value another
-- role wrote there; maintenance_event is written by owner-run code only;
-- a worker updates only the schedule state of periodic jobs; every role
-- reads pgmsg_migration (the version check at start-up).
CREATE OR REPLACE FUNCTION {{schema}}.role_privileges()
 RETURNS TABLE(role text, kind text, object text, privilege text)
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    VALUES
    -- producer: publish, through publish(), publish_idempotent() and the
    -- Go client's _publish_direct(); read topic metadata.
    ('producer', 'schema',   '',                     'USAGE'),
    ('producer', 'table',    'pgmsg_migration',      'SELECT'),
    ('producer', 'table',    'pgmsg_migration_code', 'SELECT'),
    ('producer', 'table',    'topic',                'SELECT'),
    ('producer', 'table',    'topic_partition',      'SELECT'),
    ('producer', 'table',    'segment',              'SELECT'),
    ('producer', 'function', 'publish(text, bytea[], bytea[], jsonb[], timestamp with time zone[], integer, boolean)', 'EXECUTE'),
    ('producer', 'function', 'publish_idempotent(text, text, bigint, bytea[], bytea[], jsonb[], timestamp with time zone[], integer, boolean)', 'EXECUTE'),
    ('producer', 'function', '_publish_direct(text, integer, bytea[], bytea[], jsonb[], timestamp with time zone[])', 'EXECUTE'),
    ('producer', 'function', 'segment_ensure(text, integer)', 'EXECUTE'),
    ('producer', 'function', '_segments_ahead(text, integer[])', 'EXECUTE'),
    -- consumer: read topics and every segment; run groups (claim,
    -- commit, membership, resets).
    ('consumer', 'schema',   '',                     'USAGE'),
    ('consumer', 'table',    'pgmsg_migration',      'SELECT'),
    ('consumer', 'table',    'pgmsg_migration_code', 'SELECT'),
    ('consumer', 'table',    'topic',                'SELECT'),
    ('consumer', 'table',    'topic_partition',      'SELECT'),
    ('consumer', 'table',    'segment',              'SELECT'),
    ('consumer', 'table',    'record',               'SELECT'),
    ('consumer', 'segments', '',                     'SELECT'),
    ('consumer', 'table',    'time_index',           'SELECT'),
    ('consumer', 'table',    'log_epoch',            'SELECT'),
    ('consumer', 'table',    'consumer_group',       'SELECT, INSERT, UPDATE'),
    ('consumer', 'table',    'group_cursor',         'SELECT, INSERT, UPDATE'),
    ('consumer', 'table',    'group_member',         'SELECT, INSERT, UPDATE, DELETE'),
    -- worker: enqueue (creating queues, uniqueness windows, sequences,
    -- workflows, batches), claim and finish jobs (moving sequences on,
    -- releasing and cancelling dependents, counting batches off and
    -- enqueueing their callbacks); enqueue the due ticks of periodic jobs, whose
    -- definitions are the admin's.
    ('worker',   'schema',   '',                     'USAGE'),
    ('worker',   'table',    'pgmsg_migration',      'SELECT'),
    ('worker',   'table',    'pgmsg_migration_code', 'SELECT'),
    -- UPDATE of the token bucket's columns: the claims of a queue with a
    -- rate_limit or max_running lock its row (FOR UPDATE needs an UPDATE
    -- privilege) and spend its tokens.
    -- UPDATE of fair: the first job naming a tenant makes its queue fair.
    ('worker',   'table',    'queue',                'SELECT, INSERT, UPDATE (rate_tokens, rate_at, fair)'),
    ('worker',   'sequence', 'queue_queue_id_seq',   'USAGE'),
    ('worker',   'sequence', 'job_id_seq',           'USAGE'),
    ('worker',   'table',    'job',                  'SELECT, INSERT, UPDATE, DELETE'),
    ('worker',   'table',    'job_archive',          'SELECT, INSERT'),
    ('worker',   'table',    'job_payload',          'SELECT, INSERT, DELETE'),
    ('worker',   'table',    'job_unique',           'SELECT, INSERT, DELETE'),
    ('worker',   'table',    'job_dependency',       'SELECT, INSERT, DELETE'),
    ('worker',   'table',    'job_log',              'SELECT, INSERT, DELETE'),
    ('worker',   'table',    'job_step',             'SELECT, INSERT, UPDATE, DELETE'),
    ('worker',   'table',    'job_sequence',         'SELECT, INSERT, UPDATE, DELETE'),
    -- Tenants' finish tags (enqueues); their weights are the admin's.
    ('worker',   'table',    'job_tenant',           'SELECT, INSERT (queue_id, tenant, finish, enqueued), UPDATE (finish, enqueued)'),
    ('worker',   'table',    'job_batch',            'SELECT, INSERT, UPDATE'),
    ('worker',   'table',    'job_batch_slot',       'SELECT, INSERT, UPDATE'),
    ('worker',   'table',    'periodic_job',         'SELECT, UPDATE (next_run_at, last_run_at, last_job_id, last_error)'),
    -- admin: everything above, tokens, queue and periodic definitions,
    -- topic DDL and maintenance (SECURITY DEFINER); reads the log's
    -- tables, which only the owner writes.
    ('admin',    'schema',   '',                     'USAGE'),
    ('admin',    'table',    'pgmsg_migration',      'SELECT'),
    ('admin',    'table',    'pgmsg_migration_code', 'SELECT'),
    ('admin',    'table',    'topic',                'SELECT'),
    ('admin',    'table',    'topic_partition',      'SELECT'),
    ('admin',    'table',    'segment',              'SELECT'),
    ('admin',    'table',    'record',               'SELECT'),
    ('admin',    'segments', '',                     'SELECT'),
    ('admin',    'table',    'time_index',           'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'log_epoch',            'SELECT'),
    -- min_insync_replicas (common.sql): the admin reads it, the owner sets it.
    ('admin',    'table',    'db_setting',           'SELECT'),
    ('admin',    'table',    'producer_state',       'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'consumer_group',       'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'group_cursor',         'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'group_member',         'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'maintenance_event',    'SELECT, DELETE'),
    ('admin',    'table',    'queue',                'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'job',                  'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'job_archive',          'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'job_payload',          'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'job_unique',           'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'job_sequence',         'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'job_dependency',       'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'job_tenant',           'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'job_log',              'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'job_step',             'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'job_batch',            'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'job_batch_slot',       'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'periodic_job',         'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'token',                'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    ('admin',    'table',    'token_scram',          'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'),
    -- The Kafka listener's state (pgmsg serve --kafka-listen runs as the admin).
    ('admin',    'table',    'kafka_broker',         'SELECT, INSERT, UPDATE, DELETE'),
    ('admin',    'table',    'kafka_group',          'SELECT, INSERT, UPDATE, DELETE'),
    ('admin',    'table',    'kafka_group_member',   'SELECT, INSERT, UPDATE, DELETE'),
    ('admin',    'table',    'kafka_offset',         'SELECT, INSERT, UPDATE, DELETE'),
    ('admin',    'sequence', 'queue_queue_id_seq',   'USAGE, SELECT, UPDATE'),
    ('admin',    'sequence', 'job_id_seq',           'USAGE, SELECT, UPDATE'),
    ('admin',    'sequence', 'token_token_id_seq',   'USAGE, SELECT, UPDATE'),
    ('admin',    'sequence', 'kafka_producer_id',    'USAGE, SELECT, UPDATE'),
    ('admin',    'function', 'publish(text, bytea[], bytea[], jsonb[], timestamp with time zone[], integer, boolean)', 'EXECUTE'),
    ('admin',    'function', 'publish_idempotent(text, text, bigint, bytea[], bytea[], jsonb[], timestamp with time zone[], integer, boolean)', 'EXECUTE'),
    ('admin',    'function', '_publish_direct(text, integer, bytea[], bytea[], jsonb[], timestamp with time zone[])', 'EXECUTE'),
    ('admin',    'function', 'segment_ensure(text, integer)', 'EXECUTE'),
    ('admin',    'function', '_segments_ahead(text, integer[])', 'EXECUTE'),
    ('admin',    'function', 'segments_ensure()',    'EXECUTE'),
    ('admin',    'function', 'topic_create(text, integer, jsonb)', 'EXECUTE'),
    ('admin',    'function', 'topic_delete(text)',   'EXECUTE'),
    ('admin',    'function', 'topic_delete(text, boolean)', 'EXECUTE'),
    ('admin',    'function', 'topic_add_partitions(text, integer)', 'EXECUTE'),
    ('admin',    'function', 'topic_configure(text, jsonb)', 'EXECUTE'),
    ('admin',    'function', 'retention_run(integer)', 'EXECUTE'),
    ('admin',    'function', 'compact_run(integer)', 'EXECUTE'),
    ('admin',    'function', '_group_expire(interval, integer)', 'EXECUTE'),
    ('admin',    'function', 'min_insync_replicas()', 'EXECUTE')
$function$;

-- _roles_grant (re)applies the grants of the schema's roles (003_auth.up.sql):
-- it revokes every privilege the roles hold in the schema, then grants
-- the rows of role_privileges(), and returns how many of the roles exist.
-- Segments created later get theirs from _segment_create. The migrator
-- runs it after the functions.
CREATE OR REPLACE FUNCTION {{schema}}._roles_grant()
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    s       text := {{schema_lit}};
    r       text;
    g       record;
    rel     text;
    n       integer := 0;
BEGIN
    FOREACH r IN ARRAY ARRAY['producer', 'consumer', 'worker', 'admin'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_' || r);
        n := n + 1;
        EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM %I', s, s || '_' || r);
        EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA %I FROM %I', s, s || '_' || r);
        EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM %I', s, s || '_' || r);
        FOR g IN SELECT * FROM {{schema}}.role_privileges() p WHERE p.role = r LOOP
            CASE g.kind
            WHEN 'schema' THEN
                EXECUTE format('GRANT %s ON SCHEMA %I TO %I', g.privilege, s, s || '_' || r);
            WHEN 'table' THEN
                -- pgmsg_migration is the migrator's (absent from a bare script run).
                CONTINUE WHEN to_regclass(format('%I.%I', s, g.object)) IS NULL;
                EXECUTE format('GRANT %s ON TABLE %I.%I TO %I', g.privilege, s, g.object, s || '_' || r);
            WHEN 'sequence' THEN
                EXECUTE format('GRANT %s ON SEQUENCE %I.%I TO %I', g.privilege, s, g.object, s || '_' || r);
            WHEN 'function' THEN
                EXECUTE format('GRANT %s ON FUNCTION %I.%s TO %I', g.privilege, s, g.object, s || '_' || r);
            WHEN 'segments' THEN
                -- Named from the catalog: the leaves of the record table
                -- (under its blocks and the topics' tables).
                FOR rel IN SELECT c.relname FROM pg_partition_tree(format('%I.record', s)::regclass) pt
                             JOIN pg_class c ON c.oid = pt.relid
                            WHERE pt.isleaf LOOP
                    EXECUTE format('GRANT %s ON TABLE %I.%I TO %I', g.privilege, s, rel, s || '_' || r);
                END LOOP;
            END CASE;
        END LOOP;
    END LOOP;
    RETURN n;
END $function$;

REVOKE EXECUTE ON FUNCTION {{schema}}._roles_grant() FROM PUBLIC;
DO $grant$ BEGIN PERFORM {{schema}}._roles_grant(); END $grant$;
