-- pgmsg 004: operating the log — retention by dropping segments, group
-- expiry, compaction, and the event log that makes each of them visible.
-- Run by the maintenance leader (Client.RunMaintenance, `pgmsg maintenance`).

CREATE TABLE {{schema}}.maintenance_event (
    event_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind       text        NOT NULL,   -- retention_drop, retention_skip, group_expired, compacted
    topic      text        NOT NULL,
    group_name text,
    partition  integer,
    detail     jsonb       NOT NULL DEFAULT '{}'
);

-- _setting reads a numeric topic setting; NULL when absent or not a number.
CREATE FUNCTION {{schema}}._setting(p_config jsonb, p_key text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN (p_config->>p_key)::bigint;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END $$;

-- _segment_bytes: on-disk size of one segment (heap, index, TOAST).
CREATE FUNCTION {{schema}}._segment_bytes(p_relname text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT pg_total_relation_size(format('%I.%I', {{schema_lit}}, p_relname)::regclass)
$$;

-- retention_run drops at most p_max_segments segments, oldest first, and
-- returns what it dropped. Per topic settings (all optional):
--   retention_ms / retention_bytes / retention_records  soft limits: the
--     oldest closed segment of a partition is dropped once one is exceeded
--     (its newest record is older than retention_ms; or the partition keeps
--     at least retention_bytes / retention_records without it) AND every
--     group of the topic has committed past it;
--   hard_limit_ms / hard_limit_bytes / hard_limit_records  caps: when one
--     is exceeded the segment goes even if a group has not read it; such
--     groups jump to the segment's end and their skipped count grows.
-- Dropping is DROP TABLE: no DELETE, no dead tuples, no vacuum work. Each
-- drop runs under a savepoint with lock_timeout 500ms: a segment whose
-- lock is busy (a long transaction reading it) is left for the next run.
CREATE FUNCTION {{schema}}.retention_run(p_max_segments integer DEFAULT 16)
RETURNS TABLE (topic text, partition integer, start_offset bigint, end_offset bigint, reason text, skipped bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    seg      record;
    n        integer := 0;
    tip      bigint;
    slowest  bigint;
    last_ts  timestamptz;
    p_bytes  bigint;
    s_bytes  bigint;
    soft     boolean;
    hard     boolean;
    why      text;
    v_skip   bigint;
BEGIN
    PERFORM set_config('lock_timeout', '500ms', true);
    FOR seg IN
        SELECT s.topic_id, s.partition, s.start_offset, s.end_offset, s.relname, t.name, t.config
        FROM {{schema}}.segment s
        JOIN {{schema}}.topic t ON t.topic_id = s.topic_id
        JOIN {{schema}}.topic_partition tp ON tp.topic_id = s.topic_id AND tp.partition = s.partition
        WHERE s.start_offset = tp.start_offset AND s.end_offset <= tp.next_offset
          AND t.config ?| ARRAY['retention_ms', 'retention_bytes', 'retention_records',
                                'hard_limit_ms', 'hard_limit_bytes', 'hard_limit_records']
        ORDER BY s.created_at, s.topic_id, s.partition
    LOOP
        EXIT WHEN n >= p_max_segments;
        SELECT tp.next_offset INTO tip FROM {{schema}}.topic_partition tp
         WHERE tp.topic_id = seg.topic_id AND tp.partition = seg.partition;
        -- Newest record of the segment: an index probe, not a scan.
        SELECT r."timestamp" INTO last_ts FROM {{schema}}.record r
         WHERE r.topic_id = seg.topic_id AND r.partition = seg.partition
           AND r."offset" >= seg.start_offset AND r."offset" < seg.end_offset
         ORDER BY r."offset" DESC LIMIT 1;
        s_bytes := {{schema}}._segment_bytes(seg.relname);
        SELECT coalesce(sum({{schema}}._segment_bytes(s2.relname)), 0) INTO p_bytes FROM {{schema}}.segment s2
         WHERE s2.topic_id = seg.topic_id AND s2.partition = seg.partition;

        hard := (last_ts IS NOT NULL AND last_ts < clock_timestamp() - make_interval(secs => {{schema}}._setting(seg.config, 'hard_limit_ms') / 1000.0))
             OR p_bytes > {{schema}}._setting(seg.config, 'hard_limit_bytes')
             OR tip - seg.start_offset > {{schema}}._setting(seg.config, 'hard_limit_records');
        soft := (last_ts IS NULL OR last_ts < clock_timestamp() - make_interval(secs => {{schema}}._setting(seg.config, 'retention_ms') / 1000.0))
                 AND seg.config ? 'retention_ms'
             OR p_bytes - s_bytes >= {{schema}}._setting(seg.config, 'retention_bytes')
             OR tip - seg.end_offset >= {{schema}}._setting(seg.config, 'retention_records');
        hard := coalesce(hard, false);
        soft := coalesce(soft, false);
        CONTINUE WHEN NOT hard AND NOT soft;

        SELECT min(c.next_offset) INTO slowest FROM {{schema}}.group_cursor c
         WHERE c.topic_id = seg.topic_id AND c.partition = seg.partition;
        IF NOT hard AND slowest IS NOT NULL AND slowest < seg.end_offset THEN
            CONTINUE;  -- pinned by a group that has not read it yet
        END IF;
        why := CASE WHEN hard THEN 'hard_limit' ELSE 'retention' END;

        BEGIN
            v_skip := 0;
            IF hard THEN
                WITH moved AS (
                    UPDATE {{schema}}.group_cursor c
                       SET skipped = c.skipped + (seg.end_offset - c.next_offset),
                           next_offset = seg.end_offset,
                           claim_epoch = c.claim_epoch + CASE WHEN c.claim_expires_at IS NOT NULL THEN 1 ELSE 0 END,
                           claim_start = NULL, claim_end = NULL, claim_expires_at = NULL, claim_owner = NULL
                     WHERE c.topic_id = seg.topic_id AND c.partition = seg.partition
                       AND c.next_offset < seg.end_offset
                    RETURNING c.group_name, c.skipped
                ), ev AS (
                    INSERT INTO {{schema}}.maintenance_event (kind, topic, group_name, partition, detail)
                    SELECT 'retention_skip', seg.name, m.group_name, seg.partition,
                           jsonb_build_object('segment_start', seg.start_offset, 'segment_end', seg.end_offset,
                                              'skipped_total', m.skipped)
                    FROM moved m
                    RETURNING 1
                )
                SELECT count(*) INTO v_skip FROM ev;
            END IF;
            EXECUTE format('DROP TABLE %I.%I', {{schema_lit}}, seg.relname);
            DELETE FROM {{schema}}.segment s
             WHERE s.topic_id = seg.topic_id AND s.partition = seg.partition AND s.start_offset = seg.start_offset;
            UPDATE {{schema}}.topic_partition tp SET start_offset = seg.end_offset
             WHERE tp.topic_id = seg.topic_id AND tp.partition = seg.partition;
            INSERT INTO {{schema}}.maintenance_event (kind, topic, partition, detail)
            VALUES ('retention_drop', seg.name, seg.partition,
                    jsonb_build_object('segment_start', seg.start_offset, 'segment_end', seg.end_offset,
                                       'bytes', s_bytes, 'reason', why, 'groups_skipped', v_skip));
            n := n + 1;
            topic := seg.name; partition := seg.partition; start_offset := seg.start_offset;
            end_offset := seg.end_offset; reason := why; skipped := v_skip;
            RETURN NEXT;
        EXCEPTION WHEN lock_not_available THEN
            -- Busy: try again next run.
            NULL;
        END;
    END LOOP;
END $$;

-- group_expire deletes up to p_max groups that have had no commit, no live
-- member and no creation for longer than their topic's group_ttl_ms (or
-- p_default_ttl), so that abandoned groups stop pinning retention and
-- backpressure. Each expiry is logged in maintenance_event.
CREATE FUNCTION {{schema}}.group_expire(p_default_ttl interval DEFAULT '7 days', p_max integer DEFAULT 100)
RETURNS TABLE (topic text, group_name text, last_active timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH idle AS (
        SELECT g.topic_id, g.group_name, t.name,
               greatest(g.created_at,
                        (SELECT max(c.committed_at) FROM {{schema}}.group_cursor c
                          WHERE c.topic_id = g.topic_id AND c.group_name = g.group_name),
                        (SELECT max(m.heartbeat_at) FROM {{schema}}.group_member m
                          WHERE m.topic_id = g.topic_id AND m.group_name = g.group_name)) AS last_active,
               coalesce(make_interval(secs => {{schema}}._setting(t.config, 'group_ttl_ms') / 1000.0), p_default_ttl) AS ttl
        FROM {{schema}}.consumer_group g JOIN {{schema}}.topic t ON t.topic_id = g.topic_id
    ), gone AS (
        DELETE FROM {{schema}}.consumer_group g USING (
            SELECT i.topic_id, i.group_name, i.name, i.last_active FROM idle i
            WHERE i.last_active < clock_timestamp() - i.ttl
            ORDER BY i.last_active LIMIT p_max
        ) x
        WHERE g.topic_id = x.topic_id AND g.group_name = x.group_name
        RETURNING x.name, x.group_name, x.last_active
    ), ev AS (
        INSERT INTO {{schema}}.maintenance_event (kind, topic, group_name, detail)
        SELECT 'group_expired', gone.name, gone.group_name, jsonb_build_object('last_active', gone.last_active)
        FROM gone RETURNING topic, group_name, (detail->>'last_active')::timestamptz
    )
    SELECT * FROM ev;
END $$;

-- compact_run compacts up to p_max_partitions partitions of topics whose
-- cleanup_policy contains 'compact' and that received records since their
-- last compaction. In the closed segments (all but the one being written)
-- it keeps the newest record of each key and deletes the older ones, and
-- deletes tombstones (NULL value) that are the newest for their key once
-- older than the topic's delete_retention_ms (default 1 day). Unkeyed
-- records are kept. Offsets of kept records never change: consumers of a
-- compacted topic see gaps (claim skips them). This is the one place pgmsg
-- DELETEs records; autovacuum reclaims the space.
CREATE FUNCTION {{schema}}.compact_run(p_max_partitions integer DEFAULT 4)
RETURNS TABLE (topic text, partition integer, closed_end bigint, removed bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    tp        record;
    v_closed  bigint;
    v_removed bigint;
    tomb_ms   bigint;
BEGIN
    FOR tp IN
        SELECT p.topic_id, p.partition, p.next_offset, t.name, t.config
        FROM {{schema}}.topic_partition p JOIN {{schema}}.topic t ON t.topic_id = p.topic_id
        WHERE t.config->>'cleanup_policy' LIKE '%compact%' AND p.next_offset > p.compacted_to
        ORDER BY p.compacted_to - p.next_offset
        LIMIT p_max_partitions
        FOR UPDATE OF p SKIP LOCKED
    LOOP
        SELECT max(s.start_offset) INTO v_closed FROM {{schema}}.segment s
         WHERE s.topic_id = tp.topic_id AND s.partition = tp.partition AND s.start_offset < tp.next_offset;
        tomb_ms := coalesce({{schema}}._setting(tp.config, 'delete_retention_ms'), 86400000);
        WITH latest AS (
            SELECT r.key, max(r."offset") AS o FROM {{schema}}.record r
            WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition AND r.key IS NOT NULL
            GROUP BY r.key
        ), del AS (
            DELETE FROM {{schema}}.record r USING latest l
            WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition AND r."offset" < coalesce(v_closed, 0)
              AND r.key = l.key
              AND (r."offset" < l.o
                   OR (r.value IS NULL AND r."timestamp" < clock_timestamp() - make_interval(secs => tomb_ms / 1000.0)))
            RETURNING 1
        )
        SELECT count(*) INTO v_removed FROM del;
        UPDATE {{schema}}.topic_partition p SET compacted_to = tp.next_offset
         WHERE p.topic_id = tp.topic_id AND p.partition = tp.partition;
        INSERT INTO {{schema}}.maintenance_event (kind, topic, partition, detail)
        VALUES ('compacted', tp.name, tp.partition, jsonb_build_object('closed_end', v_closed, 'removed', v_removed));
        topic := tp.name; partition := tp.partition; closed_end := coalesce(v_closed, 0); removed := v_removed;
        RETURN NEXT;
    END LOOP;
END $$;

-- segments_ensure creates missing segments ahead of need for every
-- partition (publishers also do it on the way); partitions whose counter
-- row is busy are skipped.
CREATE FUNCTION {{schema}}.segments_ensure() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    p record;
    n integer := 0;
BEGIN
    -- Same lock order as segment_ensure: the topic table, then the counter
    -- row (skipped when a publisher holds it); a busy topic table is left
    -- for the next run.
    PERFORM set_config('lock_timeout', '200ms', true);
    FOR p IN
        SELECT tp.topic_id, tp.partition FROM {{schema}}.topic_partition tp
        JOIN {{schema}}.topic t ON t.topic_id = tp.topic_id
        WHERE tp.segment_end < tp.next_offset + 2 * t.segment_records
        ORDER BY tp.topic_id, tp.partition
    LOOP
        BEGIN
            PERFORM {{schema}}._segment_lock(p.topic_id);
            PERFORM {{schema}}._segment_ensure(tp.topic_id, tp.partition, tp.segment_end, t.segment_records, tp.next_offset)
            FROM {{schema}}.topic_partition tp JOIN {{schema}}.topic t ON t.topic_id = tp.topic_id
            WHERE tp.topic_id = p.topic_id AND tp.partition = p.partition
            FOR UPDATE OF tp SKIP LOCKED;
            IF FOUND THEN
                n := n + 1;
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            NULL;
        END;
    END LOOP;
    RETURN n;
END $$;

-- maintenance_events lists the newest events first.
CREATE FUNCTION {{schema}}.maintenance_events(p_limit integer DEFAULT 100, p_kind text DEFAULT NULL)
RETURNS SETOF {{schema}}.maintenance_event
LANGUAGE sql STABLE AS $$
    SELECT * FROM {{schema}}.maintenance_event e
    WHERE p_kind IS NULL OR e.kind = p_kind
    ORDER BY e.event_id DESC LIMIT p_limit
$$;

-- maintenance_events_prune deletes up to p_max events older than p_older.
CREATE FUNCTION {{schema}}.maintenance_events_prune(p_older interval DEFAULT '30 days', p_max integer DEFAULT 10000)
RETURNS bigint LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM {{schema}}.maintenance_event e
        WHERE e.event_id IN (SELECT e2.event_id FROM {{schema}}.maintenance_event e2
                             WHERE e2.at < clock_timestamp() - p_older ORDER BY e2.event_id LIMIT p_max)
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;

-- topic_metrics: per partition, the end and start offsets, segments and
-- on-disk bytes. Cheap: catalog sizes and primary-key rows only.
CREATE FUNCTION {{schema}}.topic_metrics()
RETURNS TABLE (topic text, partition integer, start_offset bigint, end_offset bigint, segments integer, bytes bigint)
LANGUAGE sql STABLE AS $$
    SELECT t.name, tp.partition, tp.start_offset, tp.next_offset, count(s.relname)::integer,
           coalesce(sum({{schema}}._segment_bytes(s.relname)), 0)::bigint
    FROM {{schema}}.topic_partition tp
    JOIN {{schema}}.topic t ON t.topic_id = tp.topic_id
    LEFT JOIN {{schema}}.segment s ON s.topic_id = tp.topic_id AND s.partition = tp.partition
    GROUP BY t.name, tp.partition, tp.start_offset, tp.next_offset
    ORDER BY t.name, tp.partition
$$;

-- group_metrics: per group and partition, the cursor, lag (end - cursor),
-- records skipped by hard retention, and the timestamp of the oldest
-- unconsumed record (one index probe each; NULL when caught up).
CREATE FUNCTION {{schema}}.group_metrics()
RETURNS TABLE (topic text, group_name text, partition integer, next_offset bigint, lag bigint, skipped bigint,
               oldest_unconsumed_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT t.name, c.group_name, c.partition, c.next_offset, greatest(tp.next_offset - c.next_offset, 0), c.skipped,
           CASE WHEN tp.next_offset > c.next_offset THEN
               (SELECT r."timestamp" FROM {{schema}}.record r
                 WHERE r.topic_id = c.topic_id AND r.partition = c.partition AND r."offset" >= c.next_offset
                 ORDER BY r."offset" LIMIT 1)
           END
    FROM {{schema}}.group_cursor c
    JOIN {{schema}}.topic t ON t.topic_id = c.topic_id
    JOIN {{schema}}.topic_partition tp ON tp.topic_id = c.topic_id AND tp.partition = c.partition
    ORDER BY t.name, c.group_name, c.partition
$$;
