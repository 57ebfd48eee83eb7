-- pgmsg 007: job tags and metadata.
--
-- job.tags: up to 20 short labels per job, for search (job_list's p_tag);
-- job.metadata: a JSON object of at most 64 KiB the application keeps with
-- the job (who asked, a trace id, ...). Both NULL unless set, so untagged
-- jobs cost nothing, and kept in the archive.

ALTER TABLE {{schema}}.job ADD COLUMN tags text[], ADD COLUMN metadata jsonb;
ALTER TABLE {{schema}}.job_archive ADD COLUMN tags text[], ADD COLUMN metadata jsonb;

-- Tag search. Partial: only tagged jobs are in them, so enqueues, claims
-- and completions of untagged jobs do not touch them.
CREATE INDEX job_tags ON {{schema}}.job USING gin (tags) WHERE tags IS NOT NULL;
CREATE INDEX job_archive_tags ON {{schema}}.job_archive USING gin (tags) WHERE tags IS NOT NULL;

-- These change shape: the function file creates them again.
DROP FUNCTION IF EXISTS {{schema}}.enqueue_many(text, bytea[], text[], integer[], timestamp with time zone[], interval[], integer[], text[], boolean, interval[]);
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, bytea, text, integer, timestamp with time zone, interval, integer, text, boolean, interval);
DROP FUNCTION IF EXISTS {{schema}}.job_get(bigint);
DROP FUNCTION IF EXISTS {{schema}}.job_list(text, text, text, timestamp with time zone, timestamp with time zone, integer, bigint);
DROP FUNCTION IF EXISTS {{schema}}.dead_list(text, text, integer, bigint);
