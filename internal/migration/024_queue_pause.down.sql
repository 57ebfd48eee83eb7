-- Reverts 024.
DROP FUNCTION {{schema}}.job_claim(text, integer, interval, text, bigint, boolean);
ALTER FUNCTION {{schema}}._job_claim(text, integer, interval, text, bigint, boolean) RENAME TO job_claim;
DROP FUNCTION IF EXISTS {{schema}}.queue_pause(text);
DROP FUNCTION IF EXISTS {{schema}}.queue_resume(text);
DROP FUNCTION IF EXISTS {{schema}}._queue_set_paused(text, boolean);
ALTER TABLE {{schema}}.queue DROP COLUMN IF EXISTS paused;
