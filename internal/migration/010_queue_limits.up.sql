-- pgmsg 010: rate limits.
--
-- rate_limit: the most jobs a queue hands out per second, on average, to
-- all its workers together, with bursts of up to one second's worth (at
-- least one job); a token bucket kept in rate_tokens as of rate_at.
-- max_running: the most of its jobs running at once, across every worker
-- process. NULL: no limit. Claims of a limited queue take its row's lock
-- for their transaction, so they wait on one another (briefly) and never
-- overshoot; queues without limits are claimed as before.

ALTER TABLE {{schema}}.queue
    ADD COLUMN rate_limit  double precision CHECK (rate_limit > 0),
    ADD COLUMN max_running integer CHECK (max_running >= 1),
    ADD COLUMN rate_tokens double precision,
    ADD COLUMN rate_at     timestamptz;

-- These change shape: the function file creates them again.
DROP FUNCTION IF EXISTS {{schema}}.queue_create(text, integer, interval, interval, interval, interval, integer, boolean, bigint, interval, interval, interval);
DROP FUNCTION IF EXISTS {{schema}}.queue_update(text, integer, interval, interval, interval, interval, integer, bigint, interval, interval, interval);
