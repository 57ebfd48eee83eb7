-- pgmsg 003 down: removes tokens.
DROP FUNCTION IF EXISTS {{schema}}.token_verify(bytea);
DROP FUNCTION IF EXISTS {{schema}}.token_revoke(bigint);
DROP FUNCTION IF EXISTS {{schema}}.token_list();
DROP FUNCTION IF EXISTS {{schema}}.token_create(text, bytea, text, text[], timestamptz);
DROP FUNCTION IF EXISTS {{schema}}._check_scopes(text[]);
DROP TABLE IF EXISTS {{schema}}.token;
