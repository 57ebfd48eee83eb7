-- pgmsg 008 down: no periodic jobs. The migrator has dropped the
-- functions; the previous binary's `migrate up` creates its own again.
DROP TABLE IF EXISTS {{schema}}.periodic_job;
