-- pgmsg 019 down: no sequences. The migrator has dropped the functions and
-- the triggers that call them; the previous binary's `migrate up` creates
-- its own again. Pending jobs become available: without sequences nothing
-- would ever make them claimable.
UPDATE {{schema}}.job SET state = CASE WHEN run_at > now() THEN 'scheduled' ELSE 'available' END
 WHERE state = 'pending';
DROP TABLE IF EXISTS {{schema}}.job_sequence;
DROP INDEX IF EXISTS {{schema}}.job_sequence_head;
DROP INDEX IF EXISTS {{schema}}.job_sequence_pending;
ALTER TABLE {{schema}}.job DROP CONSTRAINT job_state_valid;
ALTER TABLE {{schema}}.job ADD CONSTRAINT job_state_valid
    CHECK (state IN ('available', 'scheduled', 'retrying', 'running', 'dead'));
ALTER TABLE {{schema}}.job DROP COLUMN IF EXISTS sequence_key, DROP COLUMN IF EXISTS sequence_continue;
ALTER TABLE {{schema}}.job_archive DROP COLUMN IF EXISTS sequence_key;
