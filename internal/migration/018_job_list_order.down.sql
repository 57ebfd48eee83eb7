DROP INDEX IF EXISTS {{schema}}.job_archive_queue_id;
DROP INDEX IF EXISTS {{schema}}.job_queue_id;
