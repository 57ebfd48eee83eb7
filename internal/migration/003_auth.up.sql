-- pgmsg 003: bearer tokens for the HTTP server (`pgmsg serve`).
--
-- A token is a random secret shown once at creation; only its SHA-256 is
-- stored, so a database dump reveals no usable token. Each token has scopes:
--   publish:PATTERN  consume:PATTERN   (topics)
--   enqueue:PATTERN  claim:PATTERN     (queues)
--   admin                              (everything, including admin endpoints)
-- PATTERN is a name in which '*' matches any run of characters ("orders.*",
-- "*"). {{schema}} and {{schema_lit}} are templated as in 001_log.up.sql.

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

-- _check_scopes raises PM004 unless every scope is admin or KIND:PATTERN.
CREATE FUNCTION {{schema}}._check_scopes(p_scopes text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    s text;
BEGIN
    IF p_scopes IS NULL OR cardinality(p_scopes) = 0 THEN
        PERFORM {{schema}}._raise('PM004', 'a token needs at least one scope');
    END IF;
    FOREACH s IN ARRAY p_scopes LOOP
        IF s IS NULL OR NOT (s = 'admin' OR s ~ '^(publish|consume|enqueue|claim):[A-Za-z0-9._*-]{1,200}$') THEN
            PERFORM {{schema}}._raise('PM004', format(
                'invalid scope %s: use admin or publish|consume|enqueue|claim:PATTERN (letters, digits, ".", "_", "-", "*")',
                left(quote_literal(coalesce(s, 'NULL')), 80)));
        END IF;
    END LOOP;
END $$;

-- token_create stores a token given the sha256 of its secret (the secret
-- itself never reaches the database). Fails with PM003 for a bad name, PM004
-- for bad scopes and PMA03 when a live token has the name already.
CREATE FUNCTION {{schema}}.token_create(p_name text, p_token_hash bytea, p_prefix text, p_scopes text[],
                                        p_expires_at timestamptz DEFAULT NULL)
RETURNS {{schema}}.token LANGUAGE plpgsql AS $$
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
    PERFORM pg_advisory_xact_lock(hashtext({{schema_lit}} || '.token.' || p_name));
    IF EXISTS (SELECT 1 FROM {{schema}}.token t WHERE t.name = p_name AND t.revoked_at IS NULL) THEN
        PERFORM {{schema}}._raise('PMA03', format('token %s already exists', quote_literal(p_name)));
    END IF;
    INSERT INTO {{schema}}.token (name, token_hash, prefix, scopes, expires_at)
    VALUES (p_name, p_token_hash, coalesce(p_prefix, ''), p_scopes, p_expires_at)
    RETURNING * INTO tok;
    RETURN tok;
END $$;

-- token_list returns every token, revoked ones too (never the hashes).
CREATE FUNCTION {{schema}}.token_list()
RETURNS TABLE (token_id bigint, name text, prefix text, scopes text[], created_at timestamptz,
               expires_at timestamptz, revoked_at timestamptz, last_used_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT t.token_id, t.name, t.prefix, t.scopes, t.created_at, t.expires_at, t.revoked_at, t.last_used_at
    FROM {{schema}}.token t ORDER BY t.token_id
$$;

-- token_revoke revokes a live token by id; PMA01 if there is none.
CREATE FUNCTION {{schema}}.token_revoke(p_token_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {{schema}}.token SET revoked_at = now() WHERE token_id = p_token_id AND revoked_at IS NULL;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PMA01', format('unknown token %s (or already revoked)', coalesce(p_token_id::text, 'NULL')));
    END IF;
END $$;

-- token_verify returns the live (not revoked, not expired) token with this
-- hash, or no row. It records last use at most once a minute per token, so
-- verifying is a primary-key read and only rarely a write.
CREATE FUNCTION {{schema}}.token_verify(p_token_hash bytea)
RETURNS TABLE (token_id bigint, name text, prefix text, scopes text[], created_at timestamptz,
               expires_at timestamptz, revoked_at timestamptz, last_used_at timestamptz)
LANGUAGE plpgsql AS $$
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
END $$;
