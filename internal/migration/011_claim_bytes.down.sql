-- Reverts 011: job_claim as 010 defined it, without p_max_bytes.

DROP FUNCTION {{schema}}.job_claim(text, integer, interval, text, bigint);

-- job_claim as 002 defined it, except that each claim sets a random
-- lease_token instead of incrementing it.
CREATE FUNCTION {{schema}}.job_claim(p_queue text, p_limit integer DEFAULT 1, p_lease interval DEFAULT NULL,
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
