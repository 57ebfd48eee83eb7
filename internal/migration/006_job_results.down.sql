-- pgmsg 006 down: no job progress or results. The migrator has dropped
-- the functions; the previous binary's `migrate up` creates its own again.
ALTER TABLE {{schema}}.job_archive DROP COLUMN IF EXISTS progress, DROP COLUMN IF EXISTS result;
ALTER TABLE {{schema}}.job DROP COLUMN IF EXISTS progress;
