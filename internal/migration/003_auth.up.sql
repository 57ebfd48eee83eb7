-- pgmsg 003: bearer tokens for the HTTP server (`pgmsg serve`).
--
-- A token is a random secret shown once at creation; only its SHA-256 is
-- stored, so a database dump reveals no usable token. Each token has scopes:
--   publish:PATTERN  consume:PATTERN   (topics)
--   enqueue:PATTERN  claim:PATTERN     (queues)
--   admin                              (everything, including admin endpoints)
-- PATTERN is a name in which '*' matches any run of characters ("orders.*",
-- "*"). {{schema}} and {{schema_lit}} are templated as in 001_log.up.sql;
-- its functions are in internal/migration/functions.

CREATE TABLE {{schema}}.token (
    token_id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text        NOT NULL,
    -- sha256 of the whole secret ("pgm_..."): the lookup key of every request.
    token_hash   bytea       NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
    -- The first characters of the secret, to recognise a token in listings.
    prefix       text        NOT NULL,
    scopes       text[]      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz,
    CONSTRAINT token_name_valid CHECK (name ~ '^[A-Za-z0-9._-]{1,200}$')
);

-- A name identifies one live token; a revoked token's name may be reused.
CREATE UNIQUE INDEX token_name_live ON {{schema}}.token (name) WHERE revoked_at IS NULL;

-- Least-privilege roles: four group roles (NOLOGIN) named after the
-- schema, each granted the table privileges its job needs and no more:
--
--   <schema>_producer  publish to topics (and read topic metadata)
--   <schema>_consumer  read topics, run consumer groups (claim, commit,
--                      membership), no writes to the log
--   <schema>_worker    enqueue, claim and finish jobs; nothing of the log
--   <schema>_admin     everything, tokens included
--
-- Grant them to login roles: GRANT pgmsg_producer TO my_app. Only admin
-- may read or write the token table; nobody but the schema's owner may
-- touch pgmsg_migration. Functions are SECURITY INVOKER (they run with
-- these privileges) except topic DDL and maintenance, so the Go client's
-- prepared statements on the hot paths need nothing more than the
-- functions do.
--
-- Roles are cluster-wide and need CREATEROLE: when the migrating role
-- cannot create them, nothing is created and a NOTICE says so; the grants
-- can be given by hand (docs/operations.md). _roles_grant()
-- (functions/auth.sql) applies the grants whenever the migrator applies
-- the functions; segments created later get theirs from _segment_create.
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
END $$;
