-- pgmsg 022: workflows (jobs that depend on other jobs, as a DAG).
--
-- A job enqueued with dependencies (other jobs of its queue, existing or
-- of the same enqueue) waits in the state 'pending', as a sequence's jobs
-- behind its head do (out of the claim's index), until every dependency
-- completed. job_dependency holds the edges not settled yet; when a
-- dependency leaves (completed, cancelled, deleted) or goes dead, the
-- sequence trigger (job_sequence_left) or job_deps_dead settles its edges
-- in the same transaction: each dependent counts one fewer dependency to
-- wait for (deps_waiting) and becomes available at 0, or, for a dependency
-- that failed and that the dependent does not ignore, is cancelled (and so,
-- recursively, are its own dependents that do not ignore cancelled ones).

ALTER TABLE {{schema}}.job
    -- The job's dependencies as enqueued (NULL: none), kept in the archive.
    ADD COLUMN depends_on            bigint[],
    -- How many of them have not finished yet (NULL: no dependencies).
    ADD COLUMN deps_waiting          integer,
    -- true: a cancelled (or deleted) / dead dependency counts as done
    -- instead of cancelling the job. NULL for jobs without dependencies.
    ADD COLUMN deps_ignore_cancelled boolean,
    ADD COLUMN deps_ignore_dead      boolean,
    -- true: a job was enqueued depending on this one (so its leaving looks
    -- for edges to settle; the others' cost nothing).
    ADD COLUMN has_dependents        boolean,
    -- The workflow the job belongs to: the id of its first job.
    ADD COLUMN workflow_id           bigint;

ALTER TABLE {{schema}}.job_archive
    ADD COLUMN depends_on  bigint[],
    ADD COLUMN workflow_id bigint;

-- The unsettled edges: dep_id's leaving settles job_id's wait. An edge to
-- a job that left meanwhile (cancelled while waiting) is dropped when its
-- dependency settles it.
CREATE TABLE {{schema}}.job_dependency (
    dep_id bigint NOT NULL,
    job_id bigint NOT NULL,
    PRIMARY KEY (dep_id, job_id)
);

CREATE INDEX job_workflow ON {{schema}}.job (workflow_id) WHERE workflow_id IS NOT NULL;
CREATE INDEX job_archive_workflow ON {{schema}}.job_archive (workflow_id) WHERE workflow_id IS NOT NULL;

-- These change shape: the function file creates them again.
DROP FUNCTION IF EXISTS {{schema}}.enqueue_many(text, bytea[], text[], integer[], timestamp with time zone[], interval[], integer[], text[], boolean, interval[], jsonb[], jsonb[], interval[], text[], boolean[], text[]);
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, bytea, text, integer, timestamp with time zone, interval, integer, text, boolean, interval, jsonb, jsonb, interval, text, boolean, text);
DROP FUNCTION IF EXISTS {{schema}}.job_get(bigint);
