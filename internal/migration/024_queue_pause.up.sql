-- 024: pause and resume a queue (issue 19, item 3). A paused queue keeps
-- taking jobs (enqueue, retries, scheduling go on) but hands none out:
-- job_claim() and the Go client's direct claim statement return no job.
-- Running jobs finish as usual. The state is a column, so it survives
-- restarts; resuming wakes the queue's idle workers.

ALTER TABLE {{schema}}.queue ADD COLUMN paused boolean NOT NULL DEFAULT false;

-- queue_pause / queue_resume set the state and return it (true: paused);
-- an unknown queue is PM101. Both are idempotent; resuming wakes the
-- queue's idle workers.
CREATE FUNCTION {{schema}}._queue_set_paused(p_queue text, p_paused boolean) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE {{schema}}.queue SET paused = p_paused WHERE name = p_queue;
    IF NOT FOUND THEN
        PERFORM {{schema}}._queue(p_queue);
    END IF;
    IF NOT p_paused THEN
        PERFORM pg_notify({{schema_lit}} || '_log', 'queue:' || p_queue);
    END IF;
    RETURN p_paused;
END $$;

CREATE FUNCTION {{schema}}.queue_pause(p_queue text) RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$ SELECT {{schema}}._queue_set_paused(p_queue, true) $$;

CREATE FUNCTION {{schema}}.queue_resume(p_queue text) RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$ SELECT {{schema}}._queue_set_paused(p_queue, false) $$;

-- job_claim: 020's body, renamed, behind a check of the pause (one
-- indexed row read) instead of a restatement of its 150 lines.
ALTER FUNCTION {{schema}}.job_claim(text, integer, interval, text, bigint, boolean) RENAME TO _job_claim;

CREATE FUNCTION {{schema}}.job_claim(p_queue text, p_limit integer DEFAULT 1, p_lease interval DEFAULT NULL::interval,
                                     p_worker text DEFAULT NULL::text, p_max_bytes bigint DEFAULT NULL::bigint,
                                     p_async boolean DEFAULT false)
 RETURNS TABLE(id bigint, queue text, kind text, payload bytea, priority integer, attempt integer, max_attempts integer,
               lease_token bigint, lease_expires_at timestamp with time zone, run_at timestamp with time zone,
               enqueued_at timestamp with time zone, attempted_at timestamp with time zone, unique_key text, errors jsonb)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF ({{schema}}._queue(p_queue)).paused THEN
        RETURN; -- nothing handed out (nor the other arguments checked)
    END IF;
    RETURN QUERY SELECT * FROM {{schema}}._job_claim(p_queue, p_limit, p_lease, p_worker, p_max_bytes, p_async);
END $function$;
