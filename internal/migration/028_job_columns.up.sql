-- pgmsg 028: job_get and job_list show a job's sequence key, limit key and
-- batch.
--
-- job_get and job_list return the job's sequence_key, limit_key and
-- batch_id, and job_list every column of job_get (it lacked depends_on,
-- deps_waiting and workflow_id). The archive keeps a completed or
-- cancelled job's batch id, as it keeps its sequence key and workflow (it
-- keeps no limit key); jobs archived before this migration have none.

ALTER TABLE {{schema}}.job_archive ADD COLUMN batch_id bigint;

-- These change shape: the function file creates them again.
DROP FUNCTION IF EXISTS {{schema}}.job_get(bigint);
DROP FUNCTION IF EXISTS {{schema}}.job_list(text, text, text, timestamp with time zone, timestamp with time zone, integer, bigint, text, text);
