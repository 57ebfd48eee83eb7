-- pgmsg 004: a maximum run time per queue and per job.
--
-- queue.job_timeout is the queue's default; job.timeout a job's own, set
-- at enqueue. A claim hands each job coalesce(job.timeout,
-- queue.job_timeout); the Go worker cancels the handler's context when it
-- passes and fails the attempt as a timeout. NULL: no limit.
--
-- The functions whose arguments or results grow are dropped here; the
-- function files create them again with the new shapes.

ALTER TABLE {{schema}}.queue ADD COLUMN job_timeout interval
    CHECK (job_timeout > interval '0' AND job_timeout <= interval '366 days');
ALTER TABLE {{schema}}.job ADD COLUMN timeout interval;

DROP FUNCTION IF EXISTS {{schema}}.queue_create(text, integer, interval, interval, interval, interval, integer, boolean, bigint, interval);
DROP FUNCTION IF EXISTS {{schema}}.queue_update(text, integer, interval, interval, interval, interval, integer, bigint, interval);
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, bytea, text, integer, timestamptz, interval, integer, text, boolean);
DROP FUNCTION IF EXISTS {{schema}}.enqueue_many(text, bytea[], text[], integer[], timestamptz[], interval[], integer[], text[], boolean);
DROP FUNCTION IF EXISTS {{schema}}.job_claim(text, integer, interval, text, bigint, boolean);
DROP FUNCTION IF EXISTS {{schema}}._job_claim(text, integer, interval, text, bigint, boolean);
DROP FUNCTION IF EXISTS {{schema}}.job_get(bigint);
