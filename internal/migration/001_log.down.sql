-- pgmsg 001 down: removes the log. Dropping the topic tables drops every
-- segment with them; records are not kept.
DROP TABLE IF EXISTS {{schema}}.record CASCADE;
DROP TABLE IF EXISTS {{schema}}.group_member, {{schema}}.group_cursor, {{schema}}.consumer_group, {{schema}}.segment,
                     {{schema}}.topic_partition, {{schema}}.topic CASCADE;
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.pronamespace = {{schema_lit}}::regnamespace
               AND p.proname IN ('_raise', 'valid_name', '_check_name', '_topic', '_mul32', 'murmur2',
                                 'partition_for_key', '_segment_create', '_segment_ensure', 'topic_create',
                                 '_partitions_add', 'topic_add_partitions', 'topic_delete', 'topic_list',
                                 'topic_describe', 'topic_configure', '_append', 'publish', '_position', 'group_create', 'claim',
                                 '_held', 'commit', 'release', 'extend', 'group_reset', 'group_delete',
                                 'group_list', 'fetch', '_rebalance', 'group_heartbeat', '_backpressure', 'segment_ensure', '_segment_lock',
                                 'group_leave', 'group_members')
    LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END $$;
