-- pgmsg 013: job claims start where the session's last claim ended (issue 13).
--
-- Templated like 001.
--
-- Why. A claim turns waiting jobs into running ones: each claimed job leaves
-- its waiting row version, and that version's entry in the job_claim index,
-- behind. Vacuum removes them only once no snapshot can still see them, and
-- until then every claim walked them from the front of the index, checking
-- each against the heap. With a REPEATABLE READ transaction open for a
-- minute (an analytics query, pg_dump, a replica's hot_standby_feedback),
-- that is every job claimed in the minute, on every claim: 32 workers fell
-- from 12k to 1.3k jobs/s. Without an old snapshot the walk still grew
-- between two autovacuums (5.8k to 3.8k jobs/s in 20 s).
--
-- What. job_claim remembers, per session and queue, the claim position of
-- the last job it handed out (priority, run_at, id) in a session setting
-- (no row is written for it), and the next claim on that session reads the
-- job_claim index from there: first any claimable job of a higher priority,
-- then the same priority after the position, then lower priorities. The
-- jobs behind the position are, nearly always, exactly the ones already
-- claimed, so the claim no longer walks them.
--
-- Nothing is skipped for good. A waiting job can sort behind a session's
-- position when its enqueue committed late (a long transaction), when its
-- run_at was set in the past, or when a concurrent claim that had locked it
-- rolled back. The claim reads the whole index, in claim order, as before,
-- whenever the positioned read finds fewer jobs than asked for, when the
-- session has no position yet, and at least once a second per session, so
-- such a job is claimed within about a second even behind a backlog.
--
-- The same applies to the probe for expired leases: it ran on every claim
-- and walks the dead versions of finished jobs' leases once they are older
-- than the lease; it now runs at most once a second per session. Maintenance
-- (queue.rescue) still rescues every queue on its own schedule.
--
-- Same result: only the order in which two jobs of equal priority are
-- handed out can differ, by at most a second, for a job that became
-- claimable behind the position.
--
-- And a trailing p_async (default false), as claim_range has: a claim that
-- is its own transaction may commit without waiting for its WAL flush. A
-- claim is a lease; if a crash loses it, its jobs are claimed again, which
-- at-least-once allows (a completion, always synchronous, flushes the claim
-- before it). Callers pass true only for a claim that is not part of a
-- transaction of theirs, since the setting lasts to the end of the
-- transaction. The Go client does so for ClaimJobs (not ClaimJobsTx).

DROP FUNCTION {{schema}}.job_claim(text, integer, interval, text, bigint);

CREATE FUNCTION {{schema}}.job_claim(p_queue text, p_limit integer DEFAULT 1, p_lease interval DEFAULT NULL,
                                     p_worker text DEFAULT NULL, p_max_bytes bigint DEFAULT NULL,
                                     p_async boolean DEFAULT false)
RETURNS TABLE (id bigint, queue text, kind text, payload bytea, priority integer, attempt integer,
               max_attempts integer, lease_token bigint, lease_expires_at timestamptz, run_at timestamptz,
               enqueued_at timestamptz, attempted_at timestamptz, unique_key text, errors jsonb)
LANGUAGE plpgsql
-- Pin the plan to the ordered scans of job_claim (see 002).
SET enable_bitmapscan = off SET enable_seqscan = off SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    q        {{schema}}.queue := {{schema}}._queue(p_queue);
    now_ts   timestamptz := clock_timestamp();
    now_s    bigint := floor(extract(epoch FROM now_ts))::bigint;
    expires  timestamptz;
    -- Session settings: the position ("priority|run_at in microseconds|id")
    -- and the second of the last full read and of the last lease probe.
    tag      text := md5({{schema_lit}} || '/' || q.queue_id);
    pos_name text := 'pgmsg_claim.p' || tag;
    full_name text := 'pgmsg_claim.f' || tag;
    probe_name text := 'pgmsg_claim.r' || tag;
    pos      text[] := string_to_array(nullif(current_setting(pos_name, true), ''), '|');
    h_pri    smallint;
    h_run    timestamptz;
    h_id     bigint;
    ids      bigint[];
    pris     smallint[];
    runs     timestamptz[];
    sizes    bigint[];
    n        integer;
    cum      bigint := 0;
    token0   bigint;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'limit must be at least 1');
    END IF;
    IF p_lease IS NOT NULL AND p_lease <= interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive');
    END IF;
    IF p_max_bytes IS NOT NULL AND p_max_bytes < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'max_bytes must be at least 1');
    END IF;
    IF p_async THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    expires := now_ts + coalesce(p_lease, q.lease);
    -- Expired leases: one probe of the small job_lease index, at most once
    -- a second per session.
    IF coalesce(nullif(current_setting(probe_name, true), '')::bigint, 0) <> now_s THEN
        PERFORM set_config(probe_name, now_s::text, false);
        IF EXISTS (SELECT 1 FROM {{schema}}.job j
                   WHERE j.queue_id = q.queue_id AND j.state = 'running' AND j.lease_expires_at <= now_ts) THEN
            PERFORM {{schema}}._rescue(q.queue_id, now_ts, 1000);
        END IF;
    END IF;

    IF cardinality(pos) = 3 AND coalesce(nullif(current_setting(full_name, true), '')::bigint, 0) = now_s THEN
        h_pri := pos[1]::smallint;
        h_run := to_timestamp(pos[2]::bigint / 1000000) + (pos[2]::bigint % 1000000) * interval '1 microsecond';
        h_id := pos[3]::bigint;
        -- Three ordered reads of the index, run one after the other only
        -- as far as needed (a CTE is read as the statement asks for rows).
        WITH hi AS (
            SELECT j.id, j.priority, j.run_at, octet_length(j.payload)::bigint AS n FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
               AND j.priority > h_pri AND j.run_at <= now_ts
             ORDER BY j.priority DESC, j.run_at, j.id
             LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), eq AS (
            SELECT j.id, j.priority, j.run_at, octet_length(j.payload)::bigint AS n FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
               AND j.priority = h_pri AND (j.run_at, j.id) > (h_run, h_id) AND j.run_at <= now_ts
             ORDER BY j.run_at, j.id
             LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), lo AS (
            SELECT j.id, j.priority, j.run_at, octet_length(j.payload)::bigint AS n FROM {{schema}}.job j
             WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
               AND j.priority < h_pri AND j.run_at <= now_ts
             ORDER BY j.priority DESC, j.run_at, j.id
             LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), x AS (
            SELECT hi.*, 1 AS b FROM hi UNION ALL SELECT eq.*, 2 FROM eq UNION ALL SELECT lo.*, 3 FROM lo
            LIMIT p_limit
        )
        SELECT array_agg(x.id ORDER BY x.b, x.priority DESC, x.run_at, x.id),
               array_agg(x.priority ORDER BY x.b, x.priority DESC, x.run_at, x.id),
               array_agg(x.run_at ORDER BY x.b, x.priority DESC, x.run_at, x.id),
               array_agg(x.n ORDER BY x.b, x.priority DESC, x.run_at, x.id)
          INTO ids, pris, runs, sizes
          FROM x;
    END IF;
    IF coalesce(cardinality(ids), 0) < p_limit THEN
        -- The whole index in claim order. Rows the positioned read locked
        -- are ours, so they are found again where they belong.
        PERFORM set_config(full_name, now_s::text, false);
        SELECT array_agg(c.id ORDER BY c.priority DESC, c.run_at, c.id),
               array_agg(c.priority ORDER BY c.priority DESC, c.run_at, c.id),
               array_agg(c.run_at ORDER BY c.priority DESC, c.run_at, c.id),
               array_agg(c.n ORDER BY c.priority DESC, c.run_at, c.id)
          INTO ids, pris, runs, sizes
          FROM (SELECT j.id, j.priority, j.run_at, octet_length(j.payload)::bigint AS n FROM {{schema}}.job j
                 WHERE j.queue_id = q.queue_id AND j.state IN ('available', 'scheduled', 'retrying')
                   AND j.run_at <= now_ts
                 ORDER BY j.priority DESC, j.run_at, j.id
                 LIMIT p_limit FOR UPDATE SKIP LOCKED) c;
    END IF;
    n := coalesce(cardinality(ids), 0);
    IF n = 0 THEN
        RETURN;
    END IF;
    -- The byte cap: the longest prefix, in claim order, whose payloads fit,
    -- and at least the first job. Rows cut stay as they were (locked only
    -- until this transaction ends).
    IF p_max_bytes IS NOT NULL THEN
        FOR i IN 1 .. n LOOP
            cum := cum + coalesce(sizes[i], 0);
            IF cum > p_max_bytes AND i > 1 THEN
                n := i - 1;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    -- One random draw per claim (gen_random_uuid, some 12 us, was one per
    -- job): job k of the claim gets token0 + k, wrapped into [1, 2^53-1].
    -- Every job of a claim goes to the same claimer, so knowing one of its
    -- tokens tells nothing about another claim's.
    token0 := {{schema}}._lease_token();
    PERFORM set_config(pos_name, pris[n] || '|' || (extract(epoch FROM runs[n]) * 1000000)::bigint || '|' || ids[n], false);
    RETURN QUERY
    WITH u AS (
        UPDATE {{schema}}.job j
           SET state = 'running', attempt = j.attempt + 1, lease_token = (token0 + k.ord - 1) % 9007199254740991 + 1,
               lease_expires_at = expires, attempted_at = now_ts, worker = p_worker
          FROM unnest(ids[1:n]) WITH ORDINALITY AS k(id, ord)
         WHERE j.id = k.id
        RETURNING k.ord, j.id, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.lease_token,
                  j.lease_expires_at, j.run_at, j.enqueued_at, j.attempted_at, j.unique_key, j.errors
    )
    SELECT u.id, q.name, u.kind, u.payload, u.priority::integer, u.attempt, u.max_attempts, u.lease_token,
           u.lease_expires_at, u.run_at, u.enqueued_at, u.attempted_at, u.unique_key, u.errors
    FROM u
    ORDER BY u.ord;
END $$;
