-- pgmsg 028 down: the archive keeps no batch id. The migrator has dropped
-- the functions; the previous binary's `migrate up` creates its own again.
ALTER TABLE {{schema}}.job_archive DROP COLUMN IF EXISTS batch_id;
