-- pgmsg 023 down: no batches. The migrator has dropped the functions and
-- the triggers that call them; callbacks not enqueued yet never will be.
DROP TABLE IF EXISTS {{schema}}.job_batch_slot;
DROP TABLE IF EXISTS {{schema}}.job_batch;
DROP INDEX IF EXISTS {{schema}}.job_batch_member;
ALTER TABLE {{schema}}.job DROP COLUMN IF EXISTS batch_id;
