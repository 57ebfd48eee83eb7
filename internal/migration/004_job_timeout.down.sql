-- pgmsg 004 down: no job timeouts. The migrator has dropped the functions;
-- the previous binary's `migrate up` creates its own again.
ALTER TABLE {{schema}}.job DROP COLUMN IF EXISTS timeout;
ALTER TABLE {{schema}}.queue DROP COLUMN IF EXISTS job_timeout;
