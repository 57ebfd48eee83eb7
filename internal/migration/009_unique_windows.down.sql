-- pgmsg 009 down: no uniqueness windows. The migrator has dropped the
-- functions; the previous binary's `migrate up` creates its own again.
DROP TABLE IF EXISTS {{schema}}.job_unique;
