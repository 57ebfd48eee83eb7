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

-- ---------------------------------------------------------------------------
-- min_insync_replicas: Kafka's min.insync.replicas with acks=all, for the
-- whole schema. At 2, a write a client is told is stored is refused (PM124
-- not_enough_replicas, nothing written) when PostgreSQL would commit it
-- without waiting for a synchronous standby: synchronous_commit is not on,
-- remote_write or remote_apply, or synchronous_standby_names is empty (what
-- pg_auto_failover's wait_primary and Patroni's synchronous_mode set when
-- the standby is gone). At 1 (the default) nothing is checked.
--
-- The check is a statement trigger (FOR EACH STATEMENT: one call per
-- statement, not per row), created only at 2, on the writes whose loss a
-- client would see:
--   record          INSERT: publishes (INSERT and COPY into the record
--                   table; a statement trigger of a partitioned table
--                   fires for both when they name it).
--   producer_state  INSERT, UPDATE: an idempotent producer's last batch
--                   (lost, a retried batch is stored twice).
--   job             INSERT: enqueues (lost, the job never runs); DELETE:
--                   completion, cancel, discard (lost, a completed job
--                   runs again, a cancelled one runs). Not UPDATE: claims
--                   commit without waiting for the WAL on purpose
--                   (p_async), and a lost claim, retry or snooze leaves a
--                   job that runs again, which at-least-once allows.
--   kafka_offset    INSERT, UPDATE: the Kafka listener's offset commits.
-- A group's offset commit through commit() calls _insync_assert itself:
-- claims write the same cursor rows, on purpose asynchronously (a lost
-- claim is a redelivery), so a trigger on group_cursor would refuse them.
-- docs/operations.md ("Refusing writes without a synchronous standby")
-- and docs/reliability.md say what the guard gives and its window.
-- ---------------------------------------------------------------------------

-- _insync_ok: would this session's commit wait for a synchronous standby?
-- (SyncRepRequested: max_wal_senders > 0 and synchronous_commit above
-- local.) The window: a backend applies a configuration reload before
-- each protocol message, so a reload between a statement's Execute and
-- its Sync (the commit) is not seen here; a commit waits only while the
-- checkpointer's shared flag says standbys are named, and clearing
-- synchronous_standby_names releases the commits already waiting
-- (syncrep.c). docs/operations.md says what that leaves.
CREATE OR REPLACE FUNCTION {{schema}}._insync_ok()
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT current_setting('synchronous_commit') IN ('on', 'remote_write', 'remote_apply')
       AND current_setting('synchronous_standby_names') <> ''
       AND current_setting('max_wal_senders')::integer > 0
$function$;

-- _insync_refuse raises PM124 for a write to p_what.
CREATE OR REPLACE FUNCTION {{schema}}._insync_refuse(p_what text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'PM124',
        MESSAGE = format('not enough replicas: min_insync_replicas is 2 and this %s would commit without a synchronous standby '
                         '(synchronous_commit = %s, synchronous_standby_names = %s); nothing was written',
                         p_what, current_setting('synchronous_commit'),
                         quote_literal(current_setting('synchronous_standby_names'))),
        HINT = 'Retry once a synchronous standby is configured (synchronous_standby_names naming it, synchronous_commit '
               'on, remote_write or remote_apply), or turn the guard off with min_insync_replicas_set(1).';
END $function$;

-- _insync_check is the guard's trigger function (statement level).
CREATE OR REPLACE FUNCTION {{schema}}._insync_check()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT {{schema}}._insync_ok() THEN
        PERFORM {{schema}}._insync_refuse(lower(TG_OP) || ' on ' || TG_TABLE_NAME);
    END IF;
    RETURN NULL;
END $function$;

-- _insync_assert is the guard of writes no trigger covers (commit()): it
-- looks for the guard (its record trigger, in the catalog every role
-- reads) only when the session's commit would not wait for a standby, so
-- a commit with a standby pays two current_setting calls.
CREATE OR REPLACE FUNCTION {{schema}}._insync_assert(p_what text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT {{schema}}._insync_ok()
       AND EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = format('%I.record', {{schema_lit}})::regclass
                   AND t.tgname = 'insync_record') THEN
        PERFORM {{schema}}._insync_refuse(p_what);
    END IF;
END $function$;

-- _insync_apply creates the guard's triggers if the setting is 2 and drops
-- them otherwise. Run by min_insync_replicas_set and when the function
-- files are applied.
CREATE OR REPLACE FUNCTION {{schema}}._insync_apply()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF (SELECT s.min_insync_replicas FROM {{schema}}.db_setting s) = 2 THEN
        CREATE OR REPLACE TRIGGER insync_record AFTER INSERT ON {{schema}}.record
            FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}._insync_check();
        CREATE OR REPLACE TRIGGER insync_producer_state AFTER INSERT OR UPDATE ON {{schema}}.producer_state
            FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}._insync_check();
        CREATE OR REPLACE TRIGGER insync_job AFTER INSERT OR DELETE ON {{schema}}.job
            FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}._insync_check();
        CREATE OR REPLACE TRIGGER insync_kafka_offset AFTER INSERT OR UPDATE ON {{schema}}.kafka_offset
            FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}._insync_check();
    ELSE
        DROP TRIGGER IF EXISTS insync_record ON {{schema}}.record;
        DROP TRIGGER IF EXISTS insync_producer_state ON {{schema}}.producer_state;
        DROP TRIGGER IF EXISTS insync_job ON {{schema}}.job;
        DROP TRIGGER IF EXISTS insync_kafka_offset ON {{schema}}.kafka_offset;
    END IF;
END $function$;

-- min_insync_replicas returns the guard's setting: 1 (no guard) or 2.
CREATE OR REPLACE FUNCTION {{schema}}.min_insync_replicas()
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT s.min_insync_replicas FROM {{schema}}.db_setting s
$function$;

-- min_insync_replicas_set sets the guard: 1 no guard, 2 writes need a
-- synchronous standby (PM004 otherwise). Creating or dropping the triggers
-- takes a SHARE ROW EXCLUSIVE lock on the guarded tables until the
-- transaction ends: it waits for the writes in flight. Returns p_n.
CREATE OR REPLACE FUNCTION {{schema}}.min_insync_replicas_set(p_n integer)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_n IS NULL OR p_n NOT IN (1, 2) THEN
        PERFORM {{schema}}._raise('PM004', format(
            'min_insync_replicas must be 1 (no guard) or 2 (writes need a synchronous standby), got %s',
            coalesce(p_n::text, 'NULL')));
    END IF;
    UPDATE {{schema}}.db_setting SET min_insync_replicas = p_n;
    PERFORM {{schema}}._insync_apply();
    RETURN p_n;
END $function$;

-- The schema's owner sets the guard; the admin role may read it
-- (role_privileges, auth.sql). The
-- checks (_insync_ok, _insync_refuse, _insync_assert) run as whoever
-- writes.
REVOKE EXECUTE ON FUNCTION {{schema}}._insync_check(),
    {{schema}}._insync_apply(), {{schema}}.min_insync_replicas(),
    {{schema}}.min_insync_replicas_set(integer) FROM PUBLIC;
DO $insync$ BEGIN PERFORM {{schema}}._insync_apply(); END $insync$;
