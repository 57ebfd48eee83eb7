-- Reverts 014: segment_ensure as 008 defined it, with 012's pinned search_path.

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
        seg_end := {{schema}}._segment_ensure(t.topic_id, p_partition, tp.segment_end, t.segment_records, tp.next_offset);
    EXCEPTION WHEN lock_not_available THEN
        RETURN -1;
    END;
    RETURN ((seg_end - tp.segment_end) / t.segment_records)::integer;
END $$;
