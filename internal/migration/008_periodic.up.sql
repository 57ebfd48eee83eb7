-- pgmsg 008: periodic jobs.
--
-- A periodic job is a job template and a schedule (a cron expression, a
-- descriptor such as @hourly, or @every <interval>) in a time zone.
-- periodic_enqueue_due(), called by the maintenance leader every second,
-- enqueues the template for each due row and moves next_run_at on, in one
-- transaction with the row locked: a tick is enqueued once whichever
-- process runs it, and a tick that came due while no leader ran stays due
-- until one does. Deleting a queue deletes its periodic jobs.

CREATE TABLE {{schema}}.periodic_job (
    queue_id     integer     NOT NULL REFERENCES {{schema}}.queue ON DELETE CASCADE,
    name         text        NOT NULL,
    schedule     text        NOT NULL,
    time_zone    text        NOT NULL DEFAULT 'UTC',
    -- The job enqueued at each tick.
    payload      bytea       NOT NULL DEFAULT '',
    kind         text,
    priority     smallint    NOT NULL DEFAULT 0,
    max_attempts integer,                  -- NULL: the queue's
    timeout      interval,                 -- NULL: the queue's
    tags         text[],
    metadata     jsonb,
    run_on_start boolean     NOT NULL DEFAULT false,
    -- When the definition was last set: the anchor of @every schedules.
    defined_at   timestamptz NOT NULL,
    next_run_at  timestamptz NOT NULL,
    last_run_at  timestamptz,              -- the last tick enqueued
    last_job_id  bigint,
    last_error   text,                     -- why the last due tick was not enqueued
    PRIMARY KEY (queue_id, name)
);

-- The leader's due scan.
CREATE INDEX periodic_job_due ON {{schema}}.periodic_job (next_run_at);
