-- pgmsg 023: batches (jobs enqueued together, with callbacks).
--
-- A batch's jobs carry its id (job.batch_id). The batch's row (job_batch)
-- holds its callbacks (job specs to enqueue once every job of it is final)
-- and, once they were enqueued, their job ids; its counters are spread
-- over up to 16 slot rows (job_batch_slot, a job's slot is its id modulo
-- the batch's slots), so that the workers completing jobs of one batch
-- update different rows and seldom wait on each other. The transaction
-- that makes a job final (completed, cancelled, deleted, dead) counts it
-- off its slot; the one that brings a slot to zero locks the batch's row
-- and, if every slot is at zero, enqueues the callbacks (see _batch_settle).

ALTER TABLE {{schema}}.job ADD COLUMN batch_id bigint;

CREATE TABLE {{schema}}.job_batch (
    batch_id          bigint      PRIMARY KEY,
    queue_id          integer     NOT NULL REFERENCES {{schema}}.queue ON DELETE CASCADE,
    total             integer     NOT NULL,
    slots             integer     NOT NULL,
    created_at        timestamptz NOT NULL,
    -- The callbacks as given ({"kind", "args", "queue", "priority",
    -- "metadata"}), NULL for none.
    on_complete       jsonb,
    on_discard        jsonb,
    on_finished       jsonb,
    -- Set when every job was final: when, the counts then, and the jobs
    -- enqueued for the callbacks (NULL: none was due or given).
    finished_at       timestamptz,
    final_counts      jsonb,
    complete_job_id   bigint,
    discard_job_id    bigint,
    finished_job_id   bigint
);

CREATE TABLE {{schema}}.job_batch_slot (
    batch_id  bigint  NOT NULL REFERENCES {{schema}}.job_batch ON DELETE CASCADE,
    slot      integer NOT NULL,
    -- Jobs of the slot not final yet, and the final ones by how they ended.
    remaining integer NOT NULL,
    completed integer NOT NULL DEFAULT 0,
    cancelled integer NOT NULL DEFAULT 0,
    dead      integer NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, slot)
);

CREATE INDEX job_batch_member ON {{schema}}.job (batch_id) WHERE batch_id IS NOT NULL;
-- archive_prune: the finished batches of a queue, oldest first.
CREATE INDEX job_batch_finished ON {{schema}}.job_batch (queue_id, finished_at) WHERE finished_at IS NOT NULL;
