-- Reverts 018: claim_range assigns time-based epochs again, as 008 defined
-- it (search_path pinned by 012).

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

DROP FUNCTION {{schema}}._claim_token(bigint);
