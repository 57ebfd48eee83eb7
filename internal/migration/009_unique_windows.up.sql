-- pgmsg 009: uniqueness windows.
--
-- A job enqueued with a unique key and a window (enqueue_many's
-- p_unique_fors) is unique for its key within the window, whatever became
-- of it: live, completed, cancelled or dead. Windows are fixed and aligned
-- to the Unix epoch (an hour's window runs from the top of the hour, in
-- UTC). Each window's first job leaves a row here, whose primary key makes
-- concurrent enqueuers of the same key and window agree on one job; the
-- row goes once the window has passed (job_unique_prune, run by
-- maintenance), and with its queue.

CREATE TABLE {{schema}}.job_unique (
    queue_id   integer     NOT NULL REFERENCES {{schema}}.queue ON DELETE CASCADE,
    unique_key text        NOT NULL,  -- the key and its window: <key>@<window start, UTC>
    job_id     bigint      NOT NULL,
    expires_at timestamptz NOT NULL,  -- the window's end
    PRIMARY KEY (queue_id, unique_key)
);

CREATE INDEX job_unique_expires ON {{schema}}.job_unique (expires_at);

-- These change shape: the function file creates them again.
DROP FUNCTION IF EXISTS {{schema}}.enqueue_many(text, bytea[], text[], integer[], timestamp with time zone[], interval[], integer[], text[], boolean, interval[], jsonb[], jsonb[]);
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, bytea, text, integer, timestamp with time zone, interval, integer, text, boolean, interval, jsonb, jsonb);
