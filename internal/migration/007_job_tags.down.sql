-- pgmsg 007 down: no job tags or metadata. The migrator has dropped the
-- functions; the previous binary's `migrate up` creates its own again.
DROP INDEX IF EXISTS {{schema}}.job_archive_tags;
DROP INDEX IF EXISTS {{schema}}.job_tags;
ALTER TABLE {{schema}}.job_archive DROP COLUMN IF EXISTS tags, DROP COLUMN IF EXISTS metadata;
ALTER TABLE {{schema}}.job DROP COLUMN IF EXISTS tags, DROP COLUMN IF EXISTS metadata;
