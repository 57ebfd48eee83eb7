-- pgmsg 014: segment_ensure answers PM001 when the topic is deleted under it.
--
-- Templated like 001.
--
-- Found by the HTTP property test (issue 14): segment_ensure looks the topic
-- up, then waits (at most lock_timeout) for the topic's segment lock and the
-- partition's counter row. A topic_delete committing meanwhile drops the
-- topic's table and rows, and the call then failed with 42P01 ("relation
-- record_<id> does not exist") or went on with a NULL counter row. It now
-- raises PM001 (unknown topic), which the Go client's background segment
-- creation treats as nothing to do. Otherwise as 008 defined it.

CREATE OR REPLACE FUNCTION {{schema}}.segment_ensure(p_topic text, p_partition integer) RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
        IF NOT FOUND THEN
            -- Deleted while this call waited for the locks.
            PERFORM {{schema}}._raise('PM001', format('unknown topic %s', quote_literal(t.name)));
        END IF;
        seg_end := {{schema}}._segment_ensure(t.topic_id, p_partition, tp.segment_end, t.segment_records, tp.next_offset);
    EXCEPTION
        WHEN lock_not_available THEN
            RETURN -1;
        WHEN undefined_table THEN
            -- The topic's table was dropped between the lookup and the lock.
            PERFORM {{schema}}._raise('PM001', format('unknown topic %s', quote_literal(t.name)));
    END;
    RETURN ((seg_end - tp.segment_end) / t.segment_records)::integer;
END $$;
