-- pgmsg 010: unguessable job lease tokens (issue 14).
--
-- Templated like 001.
--
-- A job's lease_token was a counter (1 on the first claim, +1 on each), and
-- _not_held put the live token in its error text ("... it is running under
-- lease 1"), which reached Go errors and HTTP bodies. Anyone allowed to
-- claim from a queue could thus guess or read the token of a job another
-- worker held, and complete, fail, snooze or extend it. Each claim now
-- draws a fresh random positive 63-bit token from gen_random_uuid() (core
-- since PostgreSQL 13, backed by pg_strong_random), still a bigint so the
-- API keeps its shape, and no error names a token. Fencing is unchanged: a
-- call presenting any token other than the live one gets PM106 (PM107 for
-- an unknown job), and writes nothing. Jobs running when this migration
-- runs keep their token until they are claimed again.

-- _lease_token returns a random bigint in [1, 2^53-1] (exact in JSON for
-- JavaScript and jq, which read numbers as doubles): random bits of a
-- version 4 UUID (its version nibble and variant bits left out),
-- cleared and masked to 53 bits, 0 (probability 2^-53) mapped to 1.
CREATE FUNCTION {{schema}}._lease_token() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT greatest(('x' || substr(u.h, 1, 12) || substr(u.h, 14, 3) || substr(u.h, 18, 1))::bit(64)::bigint
                    & 9007199254740991, 1)
    FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS h) u
$$;

-- job_claim as 002 defined it, except that each claim sets a random
-- lease_token instead of incrementing it.
CREATE OR REPLACE FUNCTION {{schema}}.job_claim(p_queue text, p_limit integer DEFAULT 1, p_lease interval DEFAULT NULL,
                                     p_worker text DEFAULT NULL)
RETURNS TABLE (id bigint, queue text, kind text, payload bytea, priority integer, attempt integer,
               max_attempts integer, lease_token bigint, lease_expires_at timestamptz, run_at timestamptz,
               enqueued_at timestamptz, attempted_at timestamptz, unique_key text, errors jsonb)
LANGUAGE plpgsql
-- Pin the plan to the ordered scan of job_claim. Right after a burst of
-- enqueues the statistics still say the queue is nearly empty, and the
-- planner would pick a bitmap scan of the whole backlog plus a sort (150 ms
-- for 28k jobs instead of well under 1 ms).
SET enable_bitmapscan = off SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    q       {{schema}}.queue := {{schema}}._queue(p_queue);
    now_ts  timestamptz := clock_timestamp();
    expires timestamptz;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'limit must be at least 1');
    END IF;
    IF p_lease IS NOT NULL AND p_lease <= interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive');
    END IF;
    expires := now_ts + coalesce(p_lease, q.lease);
    -- One probe of the small job_lease index.
    IF EXISTS (SELECT 1 FROM {{schema}}.job j
               WHERE j.queue_id = q.queue_id AND j.state = 'running' AND j.lease_expires_at <= now_ts) THEN
        PERFORM {{schema}}._rescue(q.queue_id, now_ts, 1000);
    END IF;
    RETURN QUERY
    WITH c AS (
        SELECT j.id FROM {{schema}}.job j
        WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
          AND j.run_at <= now_ts
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), u AS (
        UPDATE {{schema}}.job j
           SET state = 'running', attempt = j.attempt + 1, lease_token = {{schema}}._lease_token(),
               lease_expires_at = expires, attempted_at = now_ts, worker = p_worker
          FROM c
         WHERE j.id = c.id
        RETURNING j.id, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.lease_token,
                  j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.unique_key, j.errors
    )
    SELECT u.id, q.name, u.kind, u.payload, u.priority::integer, u.attempt, u.max_attempts, u.lease_token,
           u.lease_expires_at, u.run_at, u.enqueued_at, u.attempted_at, u.unique_key, u.errors
    FROM u
    ORDER BY u.priority DESC, u.run_at, u.id;
END $$;

-- _not_held as 002 defined it, except that the message names neither the
-- token presented nor the live one.
CREATE OR REPLACE FUNCTION {{schema}}._not_held(p_id bigint, p_token bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    SELECT j.state INTO st FROM {{schema}}.job j WHERE j.id = p_id;
    IF NOT FOUND THEN
        SELECT a.status INTO st FROM {{schema}}.job_archive a WHERE a.id = p_id;
        IF NOT FOUND THEN
            PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
        END IF;
        PERFORM {{schema}}._raise('PM106', format('job %s is not held by the lease presented: it is archived (%s)', p_id, st));
    END IF;
    IF st = 'running' THEN
        PERFORM {{schema}}._raise('PM106', format('job %s is not held by the lease presented: it is running under another lease', p_id));
    END IF;
    PERFORM {{schema}}._raise('PM106', format('job %s is not held by the lease presented: it is %s', p_id, st));
END $$;

-- The log's claims are fenced by their epoch as jobs are by their lease
-- token: a client that learns the live epoch of a partition can commit or
-- release another member's claim. _held, as in 001, no longer names the
-- current claim's epoch in PM009 (group listings, which show it, need the
-- admin scope over HTTP).
CREATE OR REPLACE FUNCTION {{schema}}._held(p_topic text, p_group text, p_partition integer, p_claim_epoch bigint)
RETURNS {{schema}}.group_cursor LANGUAGE plpgsql AS $$
DECLARE
    t   {{schema}}.topic := {{schema}}._topic(p_topic);
    cur {{schema}}.group_cursor;
BEGIN
    SELECT * INTO cur FROM {{schema}}.group_cursor c
    WHERE c.topic_id = t.topic_id AND c.group_name = p_group AND c.partition = p_partition
    FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM {{schema}}._raise('PM007', format('unknown group %s on topic %s partition %s',
                                                  left(quote_literal(coalesce(p_group, '')), 210), quote_literal(t.name), p_partition));
    END IF;
    IF cur.claim_epoch IS DISTINCT FROM p_claim_epoch OR cur.claim_expires_at IS NULL THEN
        PERFORM {{schema}}._raise('PM009', format(
            'claim %s on partition %s is not held: it was committed, released, reset or claimed again',
            p_claim_epoch, p_partition));
    END IF;
    IF cur.claim_expires_at <= clock_timestamp() THEN
        PERFORM {{schema}}._raise('PM008', format('claim %s on partition %s expired at %s',
                                                  p_claim_epoch, p_partition, cur.claim_expires_at));
    END IF;
    RETURN cur;
END $$;
