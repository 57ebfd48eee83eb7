-- pgmsg functions: helpers the log, the queue and the tokens share.
--
-- Every file in this directory holds functions only (and their grants), each
-- written once: the migrator applies all of them, in the order
-- internal/migration lists, after the versioned migrations, whenever one
-- of them changed since it last ran (their checksums are kept in
-- pgmsg_migration_code). So a change to a function is a diff of the lines
-- that changed. CREATE OR REPLACE keeps a function's grants; a function
-- whose arguments or result type change, or that goes away, is dropped by a
-- versioned migration first.
--
-- Every function says SET search_path = pg_catalog, pg_temp and names
-- pgmsg's objects {{schema}}-qualified (TestFunctionsPinSearchPath).

-- ---------------------------------------------------------------------------
-- Errors. Every error pgmsg raises has SQLSTATE class PM; the Go library maps
-- each code to a sentinel (errors.go) and docs/sql-api.md lists them.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION {{schema}}._raise(p_code text, p_message text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message;
END $function$;

-- _raise_backpressure raises a "not now" error (PM014 backpressure, PM109
-- queue full) whose DETAIL tells the client how long to keep retrying:
-- "backpressure_timeout_ms=N", the topic's or queue's setting. Clients in
-- any language read the wait from the error instead of from the settings.
CREATE OR REPLACE FUNCTION {{schema}}._raise_backpressure(p_code text, p_message text, p_wait_ms bigint)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message,
        DETAIL = 'backpressure_timeout_ms=' || p_wait_ms;
END $function$;

CREATE OR REPLACE FUNCTION {{schema}}._check_name(p_kind text, p_name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    -- valid_name's test, written out: a plpgsql expression keeps its plan
    -- for the session, where a call of valid_name (a SQL function with a
    -- pinned search_path, so never inlined) planned its body again in
    -- every statement: 0.17 ms of server CPU per check.
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9._-]{1,200}$' THEN
        PERFORM {{schema}}._raise('PM003', format(
            'invalid %s name %s: use 1-200 letters, digits, ".", "_" or "-"',
            p_kind, left(quote_literal(coalesce(p_name, '')), 60)));
    END IF;
END $function$;

-- _time_ok: NULL or within the UTC years 0001..9999.
CREATE OR REPLACE FUNCTION {{schema}}._time_ok(p_ts timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT p_ts IS NULL OR (p_ts >= '0001-01-01 00:00:00+00'::timestamptz
                            AND p_ts < '10000-01-01 00:00:00+00'::timestamptz)
$function$;
