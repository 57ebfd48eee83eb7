-- pgmsg 006: job progress and results.
--
-- job.progress: a small JSON document a running job's handler records
-- (job_progress), visible while it runs and kept when it finishes.
-- job_archive.progress and job_archive.result: what a completed job last
-- reported, and the result its handler completed it with (job_complete,
-- job_complete_many). All NULL unless set; a NULL costs no storage.

ALTER TABLE {{schema}}.job ADD COLUMN progress jsonb;
ALTER TABLE {{schema}}.job_archive ADD COLUMN progress jsonb, ADD COLUMN result jsonb;

-- job_complete, job_complete_many and job_get change shape: the function
-- file creates them again.
DROP FUNCTION IF EXISTS {{schema}}.job_complete(bigint, bigint);
DROP FUNCTION IF EXISTS {{schema}}.job_complete_many(bigint[], bigint[]);
DROP FUNCTION IF EXISTS {{schema}}.job_get(bigint);
