-- pgmsg 020: per-key concurrency limits.
--
-- A queue with a key_limit runs at most key_limit of its jobs of one limit
-- key at once, across every worker process. A job's limit key is the one
-- given at enqueue, else the top-level field key_field of its JSON payload
-- (NULL: only given keys); jobs without a key are not limited. It is the
-- sequences' mechanism with key_limit heads instead of one, no order
-- promised beyond admission in enqueue order, and no hold: a key's jobs
-- beyond its limit wait in the state 'pending' (out of the claim's index),
-- and when an admitted job leaves (completed, cancelled, dead) the
-- sequence trigger admits the next. A transaction-level advisory lock per
-- key orders its enqueuers and the trigger (see the queue functions).

ALTER TABLE {{schema}}.queue
    ADD COLUMN key_limit integer CHECK (key_limit >= 1),
    ADD COLUMN key_field text CHECK (key_field <> '' AND octet_length(key_field) <= 200);

ALTER TABLE {{schema}}.job ADD COLUMN limit_key text;

-- A key's admitted jobs (waiting to run, running) and its pending ones in
-- order: what admitting reads. Jobs without a limit key are in neither.
CREATE INDEX job_limit_admitted ON {{schema}}.job (queue_id, limit_key)
    WHERE limit_key IS NOT NULL AND state IN ('available', 'scheduled', 'retrying', 'running');
CREATE INDEX job_limit_pending ON {{schema}}.job (queue_id, limit_key, id)
    WHERE limit_key IS NOT NULL AND state = 'pending';

-- These change shape: the function file creates them again.
DROP FUNCTION IF EXISTS {{schema}}.queue_create(text, integer, interval, interval, interval, interval, integer, boolean, bigint, interval, interval, interval, double precision, integer);
DROP FUNCTION IF EXISTS {{schema}}.queue_update(text, integer, interval, interval, interval, interval, integer, bigint, interval, interval, interval, double precision, integer);
DROP FUNCTION IF EXISTS {{schema}}.enqueue_many(text, bytea[], text[], integer[], timestamp with time zone[], interval[], integer[], text[], boolean, interval[], jsonb[], jsonb[], interval[], text[], boolean[]);
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, bytea, text, integer, timestamp with time zone, interval, integer, text, boolean, interval, jsonb, jsonb, interval, text, boolean);
