-- pgmsg 025: job logs and resumable steps.
--
-- job_log keeps what a handler logged during an attempt: one row per
-- finished attempt that logged something (a snoozed attempt, which is
-- not counted, has its own row under the same attempt number), written by
-- the statement that records the attempt's outcome (job_complete_many,
-- job_fail, job_snooze) in its transaction. Each is at most 1 MiB (the
-- functions cut a longer one, marking the cut); the Go worker keeps 64
-- KiB by default (WorkerOpts.MaxLogBytes).
--
-- job_step keeps the checkpoints of a handler's steps: the output of each
-- step that completed, by name, written at once (job_step_save) under the
-- job's lease, so that the next attempt skips it and gets its output.
--
-- Neither has a foreign key (as job_payload): rows go with the job's last
-- row (archive_prune, dead_purge, dead_prune, queue_delete).
CREATE TABLE {{schema}}.job_log (
    job_id  bigint      NOT NULL,
    attempt integer     NOT NULL,
    at      timestamptz NOT NULL,
    -- completed, retrying, dead or snoozed
    outcome text        NOT NULL,
    log     text        NOT NULL
);
CREATE INDEX job_log_job ON {{schema}}.job_log (job_id, at);

CREATE TABLE {{schema}}.job_step (
    job_id  bigint      NOT NULL,
    name    text        NOT NULL,
    attempt integer     NOT NULL,
    at      timestamptz NOT NULL,
    output  jsonb,
    PRIMARY KEY (job_id, name)
);

-- These change shape: the function file creates them again.
DROP FUNCTION IF EXISTS {{schema}}.job_complete_many(bigint[], bigint[], jsonb[]);
DROP FUNCTION IF EXISTS {{schema}}.job_complete(bigint, bigint, jsonb);
DROP FUNCTION IF EXISTS {{schema}}.job_fail(bigint, bigint, text, interval, boolean);
DROP FUNCTION IF EXISTS {{schema}}.job_snooze(bigint, bigint, interval);
