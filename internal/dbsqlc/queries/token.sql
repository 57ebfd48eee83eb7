-- name: TokenCreate :one
SELECT token_id::bigint, name::text, prefix::text, scopes::text[], created_at::timestamptz, expires_at::timestamptz
FROM pgmsg.token_create(@name::text, @token_hash::bytea, @prefix::text, @scopes::text[], sqlc.narg(expires_at)::timestamptz,
                        @scram::text[]);

-- name: TokenList :many
SELECT token_id::bigint, name::text, prefix::text, scopes::text[], created_at::timestamptz,
       expires_at::timestamptz, revoked_at::timestamptz, last_used_at::timestamptz
FROM pgmsg.token_list();

-- name: TokenRevoke :exec
SELECT pgmsg.token_revoke(@token_id::bigint);

-- name: TokenVerify :many
-- One primary-key-sized lookup through the unique index on token_hash.
SELECT token_id::bigint, name::text, prefix::text, scopes::text[], created_at::timestamptz,
       expires_at::timestamptz, revoked_at::timestamptz, last_used_at::timestamptz
FROM pgmsg.token_verify(@token_hash::bytea);

-- name: TokenScram :many
-- The live token of a name with its SCRAM verifier of a mechanism (NULLs
-- when it has none).
SELECT token_id::bigint, name::text, prefix::text, scopes::text[], created_at::timestamptz,
       expires_at::timestamptz, revoked_at::timestamptz, last_used_at::timestamptz,
       salt::bytea, coalesce(iterations, 0)::integer AS iterations, stored_key::bytea, server_key::bytea
FROM pgmsg.token_scram(@name::text, @mechanism::text);

-- name: TokenVerifyID :many
SELECT token_id::bigint, name::text, prefix::text, scopes::text[], created_at::timestamptz,
       expires_at::timestamptz, revoked_at::timestamptz, last_used_at::timestamptz
FROM pgmsg.token_verify_id(@token_id::bigint);
