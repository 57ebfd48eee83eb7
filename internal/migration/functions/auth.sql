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
-- hash, or no row. It records last use at most once a minute per token, so
-- verifying is a primary-key read and only rarely a write.
CREATE OR REPLACE FUNCTION {{schema}}.token_verify(p_token_hash bytea)
 RETURNS TABLE(token_id bigint, name text, prefix text, scopes text[], created_at timestamp with time zone, expires_at timestamp with time zone, revoked_at timestamp with time zone, last_used_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    tok {{schema}}.token;
BEGIN
    SELECT * INTO tok FROM {{schema}}.token t
    WHERE t.token_hash = p_token_hash AND t.revoked_at IS NULL
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

-- token_create stores a token given the sha256 of its secret (the secret
-- itself never reaches the database). Fails with PM003 for a bad name, PM004
-- for bad scopes and PMA03 when a live token has the name already.
CREATE OR REPLACE FUNCTION {{schema}}.token_create(p_name text, p_token_hash bytea, p_prefix text, p_scopes text[], p_expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS {{schema}}.token
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    tok {{schema}}.token;
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
    PERFORM pg_advisory_xact_lock(hashtext({{schema_lit}} || '.token.' || p_name));
    IF EXISTS (SELECT 1 FROM {{schema}}.token t WHERE t.name = p_name AND t.revoked_at IS NULL) THEN
        PERFORM {{schema}}._raise('PMA03', format('token %s already exists', quote_literal(p_name)));
    END IF;
    INSERT INTO {{schema}}.token (name, token_hash, prefix, scopes, expires_at)
    VALUES (p_name, p_token_hash, coalesce(p_prefix, ''), p_scopes, p_expires_at)
    RETURNING * INTO tok;
    RETURN tok;
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

-- _roles_grant (re)applies the grants of the schema's roles (003_auth) and
-- returns how many of the roles exist: the tables and functions each role
-- needs, and SELECT on every segment for consumers (_segment_create grants
-- segments created later). The migrator runs it after the functions.
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
        EXECUTE format('GRANT SELECT, INSERT ON %I.log_epoch TO %I', s, s || '_producer');
        EXECUTE format('GRANT INSERT ON %I.record TO %I', s, s || '_producer');
        -- Backpressure reads the groups' cursors; segment creation logs.
        EXECUTE format('GRANT SELECT ON %I.group_cursor, %I.consumer_group TO %I', s, s, s || '_producer');
        EXECUTE format('GRANT INSERT ON %I.maintenance_event TO %I', s, s || '_producer');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.maintenance_event_event_id_seq TO %I', s, s || '_producer');
        -- Idempotent publishes keep each producer's last batch.
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.producer_state TO %I', s, s || '_producer');
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I._segment_lock(integer), %I._segment_create(integer, integer, bigint, bigint), '
                       '%I._segment_ensure(integer, integer, bigint, bigint, bigint), %I._offset_seq_create(integer, integer) TO %I',
                       s, s, s, s, s || '_producer');
        -- COPY publishes take offsets from the partitions' sequences
        -- (_offset_seq_create grants the ones created later).
        FOR rel IN EXECUTE format('SELECT offset_seq::regclass::text FROM %I.topic_partition WHERE offset_seq IS NOT NULL', s) LOOP
            EXECUTE format('GRANT USAGE, UPDATE ON SEQUENCE %s TO %I', rel, s || '_producer');
        END LOOP;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_consumer') THEN
        EXECUTE format('GRANT SELECT ON %I.topic, %I.topic_partition, %I.segment, %I.record TO %I',
                       s, s, s, s, s || '_consumer');
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.consumer_group, %I.group_cursor TO %I', s, s, s || '_consumer');
        -- Starting or resetting a group at a time reads the time index.
        EXECUTE format('GRANT SELECT ON %I.time_index, %I.log_epoch TO %I', s, s, s || '_consumer');
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
        -- Uniqueness windows (enqueue, job_unique_prune); the due ticks of
        -- periodic jobs (periodic_enqueue_due), whose definitions are the
        -- admin's.
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON %I.job_unique TO %I', s, s || '_worker');
        EXECUTE format('GRANT SELECT, UPDATE ON %I.periodic_job TO %I', s, s || '_worker');
        EXECUTE format('GRANT INSERT ON %I.maintenance_event TO %I', s, s || '_worker');
        EXECUTE format('GRANT USAGE ON SEQUENCE %I.maintenance_event_event_id_seq TO %I', s, s || '_worker');
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s || '_admin') THEN
        FOR rel IN
            SELECT c.relname FROM pg_class c WHERE c.relnamespace = s::regnamespace
               AND c.relkind IN ('r', 'p') AND c.relname NOT IN ('pgmsg_migration', 'pgmsg_migration_code')
        LOOP
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON %I.%I TO %I', s, rel, s || '_admin');
        END LOOP;
        EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO %I', s, s || '_admin');
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I._segment_lock(integer), %I._segment_create(integer, integer, bigint, bigint), '
                       '%I._segment_ensure(integer, integer, bigint, bigint, bigint), %I._offset_seq_create(integer, integer), '
                       '%I.topic_create(text, integer, jsonb), '
                       '%I.topic_delete(text), %I.topic_add_partitions(text, integer), %I.topic_configure(text, jsonb), '
                       '%I.retention_run(integer), %I.compact_run(integer), %I.segments_ensure() TO %I',
                       s, s, s, s, s, s, s, s, s, s, s, s || '_admin');
    END IF;
    RETURN n;
END $function$;

REVOKE EXECUTE ON FUNCTION {{schema}}._roles_grant() FROM PUBLIC;
SELECT {{schema}}._roles_grant();
