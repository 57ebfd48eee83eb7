-- pgmsg 019: sequences.
--
-- Jobs of a queue enqueued with the same sequence key run one at a time, in
-- enqueue order (job id order), across every worker process. Only the
-- sequence's head is claimable (available, scheduled or retrying, then
-- running); the jobs behind it wait in the state 'pending', which the
-- job_claim index does not hold, so the claim never reads them and queues
-- without sequences are claimed as before. When the head leaves (completed,
-- cancelled, dead) a trigger on job makes the next pending job the head,
-- unless the head failed (went dead, or was cancelled) and did not ask to
-- let its sequence continue: then the sequence is held, recorded in
-- job_sequence, until sequence_resume() or dead_requeue() of the holding
-- job. A transaction-level advisory lock per sequence orders its
-- enqueuers and the trigger (see the queue functions).

ALTER TABLE {{schema}}.job
    ADD COLUMN sequence_key     text,
    -- true: the job's failure (dead or cancelled) lets its sequence go on
    -- instead of holding it. NULL for jobs without a sequence.
    ADD COLUMN sequence_continue boolean;

ALTER TABLE {{schema}}.job DROP CONSTRAINT job_state_valid;
ALTER TABLE {{schema}}.job ADD CONSTRAINT job_state_valid
    CHECK (state IN ('available', 'scheduled', 'retrying', 'running', 'dead', 'pending'));

ALTER TABLE {{schema}}.job_archive ADD COLUMN sequence_key text;

-- A sequence's head (the one job of it waiting to run or running) and its
-- pending jobs in order: what moving a sequence on reads. Jobs without a
-- sequence are in neither (they are never pending).
CREATE INDEX job_sequence_head ON {{schema}}.job (queue_id, sequence_key)
    WHERE sequence_key IS NOT NULL AND state IN ('available', 'scheduled', 'retrying', 'running');
CREATE INDEX job_sequence_pending ON {{schema}}.job (queue_id, sequence_key, id) WHERE state = 'pending';

-- Held sequences: the job whose failure holds each, when, and why ('dead'
-- or 'cancelled'). A sequence that is not held has no row.
CREATE TABLE {{schema}}.job_sequence (
    queue_id     integer     NOT NULL REFERENCES {{schema}}.queue ON DELETE CASCADE,
    sequence_key text        NOT NULL,
    held_job_id  bigint      NOT NULL,
    held_at      timestamptz NOT NULL,
    held_reason  text        NOT NULL CHECK (held_reason IN ('dead', 'cancelled')),
    PRIMARY KEY (queue_id, sequence_key)
);

-- These change shape: the function file creates them again.
DROP FUNCTION IF EXISTS {{schema}}.enqueue_many(text, bytea[], text[], integer[], timestamp with time zone[], interval[], integer[], text[], boolean, interval[], jsonb[], jsonb[], interval[]);
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, bytea, text, integer, timestamp with time zone, interval, integer, text, boolean, interval, jsonb, jsonb, interval);
DROP FUNCTION IF EXISTS {{schema}}.queue_stats(text);
