-- Reverts 016: group_heartbeat as 001 defined it (search_path pinned, as 012 did).

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
    PERFORM {{schema}}._rebalance(t.topic_id, p_group);
    RETURN QUERY
    SELECT v_joined,
           coalesce(array_agg(c.partition ORDER BY c.partition), '{}'),
           coalesce(array_agg(c.owner_epoch ORDER BY c.partition), '{}'),
           coalesce(array_agg(c.next_owner IS NOT NULL ORDER BY c.partition), '{}')
    FROM {{schema}}.group_cursor c
    WHERE c.topic_id = t.topic_id AND c.group_name = p_group AND c.owner = p_member;
END $$;

DROP FUNCTION {{schema}}._group_steady(integer, text);
