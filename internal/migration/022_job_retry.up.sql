-- job_retry makes a waiting job claimable now (issue 19: "retry now"): a
-- scheduled job, or one waiting for its retry backoff, becomes available
-- at once, keeping its attempts; idle workers of its queue are woken. An
-- available job stays as it is. A running, dead or finished job is refused
-- with PM110 (dead jobs are requeued with dead_requeue), an unknown id with
-- PM107. Returns the job's state afterwards.
CREATE FUNCTION {{schema}}.job_retry(p_id bigint)
 RETURNS text
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
DECLARE
    v_state text;
    v_queue text;
BEGIN
    SELECT j.state, q.name INTO v_state, v_queue
      FROM {{schema}}.job j JOIN {{schema}}.queue q ON q.queue_id = j.queue_id
     WHERE j.id = p_id
       FOR UPDATE OF j;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM {{schema}}.job_archive a WHERE a.id = p_id) THEN
            PERFORM {{schema}}._raise('PM110', format('job %s is finished: it cannot be retried', p_id));
        END IF;
        PERFORM {{schema}}._raise('PM107', format('unknown job %s', coalesce(p_id::text, 'NULL')));
    END IF;
    IF v_state IN ('scheduled', 'retrying') THEN
        UPDATE {{schema}}.job j SET state = 'available', run_at = least(j.run_at, clock_timestamp())
         WHERE j.id = p_id;
        PERFORM pg_notify({{schema_lit}} || '_log', 'queue:' || v_queue);
        RETURN 'available';
    ELSIF v_state = 'available' THEN
        RETURN v_state;
    END IF;
    PERFORM {{schema}}._raise('PM110', format('job %s is %s: only a scheduled or retrying job can be retried now%s', p_id, v_state,
        CASE WHEN v_state = 'dead' THEN ' (requeue dead jobs with dead_requeue)' ELSE '' END));
    RETURN v_state;
END $$;
