-- 007: job latency and outcomes for monitoring.
--
-- queue_latency summarises the jobs each queue finished in the last
-- p_window from the archive: how many completed and were cancelled, and
-- quantiles of the end-to-end latency (enqueue to completion, scheduled
-- delay and retries included) and of the run time (start of the last
-- attempt to completion). It reads only the window through
-- job_archive_finished (queue_id, finished_at): an index range scan per
-- queue, so a scrape costs what the last minute archived, not the archive's
-- size. Dead-lettered jobs stay in the job table; queue_stats counts them.
CREATE FUNCTION {{schema}}.queue_latency(p_window interval DEFAULT '1 minute')
RETURNS TABLE (queue text, completed bigint, cancelled bigint,
               latency_p50 double precision, latency_p99 double precision, latency_max double precision,
               run_p50 double precision, run_p99 double precision)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    now_ts timestamptz := clock_timestamp();
BEGIN
    IF p_window IS NULL OR p_window <= interval '0' OR p_window > interval '1 day' THEN
        PERFORM {{schema}}._raise('PM004', format('queue_latency: window must be in (0, 1 day], got %s', coalesce(p_window::text, 'NULL')));
    END IF;
    RETURN QUERY
    SELECT q.name, coalesce(w.completed, 0), coalesce(w.cancelled, 0),
           w.l50, w.l99, w.lmax, w.r50, w.r99
    FROM {{schema}}.queue q
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE x.status = 'completed') AS completed,
               count(*) FILTER (WHERE x.status = 'cancelled') AS cancelled,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM x.finished_at - x.enqueued_at))
                   FILTER (WHERE x.status = 'completed') AS l50,
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM x.finished_at - x.enqueued_at))
                   FILTER (WHERE x.status = 'completed') AS l99,
               (max(extract(epoch FROM x.finished_at - x.enqueued_at)) FILTER (WHERE x.status = 'completed'))::double precision AS lmax,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM x.finished_at - x.attempted_at))
                   FILTER (WHERE x.status = 'completed' AND x.attempted_at IS NOT NULL) AS r50,
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM x.finished_at - x.attempted_at))
                   FILTER (WHERE x.status = 'completed' AND x.attempted_at IS NOT NULL) AS r99
        FROM {{schema}}.job_archive x
        WHERE x.queue_id = q.queue_id AND x.finished_at > now_ts - p_window) w
    ORDER BY q.name;
END $$;
