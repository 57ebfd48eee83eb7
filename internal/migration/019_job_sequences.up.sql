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
-- let its sequence continue: then the sequence is held, recorded here, until
-- sequence_resume() or dead_requeue() of the holding job.
--
-- A job_sequence row exists while its sequence has live jobs or is held;
-- its lock orders the enqueuers and the trigger of one key.

ALTER TABLE {{schema}}.job
    ADD COLUMN sequence_key     text,
    -- true: the job's failure (dead or cancelled) lets its sequence go on
    -- instead of holding it. NULL for jobs without a sequence.
    ADD COLUMN sequence_continue boolean;

ALTER TABLE {{schema}}.job DROP CONSTRAINT job_state_valid;
ALTER TABLE {{schema}}.job ADD CONSTRAINT job_state_valid
    CHECK (state IN ('available', 'scheduled', 'retrying', 'running', 'dead', 'pending'));

ALTER TABLE {{schema}}.job_archive ADD COLUMN sequence_key text;

-- A sequence's jobs in order (the next pending job, the head, a listing);
-- jobs without a sequence are not in it.
CREATE INDEX job_sequence_order ON {{schema}}.job (queue_id, sequence_key, id) WHERE sequence_key IS NOT NULL;

CREATE TABLE {{schema}}.job_sequence (
    queue_id     integer     NOT NULL REFERENCES {{schema}}.queue ON DELETE CASCADE,
    sequence_key text        NOT NULL,
    -- Held: the job whose failure holds the sequence, when, and why
    -- ('dead' or 'cancelled'); NULL: not held.
    held_job_id  bigint,
    held_at      timestamptz,
    held_reason  text        CHECK (held_reason IN ('dead', 'cancelled')),
    PRIMARY KEY (queue_id, sequence_key)
);

-- These change shape: the function file creates them again.
DROP FUNCTION IF EXISTS {{schema}}.enqueue_many(text, bytea[], text[], integer[], timestamp with time zone[], interval[], integer[], text[], boolean, interval[], jsonb[], jsonb[], interval[]);
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, bytea, text, integer, timestamp with time zone, interval, integer, text, boolean, interval, jsonb, jsonb, interval);
