-- pgmsg 025 down: no job logs or steps. The migrator has dropped the
-- functions; the previous binary's `migrate up` creates its own again.
DROP TABLE IF EXISTS {{schema}}.job_log;
DROP TABLE IF EXISTS {{schema}}.job_step;
