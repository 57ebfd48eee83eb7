-- pgmsg 008: the log's claim path without planning.
--
-- Templated like 001.
--
-- claim_range: a claim that returns the claimed range and the segment
-- table that holds it instead of the records. The client then reads the
-- range from that one table with a prepared statement (a generic plan on a
-- plain table: no partition pruning, no planning, no tuplestore, the
-- claim's columns not repeated on every row), and the commit of the
-- previous claim can ride in the same call (one transaction, one WAL flush
-- per claim cycle instead of two). claim(), for callers that want the
-- records in the same round trip, becomes a wrapper of claim_range.
--
-- Publishing keeps plan_cache_mode = force_custom_plan in _append although
-- its INSERT does not need pruning: with a cached generic plan, an insert
-- that routes to a segment another session attached moments before failed
-- with "no partition of relation found for row" (in 2 of 2 tries of
-- TestPublishConcurrentWithRollbacksIsGapless, 64-record segments: a full
-- run and 10 repetitions), where re-planning each call passed 10 of 10.
-- For the same reason _append keeps its UPDATE and INSERT as two
-- statements: planned after the counter row's lock was granted, the INSERT
-- sees segments attached while it waited. One statement reserving and
-- inserting (as the seeds' SQL does) was tried: it is planned before the
-- wait, and routing could then miss a segment another publish had just
-- created in its fallback.

-- _claim_bytes_end returns the last offset of [p_from, p_to] such that the
-- key + value bytes of the records from p_from up to it stay within
-- p_max_bytes; at least the first record (p_from), whatever its size.
-- Planned per call so that the planner prunes the record table to the
-- segments of the range.
CREATE FUNCTION {{schema}}._claim_bytes_end(p_topic_id integer, p_partition integer, p_from bigint, p_to bigint,
                                            p_max_bytes bigint)
RETURNS bigint LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    v_end bigint;
BEGIN
    SELECT max(s.o) INTO v_end FROM (
        SELECT r."offset" AS o, row_number() OVER (ORDER BY r."offset") AS rn,
               sum(coalesce(octet_length(r.value), 0) + coalesce(octet_length(r.key), 0))
                   OVER (ORDER BY r."offset") AS cum
        FROM {{schema}}.record r
        WHERE r.topic_id = p_topic_id AND r.partition = p_partition
          AND r."offset" BETWEEN p_from AND p_to
    ) s WHERE s.cum <= p_max_bytes OR s.rn = 1;
    RETURN coalesce(v_end, p_to);
END $$;

-- claim_range leases the next records of one partition to the caller, as
-- claim() does, but returns one row describing the claim instead of the
-- records: its partition, epoch, expiry, the first and last offset claimed
-- (inclusive), and the segment table that holds all of them (NULL when the
-- range spans two segments, once per segment_records records, no segment
-- covers it, or the caller may not read the segment: then read through the
-- record table). Read the records with
--   SELECT "offset", "timestamp", key, value, headers FROM <schema>.<relname>
--    WHERE topic_id = $1 AND partition = $2 AND "offset" BETWEEN $3 AND $4
--    ORDER BY "offset"
-- (a plain table: the statement runs from a cached generic plan).
-- Offsets missing from the range were removed by compaction; if none is
-- left, commit the claim (that moves the cursor past the range) and claim
-- again. p_commit_partition and p_commit_epoch, when given, first commit
-- that claim of the same group (as commit() does, raising PM008/PM009 if it
-- is no longer held, which rolls back the whole call). p_max_bytes cuts the
-- claim before the record that would take its key + value bytes past it
-- (at least one record). Returns no row when there is nothing to read.
CREATE FUNCTION {{schema}}.claim_range(p_topic text, p_group text, p_max_records integer DEFAULT 100,
                                       p_lease interval DEFAULT '30 seconds', p_partition integer DEFAULT NULL,
                                       p_start text DEFAULT 'earliest', p_member text DEFAULT NULL,
                                       p_require_owner boolean DEFAULT false, p_async boolean DEFAULT false,
                                       p_commit_partition integer DEFAULT NULL, p_commit_epoch bigint DEFAULT NULL,
                                       p_max_bytes bigint DEFAULT NULL)
RETURNS TABLE (partition integer, claim_epoch bigint, claim_expires_at timestamptz, first_offset bigint,
               last_offset bigint, topic_id integer, relname text)
LANGUAGE plpgsql AS $$
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
    IF p_lease IS NULL OR p_lease <= interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'lease must be positive');
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

    -- The epoch is the fencing token; see claim() for why it is at least
    -- the claim time in microseconds.
    c_epoch := greatest(c_epoch + 1, (extract(epoch FROM now_ts) * 1000000)::bigint);
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

-- _segment_create, as in 001, and the new segment is readable by every role
-- that may read the record table: consumers read a claim straight from its
-- segment (claim_range), and a role granted SELECT on the schema's tables
-- before the segment existed would otherwise be refused.
CREATE OR REPLACE FUNCTION {{schema}}._segment_create(p_topic_id integer, p_partition integer, p_lo bigint, p_hi bigint)
RETURNS void LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rel     text := format('record_%s_p%s_%s', p_topic_id, p_partition, p_lo);
    grantee oid;
BEGIN
    EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I)', {{schema_lit}}, rel, {{schema_lit}}, 'record_' || p_topic_id);
    EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%s, %s) TO (%s, %s)',
                   {{schema_lit}}, 'record_' || p_topic_id, {{schema_lit}}, rel,
                   p_partition, p_lo, p_partition, p_hi);
    FOR grantee IN
        SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
         WHERE c.oid = format('%I.record', {{schema_lit}})::regclass
           AND a.privilege_type = 'SELECT' AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT SELECT ON %I.%I TO %s', {{schema_lit}}, rel,
                       CASE WHEN grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(grantee)) END);
    END LOOP;
    INSERT INTO {{schema}}.segment (topic_id, partition, start_offset, end_offset, relname)
    VALUES (p_topic_id, p_partition, p_lo, p_hi, rel);
END $$;


-- claim, as in 001 (same signature and results), now on top of
-- claim_range, the one implementation of a claim: it reads the claimed
-- range through the record table and returns it. A range that compaction
-- emptied is committed in the next claim_range call, which claims again.
CREATE OR REPLACE FUNCTION {{schema}}.claim(p_topic text, p_group text, p_max_records integer DEFAULT 100,
                                            p_lease interval DEFAULT '30 seconds', p_partition integer DEFAULT NULL,
                                            p_max_bytes bigint DEFAULT NULL, p_start text DEFAULT 'earliest',
                                            p_member text DEFAULT NULL, p_require_owner boolean DEFAULT false,
                                            p_async boolean DEFAULT false)
RETURNS TABLE (partition integer, claim_epoch bigint, claim_expires_at timestamptz, "offset" bigint,
               "timestamp" timestamptz, key bytea, value bytea, headers jsonb)
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
DECLARE
    cr    record;
    n     bigint;
    d_par integer;
    d_epo bigint;
BEGIN
    LOOP
        SELECT * INTO cr FROM {{schema}}.claim_range(p_topic, p_group, p_max_records, p_lease, p_partition, p_start,
                                                     p_member, p_require_owner, p_async, d_par, d_epo, p_max_bytes);
        IF cr.partition IS NULL THEN
            RETURN;
        END IF;
        RETURN QUERY
        SELECT r.partition, cr.claim_epoch, cr.claim_expires_at, r."offset", r."timestamp", r.key, r.value, r.headers
        FROM {{schema}}.record r
        WHERE r.topic_id = cr.topic_id AND r.partition = cr.partition
          AND r."offset" BETWEEN cr.first_offset AND cr.last_offset
        ORDER BY r."offset";
        GET DIAGNOSTICS n = ROW_COUNT;
        EXIT WHEN n > 0;
        d_par := cr.partition;
        d_epo := cr.claim_epoch;
    END LOOP;
END $$;

-- segment_ensure, as in 001, but it waits (up to its 200 ms lock_timeout)
-- for a publisher's counter row instead of skipping it. Skipping starved it
-- under a steady publish load: the background creation kept answering
-- "busy" while publishers used up the segments ahead, until a publish had
-- to create one itself, holding its counter row while it waited for the
-- topic's lock; two such publishes in multi-partition transactions
-- deadlock (seen in TestPublishConcurrentWithRollbacksIsGapless on a
-- loaded machine).
CREATE OR REPLACE FUNCTION {{schema}}.segment_ensure(p_topic text, p_partition integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    t       {{schema}}.topic := {{schema}}._topic(p_topic);
    tp      {{schema}}.topic_partition;
    seg_end bigint;
BEGIN
    IF p_partition IS NULL OR p_partition < 0 OR p_partition >= t.partitions THEN
        PERFORM {{schema}}._raise('PM005', format('partition %s out of range: topic %s has %s partitions',
                                                  coalesce(p_partition::text, 'NULL'), quote_literal(t.name), t.partitions));
    END IF;
    -- This is background work: give way rather than wait. A short
    -- lock_timeout makes it the one that yields when DDL on the topic
    -- (topic_delete) queues behind its lock; busy means try again later.
    PERFORM set_config('lock_timeout', '200ms', true);
    BEGIN
        PERFORM {{schema}}._segment_lock(t.topic_id);
        -- Wait for the publisher holding the counter row, but no longer
        -- than lock_timeout: it may be a long transaction, or one that
        -- itself waits for this call's topic lock (a publish creating a
        -- segment in its fallback); the timeout ends that wait long before
        -- deadlock detection would.
        SELECT * INTO tp FROM {{schema}}.topic_partition c
         WHERE c.topic_id = t.topic_id AND c.partition = p_partition FOR UPDATE;
        seg_end := {{schema}}._segment_ensure(t.topic_id, p_partition, tp.segment_end, t.segment_records, tp.next_offset);
    EXCEPTION WHEN lock_not_available THEN
        RETURN -1;
    END;
    RETURN ((seg_end - tp.segment_end) / t.segment_records)::integer;
END $$;
