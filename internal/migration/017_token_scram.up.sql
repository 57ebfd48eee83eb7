-- pgmsg 017: SCRAM verifiers of tokens, for the Kafka listener's
-- SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (docs/kafka.md, "Security").
--
-- SCRAM never sends the secret, so the server needs more than its SHA-256:
-- per mechanism a random salt, the PBKDF2 iteration count, StoredKey and
-- ServerKey (RFC 5802, RFC 7677), computed from the secret by the client
-- that creates the token (the secret still never reaches the database).
-- They let the listener check a client's proof; they cannot be used as
-- the secret. Only the admin role reads them, as it reads token_hash.
-- Tokens created before this migration have no rows here: SCRAM refuses
-- them (re-create the token, or use SASL/PLAIN, which still works).
CREATE TABLE {{schema}}.token_scram (
    token_id   bigint  NOT NULL REFERENCES {{schema}}.token (token_id) ON DELETE CASCADE,
    mechanism  text    NOT NULL CHECK (mechanism IN ('SCRAM-SHA-256', 'SCRAM-SHA-512')),
    salt       bytea   NOT NULL CHECK (octet_length(salt) BETWEEN 16 AND 64),
    iterations integer NOT NULL CHECK (iterations BETWEEN 4096 AND 16384),
    stored_key bytea   NOT NULL,
    server_key bytea   NOT NULL,
    PRIMARY KEY (token_id, mechanism),
    CONSTRAINT token_scram_key_size CHECK (
        octet_length(stored_key) = CASE mechanism WHEN 'SCRAM-SHA-256' THEN 32 ELSE 64 END
        AND octet_length(server_key) = octet_length(stored_key))
);
