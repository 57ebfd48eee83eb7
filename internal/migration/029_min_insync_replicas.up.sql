-- pgmsg 029: the min_insync_replicas setting (functions/common.sql,
-- min_insync_replicas_set). 1, the default, is no guard; 2 refuses the
-- writes clients are told are stored (publishes, enqueues, completions,
-- offset commits, idempotent producer state) when PostgreSQL would commit
-- them without waiting for a synchronous standby. The setting is kept here,
-- one row, so that the function files, applied again after a migration,
-- put back the triggers it asks for (the migrator drops every trigger of
-- the schema's functions before a down migration).
CREATE TABLE {{schema}}.db_setting (
    one                 boolean PRIMARY KEY DEFAULT true CHECK (one),
    min_insync_replicas integer NOT NULL DEFAULT 1 CHECK (min_insync_replicas IN (1, 2))
);
INSERT INTO {{schema}}.db_setting DEFAULT VALUES;
