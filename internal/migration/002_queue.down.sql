-- pgmsg 002 down: removes the job queue, its jobs and archive included.
DROP TABLE IF EXISTS {{schema}}.job, {{schema}}.job_archive CASCADE;
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.pronamespace = {{schema_lit}}::regnamespace
               AND p.proname IN ('_queue', '_queue_check', 'queue_create', 'queue_update', 'queue_delete',
                                 'queue_list', 'enqueue_many', 'enqueue', '_rescue', 'job_rescue', 'job_claim',
                                 '_not_held', 'job_complete_many', 'job_complete', '_backoff', 'job_fail',
                                 'job_snooze', 'job_extend_many', 'job_extend', 'job_cancel', 'job_get',
                                 'dead_list', 'dead_requeue', 'dead_purge', 'archive_prune', 'queue_stats')
    LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END $$;
DROP TABLE IF EXISTS {{schema}}.queue CASCADE;
DROP SEQUENCE IF EXISTS {{schema}}.job_id_seq;
