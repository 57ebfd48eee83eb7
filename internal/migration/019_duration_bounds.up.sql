-- 019: upper bounds on durations (issue 14).
--
-- Leases, session timeouts, retry backoffs and waits were only checked to
-- be positive (or not negative). A lease of '9000 years' was accepted and
-- made claim_expires_at or lease_expires_at a year past 9999, which JSON
-- (RFC 3339) and most languages cannot represent: every HTTP answer that
-- showed it failed to encode (a 500). Extreme values overflowed the
-- timestamp arithmetic (22008), and queue settings past 292 years did not
-- fit Go's time.Duration when read back. 009 bounded the timestamps and
-- delays a client gives (run_at, snooze and retry delays: up to the UTC
-- year 9999, PM004/PM104); 019 bounds the rest, with PM004, nothing
-- written:
--
--   at most 366 days  claim lease (claim, claim_range, extend), job lease
--                     (job_claim, job_extend, job_extend_many, queue
--                     lease), session timeout (group_heartbeat), queue
--                     retry_backoff, retry_backoff_max and
--                     backpressure_timeout, topic backpressure_timeout_ms
--   at most 36525 days (100 years)  queue archive_retention (pruning
--                     computes now - archive_retention)
--
-- 366 days, not '1 year': PostgreSQL counts a year of an interval as 360
-- days, so 365 * 24h from Go would be refused. Queue rows already past a
-- bound are brought down to it, once, below (down does not restore them).
-- Maintenance inputs (archive_prune, dead_purge, group_expire,
-- maintenance_events_prune) only look back from now; an extreme one fails
-- with 22008, a 400 over HTTP, and affects nothing else.

-- claim_range as 018 defined it, plus the lease's upper bound.
CREATE OR REPLACE FUNCTION {{schema}}.claim_range(p_topic text, p_group text, p_max_records integer DEFAULT 100, p_lease interval DEFAULT '00:00:30'::interval, p_partition integer DEFAULT NULL::integer, p_start text DEFAULT 'earliest'::text, p_member text DEFAULT NULL::text, p_require_owner boolean DEFAULT false, p_async boolean DEFAULT false, p_commit_partition integer DEFAULT NULL::integer, p_commit_epoch bigint DEFAULT NULL::bigint, p_max_bytes bigint DEFAULT NULL::bigint)
 RETURNS TABLE(partition integer, claim_epoch bigint, claim_expires_at timestamp with time zone, first_offset bigint, last_offset bigint, topic_id integer, relname text)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
-- Written for the fewest statements on the path that claims: the checks
-- that only matter when nothing can be claimed (does the group exist, is
-- the member in it, is the partition assigned to it) run only then. That
-- is equivalent to checking first: a cursor row names a member as its
-- owner only while the member's row exists (group_heartbeat, group_leave
-- and _rebalance clear the owner in the transaction that removes the
-- member), so a row claimed under p_require_owner proves membership.
#variable_conflict use_column
DECLARE
    v_topic  integer;
    v_parts  integer;
    now_ts   timestamptz := clock_timestamp();
    c_part   integer;
    c_next   bigint;
    c_epoch  bigint;
    tip      bigint;
    v_last   bigint;
    seg_rel  text;
    seg_end  bigint;
    d_part   integer;  -- the partition whose claim this call commits
    d_epoch  bigint;
    d_end    bigint;
    d_exp    timestamptz;
    done_to  bigint;   -- where that commit moves its cursor
    created  boolean := false;
BEGIN
    IF p_max_records IS NULL OR p_max_records < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'max_records must be at least 1');
    END IF;
    IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '366 days' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive and at most 366 days');
    END IF;
    SELECT tt.topic_id, tt.partitions INTO v_topic, v_parts FROM {{schema}}.topic tt WHERE tt.name = p_topic;
    IF NOT FOUND THEN
        PERFORM {{schema}}._topic(p_topic);  -- raises PM001
    END IF;
    IF p_partition IS NOT NULL AND (p_partition < 0 OR p_partition >= v_parts) THEN
        PERFORM {{schema}}._raise('PM005', format('partition %s out of range: topic %s has %s partitions',
                                                  p_partition, quote_literal(p_topic), v_parts));
    END IF;
    IF p_commit_epoch IS NOT NULL THEN
        -- Lock and check the claim to commit; its cursor row is written once
        -- below: together with the new claim when that is on the same
        -- partition (a member that owns one partition writes one row version
        -- per claim cycle), else alone.
        SELECT c.claim_epoch, c.claim_end, c.claim_expires_at INTO d_epoch, d_end, d_exp
        FROM {{schema}}.group_cursor c
        WHERE c.topic_id = v_topic AND c.group_name = p_group AND c.partition = p_commit_partition
        FOR UPDATE;
        IF NOT FOUND OR d_epoch IS DISTINCT FROM p_commit_epoch OR d_exp IS NULL OR d_exp <= now_ts THEN
            -- Not held: _held raises the error commit() would (PM007/PM008/PM009).
            PERFORM {{schema}}._held(p_topic, p_group, p_commit_partition, p_commit_epoch);
        END IF;
        d_part := p_commit_partition;
        done_to := d_end + 1;
    END IF;

    LOOP
        -- The partition being committed counts as committed: unclaimed, its
        -- cursor at done_to (and, claimed most recently, picked last among
        -- the group's partitions with records).
        IF p_partition IS NOT NULL THEN
            -- One cursor row by its whole key (a plan that cannot mix up
            -- "any partition" with "this one" and visit every row of the
            -- group, and the versions a long snapshot keeps of them).
            SELECT c.partition, CASE WHEN c.partition = d_part THEN done_to ELSE c.next_offset END,
                   c.claim_epoch, tp.next_offset INTO c_part, c_next, c_epoch, tip
            FROM {{schema}}.group_cursor c
            JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
            WHERE c.topic_id = v_topic AND c.group_name = p_group AND c.partition = p_partition
              AND (NOT p_require_owner OR (c.owner = p_member AND c.next_owner IS NULL))
              AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now_ts OR c.partition = d_part)
              AND tp.next_offset > CASE WHEN c.partition = d_part THEN done_to ELSE c.next_offset END
            FOR UPDATE OF c SKIP LOCKED;
        ELSE
            SELECT c.partition, CASE WHEN c.partition = d_part THEN done_to ELSE c.next_offset END,
                   c.claim_epoch, tp.next_offset INTO c_part, c_next, c_epoch, tip
            FROM {{schema}}.group_cursor c
            JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
            WHERE c.topic_id = v_topic AND c.group_name = p_group
              AND (NOT p_require_owner OR (c.owner = p_member AND c.next_owner IS NULL))
              AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now_ts OR c.partition = d_part)
              AND tp.next_offset > CASE WHEN c.partition = d_part THEN done_to ELSE c.next_offset END
            ORDER BY c.claimed_at NULLS FIRST, c.partition
            LIMIT 1
            FOR UPDATE OF c SKIP LOCKED;
        END IF;
        EXIT WHEN FOUND;

        IF d_part IS NOT NULL THEN
            UPDATE {{schema}}.group_cursor c
               SET next_offset = done_to, claim_start = NULL, claim_end = NULL, claim_expires_at = NULL,
                   claim_owner = NULL, committed_at = now_ts
             WHERE c.topic_id = v_topic AND c.group_name = p_group AND c.partition = d_part;
            d_part := NULL;
        END IF;
        -- Nothing to claim: now the checks that explain why, or create the
        -- group and look again.
        IF NOT created AND NOT EXISTS (SELECT 1 FROM {{schema}}.consumer_group g
                                        WHERE g.topic_id = v_topic AND g.group_name = p_group) THEN
            PERFORM {{schema}}.group_create(p_topic, p_group, p_start);
            created := true;
            CONTINUE;
        END IF;
        IF p_require_owner THEN
            IF NOT EXISTS (SELECT 1 FROM {{schema}}.group_member m WHERE m.topic_id = v_topic
                           AND m.group_name = p_group AND m.member_id = p_member) THEN
                PERFORM {{schema}}._raise('PM013', format('member %s is not in group %s (left, or its session expired): heartbeat to rejoin',
                                                          left(quote_literal(coalesce(p_member, '')), 210), quote_literal(p_group)));
            END IF;
            IF p_partition IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM {{schema}}.group_cursor c WHERE c.topic_id = v_topic AND c.group_name = p_group
                   AND c.partition = p_partition AND c.owner = p_member AND c.next_owner IS NULL) THEN
                PERFORM {{schema}}._raise('PM012', format('partition %s of topic %s is not assigned to member %s',
                                                          p_partition, quote_literal(p_topic), left(quote_literal(p_member), 210)));
            END IF;
        END IF;
        RETURN;
    END LOOP;

    IF p_async AND d_part IS NULL AND p_commit_epoch IS NULL AND NOT created THEN
        -- As in claim(): a lease lost in a crash is only a redelivery. Not
        -- when a commit rides along (commits are always synchronous) and not
        -- when this call created the group (its start must be durable).
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF d_part IS NOT NULL AND c_part <> d_part THEN
        UPDATE {{schema}}.group_cursor c
           SET next_offset = done_to, claim_start = NULL, claim_end = NULL, claim_expires_at = NULL,
               claim_owner = NULL, committed_at = now_ts
         WHERE c.topic_id = v_topic AND c.group_name = p_group AND c.partition = d_part;
    END IF;

    v_last := least(tip - 1, c_next + p_max_records - 1);
    IF p_max_bytes IS NOT NULL THEN
        v_last := {{schema}}._claim_bytes_end(v_topic, c_part, c_next, v_last, p_max_bytes);
    END IF;
    SELECT s.relname, s.end_offset INTO seg_rel, seg_end FROM {{schema}}.segment s
     WHERE s.topic_id = v_topic AND s.partition = c_part AND s.start_offset <= c_next
     ORDER BY s.start_offset DESC LIMIT 1;
    IF NOT FOUND OR seg_end <= v_last
       OR NOT has_table_privilege(format('%I.%I', {{schema_lit}}, seg_rel), 'SELECT') THEN
        -- No segment, the range spans two, or the caller may read the record
        -- table but not this segment (a role granted table by table before
        -- the segment existed): read through the record table.
        seg_rel := NULL;
    END IF;

    -- The epoch is the claim's fencing token: random, never the one it
    -- replaces (018).
    c_epoch := {{schema}}._claim_token(c_epoch);
    claim_expires_at := now_ts + p_lease;
    UPDATE {{schema}}.group_cursor c
       SET next_offset = c_next, claim_epoch = c_epoch, claim_start = c_next,
           claim_end = v_last, claim_expires_at = claim_range.claim_expires_at,
           claim_owner = p_member, claimed_at = now_ts,
           committed_at = CASE WHEN c_part = d_part THEN now_ts ELSE c.committed_at END
     WHERE c.topic_id = v_topic AND c.group_name = p_group AND c.partition = c_part;
    partition := c_part;
    claim_epoch := c_epoch;
    first_offset := c_next;
    last_offset := v_last;
    topic_id := v_topic;
    relname := seg_rel;
    RETURN NEXT;
END $$;

-- extend as 001 defined it (search_path pinned by 012), plus the lease's
-- upper bound, checked before the expiry is computed (an extreme lease
-- overflowed it with 22008).
CREATE OR REPLACE FUNCTION {{schema}}.extend(p_topic text, p_group text, p_partition integer, p_claim_epoch bigint, p_lease interval DEFAULT '00:00:30'::interval)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
DECLARE
    cur {{schema}}.group_cursor := {{schema}}._held(p_topic, p_group, p_partition, p_claim_epoch);
    expires timestamptz;
BEGIN
    IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '366 days' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive and at most 366 days');
    END IF;
    expires := clock_timestamp() + p_lease;
    UPDATE {{schema}}.group_cursor c SET claim_expires_at = expires
     WHERE c.topic_id = cur.topic_id AND c.group_name = cur.group_name AND c.partition = cur.partition;
    RETURN expires;
END $$;

-- job_claim as 013 defined it, plus the lease's upper bound.
CREATE OR REPLACE FUNCTION {{schema}}.job_claim(p_queue text, p_limit integer DEFAULT 1, p_lease interval DEFAULT NULL::interval, p_worker text DEFAULT NULL::text, p_max_bytes bigint DEFAULT NULL::bigint, p_async boolean DEFAULT false)
 RETURNS TABLE(id bigint, queue text, kind text, payload bytea, priority integer, attempt integer, max_attempts integer, lease_token bigint, lease_expires_at timestamp with time zone, run_at timestamp with time zone, enqueued_at timestamp with time zone, attempted_at timestamp with time zone, unique_key text, errors jsonb)
 LANGUAGE plpgsql
 SET enable_bitmapscan TO 'off'
 SET enable_seqscan TO 'off'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
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
    IF p_lease IS NOT NULL AND (p_lease <= interval '0' OR p_lease > interval '366 days') THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive and at most 366 days');
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

-- job_extend_many as 002 defined it (search_path pinned by 012), plus the
-- lease's upper bound (job_extend calls it).
CREATE OR REPLACE FUNCTION {{schema}}.job_extend_many(p_ids bigint[], p_tokens bigint[], p_lease interval DEFAULT NULL::interval)
 RETURNS TABLE(id bigint, lease_expires_at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
#variable_conflict use_column
DECLARE
    now_ts timestamptz := clock_timestamp();
BEGIN
    IF p_lease IS NOT NULL AND (p_lease <= interval '0' OR p_lease > interval '366 days') THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive and at most 366 days');
    END IF;
    RETURN QUERY
    UPDATE {{schema}}.job j
       SET lease_expires_at = now_ts + coalesce(p_lease, q.lease)
      FROM unnest(p_ids, p_tokens) AS u(id, token), {{schema}}.queue q
     WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running' AND q.queue_id = j.queue_id
    RETURNING j.id, j.lease_expires_at;
END $$;

-- _queue_check (queue_create, queue_update) as 005 defined it (search_path
-- pinned by 012), plus upper bounds.
CREATE OR REPLACE FUNCTION {{schema}}._queue_check(q {{schema}}.queue)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
BEGIN
    IF q.max_attempts IS NULL OR q.max_attempts < 1 THEN
        PERFORM {{schema}}._raise('PM105', format('max_attempts must be at least 1, got %s', coalesce(q.max_attempts::text, 'NULL')));
    END IF;
    IF q.lease IS NULL OR q.lease <= interval '0' OR q.lease > interval '366 days' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive and at most 366 days');
    END IF;
    IF q.retry_backoff IS NULL OR q.retry_backoff < interval '0' OR q.retry_backoff_max IS NULL
       OR q.retry_backoff_max < interval '0' OR q.retry_backoff > interval '366 days'
       OR q.retry_backoff_max > interval '366 days' THEN
        PERFORM {{schema}}._raise('PM004', 'retry_backoff and retry_backoff_max must be from 0 to 366 days');
    END IF;
    IF q.archive_retention IS NULL OR q.archive_retention < interval '0' OR q.archive_retention > interval '36525 days' THEN
        PERFORM {{schema}}._raise('PM004', 'archive_retention must be from 0 to 36525 days (100 years)');
    END IF;
    IF q.max_payload_bytes IS NULL OR q.max_payload_bytes < 1 THEN
        PERFORM {{schema}}._raise('PM004', 'max_payload_bytes must be at least 1');
    END IF;
    IF q.max_depth < 1 THEN
        PERFORM {{schema}}._raise('PM004', format('max_depth must be at least 1 (0 or NULL: no limit), got %s', q.max_depth));
    END IF;
    IF q.backpressure_timeout IS NULL OR q.backpressure_timeout < interval '0'
       OR q.backpressure_timeout > interval '366 days' THEN
        PERFORM {{schema}}._raise('PM004', 'backpressure_timeout must be from 0 to 366 days');
    END IF;
END $$;

-- group_heartbeat as 016 defined it, plus the session timeout's upper bound.
CREATE OR REPLACE FUNCTION {{schema}}.group_heartbeat(p_topic text, p_group text, p_member text, p_session_timeout interval DEFAULT '00:00:10'::interval, p_start text DEFAULT 'earliest'::text)
 RETURNS TABLE(joined boolean, partitions integer[], owner_epochs bigint[], revoking boolean[])
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
DECLARE
    t        {{schema}}.topic := {{schema}}._topic(p_topic);
    v_joined boolean;
BEGIN
    PERFORM {{schema}}._check_name('member', p_member);
    IF p_session_timeout IS NULL OR p_session_timeout <= interval '0' OR p_session_timeout > interval '366 days' THEN
        PERFORM {{schema}}._raise('PM004', 'session timeout must be positive and at most 366 days');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group) THEN
        PERFORM {{schema}}.group_create(p_topic, p_group, p_start);
    END IF;
    PERFORM 1 FROM {{schema}}.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name = p_group FOR UPDATE;
    UPDATE {{schema}}.group_member m SET heartbeat_at = clock_timestamp(), session_timeout = p_session_timeout
     WHERE m.topic_id = t.topic_id AND m.group_name = p_group AND m.member_id = p_member
       AND m.heartbeat_at + m.session_timeout >= clock_timestamp();
    v_joined := NOT FOUND;
    IF v_joined THEN
        -- New, or dead and not yet removed: (re)join with a clean slate.
        DELETE FROM {{schema}}.group_member m
         WHERE m.topic_id = t.topic_id AND m.group_name = p_group AND m.member_id = p_member;
        UPDATE {{schema}}.group_cursor c
           SET claim_epoch = c.claim_epoch + 1, claim_start = NULL, claim_end = NULL,
               claim_expires_at = NULL, claim_owner = NULL
         WHERE c.topic_id = t.topic_id AND c.group_name = p_group
           AND c.claim_expires_at > clock_timestamp() AND c.claim_owner = p_member;
        UPDATE {{schema}}.group_cursor c SET owner = NULL, next_owner = NULL
         WHERE c.topic_id = t.topic_id AND c.group_name = p_group AND (c.owner = p_member OR c.next_owner = p_member);
        INSERT INTO {{schema}}.group_member (topic_id, group_name, member_id, joined_at, heartbeat_at, session_timeout)
        VALUES (t.topic_id, p_group, p_member, clock_timestamp(), clock_timestamp(), p_session_timeout);
    END IF;
    -- A steady group (no member past its session, every partition owned by
    -- a live member and none being handed over, owners' counts within one
    -- of each other) is what _rebalance would leave unchanged: skip it.
    IF v_joined OR NOT {{schema}}._group_steady(t.topic_id, p_group) THEN
        PERFORM {{schema}}._rebalance(t.topic_id, p_group);
    END IF;
    RETURN QUERY
    SELECT v_joined,
           coalesce(array_agg(c.partition ORDER BY c.partition), '{}'),
           coalesce(array_agg(c.owner_epoch ORDER BY c.partition), '{}'),
           coalesce(array_agg(c.next_owner IS NOT NULL ORDER BY c.partition), '{}')
    FROM {{schema}}.group_cursor c
    WHERE c.topic_id = t.topic_id AND c.group_name = p_group AND c.owner = p_member;
END $$;

-- _check_topic_settings (topic_create, topic_configure) as 005 defined it
-- (search_path pinned by 012), plus an upper bound on
-- backpressure_timeout_ms (366 days; Go reads it as a time.Duration).
CREATE OR REPLACE FUNCTION {{schema}}._check_topic_settings(p_config jsonb)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $$
DECLARE
    k  text;
    v  bigint;
    lo bigint;
    hi bigint;
BEGIN
    FOREACH k IN ARRAY ARRAY['max_lag_records', 'max_lag_bytes', 'backpressure_timeout_ms'] LOOP
        CONTINUE WHEN NOT p_config ? k OR jsonb_typeof(p_config->k) = 'null';
        lo := CASE WHEN k = 'backpressure_timeout_ms' THEN 0 ELSE 1 END;
        hi := CASE WHEN k = 'backpressure_timeout_ms' THEN 31622400000 END;  -- 366 days
        BEGIN
            v := (p_config->>k)::bigint;
        EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
            v := NULL;
        END;
        IF v IS NULL OR v < lo OR v > hi THEN
            PERFORM {{schema}}._raise('PM004', format('%s must be an integer %s, got %s', k,
                                                      CASE WHEN hi IS NULL THEN format('of at least %s', lo)
                                                           ELSE format('from %s to %s', lo, hi) END,
                                                      left(p_config->>k, 60)));
        END IF;
    END LOOP;
END $$;

UPDATE {{schema}}.queue
   SET lease = least(lease, interval '366 days'),
       retry_backoff = least(retry_backoff, interval '366 days'),
       retry_backoff_max = least(retry_backoff_max, interval '366 days'),
       backpressure_timeout = least(backpressure_timeout, interval '366 days'),
       archive_retention = least(archive_retention, interval '36525 days')
 WHERE lease > interval '366 days' OR retry_backoff > interval '366 days'
    OR retry_backoff_max > interval '366 days' OR backpressure_timeout > interval '366 days'
    OR archive_retention > interval '36525 days';
