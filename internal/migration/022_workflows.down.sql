-- pgmsg 022 down: no workflows. The migrator has dropped the functions and
-- the triggers that call them; the previous binary's `migrate up` creates
-- its own again. Jobs waiting for dependencies (not a sequence or a limit)
-- become available: nothing would ever release them.
UPDATE {{schema}}.job SET state = CASE WHEN run_at > now() THEN 'scheduled' ELSE 'available' END
 WHERE state = 'pending' AND deps_waiting IS NOT NULL AND sequence_key IS NULL AND limit_key IS NULL;
DROP TABLE IF EXISTS {{schema}}.job_dependency;
DROP INDEX IF EXISTS {{schema}}.job_workflow;
DROP INDEX IF EXISTS {{schema}}.job_archive_workflow;
ALTER TABLE {{schema}}.job DROP COLUMN IF EXISTS depends_on, DROP COLUMN IF EXISTS deps_waiting,
    DROP COLUMN IF EXISTS deps_ignore_cancelled, DROP COLUMN IF EXISTS deps_ignore_dead,
    DROP COLUMN IF EXISTS has_dependents, DROP COLUMN IF EXISTS workflow_id;
ALTER TABLE {{schema}}.job_archive DROP COLUMN IF EXISTS depends_on, DROP COLUMN IF EXISTS workflow_id;
