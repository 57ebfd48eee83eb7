-- pgmsg 017 down: no SCRAM verifiers (tokens keep working with SASL/PLAIN
-- and the HTTP server). The migrator has dropped the functions; the
-- previous binary's `migrate up` creates its own again.
DROP TABLE IF EXISTS {{schema}}.token_scram;
