-- 016: a heartbeat of a steady group does not rebalance (issue 12).
--
-- Every member heartbeats once a second and every heartbeat ran
-- _rebalance, a dozen statements, some of them UPDATEs of the group's
-- cursor rows: under the mixed benchmark's load (5 groups of 4 members)
-- heartbeats took 3.3 ms each, about 3 % of the server's time, to change
-- nothing. _group_steady tells, in one read, whether _rebalance would
-- change anything; a heartbeat that joins, or finds the group unsteady,
-- still runs it, under the group's row lock as before.

-- _group_steady: no member of the group is past its session timeout, every
-- cursor row is owned by a member and none is being handed over, and the
-- members' partition counts differ by at most one. That is the fixed point
-- of _rebalance: it deletes no member, frees nothing, and every member's
-- quota (base or base + 1, the larger ones to the members owning the most)
-- equals what it owns.
CREATE FUNCTION {{schema}}._group_steady(p_topic_id integer, p_group text) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN coalesce((
        WITH m AS (
            SELECT m.member_id, m.heartbeat_at + m.session_timeout >= clock_timestamp() AS alive
              FROM {{schema}}.group_member m
             WHERE m.topic_id = p_topic_id AND m.group_name = p_group
        ), c AS (
            SELECT c.owner, (c.owner IS NOT NULL AND c.next_owner IS NULL
                             AND EXISTS (SELECT 1 FROM m WHERE m.member_id = c.owner)) AS settled
              FROM {{schema}}.group_cursor c
             WHERE c.topic_id = p_topic_id AND c.group_name = p_group
        ), counts AS (
            SELECT (SELECT count(*) FROM c WHERE c.owner = m.member_id) AS n FROM m
        )
        SELECT (SELECT bool_and(alive) FROM m)
           AND coalesce((SELECT bool_and(settled) FROM c), true)
           AND (SELECT max(n) - min(n) <= 1 FROM counts)
    ), false);
END $$;

CREATE OR REPLACE FUNCTION {{schema}}.group_heartbeat(p_topic text, p_group text, p_member text,
                                           p_session_timeout interval DEFAULT '10 seconds',
                                           p_start text DEFAULT 'earliest')
RETURNS TABLE (joined boolean, partitions integer[], owner_epochs bigint[], revoking boolean[])
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t        {{schema}}.topic := {{schema}}._topic(p_topic);
    v_joined boolean;
BEGIN
    PERFORM {{schema}}._check_name('member', p_member);
    IF p_session_timeout IS NULL OR p_session_timeout <= interval '0' THEN
        PERFORM {{schema}}._raise('PM004', 'session timeout must be positive');
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
