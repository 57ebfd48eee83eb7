-- Reverts 010: job_claim and _not_held as 002 defined them. Tokens drawn
-- while 010 was applied stay as they are; the next claim of each job
-- increments its token from there.
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
           SET state = 'running', attempt = j.attempt + 1, lease_token = j.lease_token + 1,
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

CREATE OR REPLACE FUNCTION {{schema}}._not_held(p_id bigint, p_token bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    st  text;
    tok bigint;
BEGIN
    SELECT j.state, j.lease_token INTO st, tok FROM {{schema}}.job j WHERE j.id = p_id;
    IF NOT FOUND THEN
        SELECT a.status INTO st FROM {{schema}}.job_archive a WHERE a.id = p_id;
        IF NOT FOUND THEN
            PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
        END IF;
        PERFORM {{schema}}._raise('PM106', format('job %s is not held by lease %s: it is archived (%s)', p_id, p_token, st));
    END IF;
    PERFORM {{schema}}._raise('PM106', format('job %s is not held by lease %s: it is %s under lease %s',
                                              p_id, p_token, st, tok));
END $$;

DROP FUNCTION {{schema}}._lease_token();

-- _held as 001 defined it.
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
            'claim %s on partition %s is not held: it was committed, released, reset or claimed again (current claim %s)',
            p_claim_epoch, p_partition, cur.claim_epoch));
    END IF;
    IF cur.claim_expires_at <= clock_timestamp() THEN
        PERFORM {{schema}}._raise('PM008', format('claim %s on partition %s expired at %s',
                                                  p_claim_epoch, p_partition, cur.claim_expires_at));
    END IF;
    RETURN cur;
END $$;
