-- pgmsg 020 down: no per-key limits. The migrator has dropped the
-- functions and the triggers that call them; the previous binary's
-- `migrate up` creates its own again. Jobs pending behind a limit (not a
-- sequence) become available: nothing would ever admit them.
UPDATE {{schema}}.job SET state = CASE WHEN run_at > now() THEN 'scheduled' ELSE 'available' END
 WHERE state = 'pending' AND limit_key IS NOT NULL AND sequence_key IS NULL;
DROP INDEX IF EXISTS {{schema}}.job_limit_admitted;
DROP INDEX IF EXISTS {{schema}}.job_limit_pending;
ALTER TABLE {{schema}}.job DROP COLUMN IF EXISTS limit_key;
ALTER TABLE {{schema}}.queue DROP COLUMN IF EXISTS key_limit, DROP COLUMN IF EXISTS key_field;
