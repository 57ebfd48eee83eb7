-- pgmsg 018: a queue's jobs by id, in either direction.
--
-- job_list() reads each table of a queue in id order from its cursor,
-- oldest first or newest first (the dashboard's default). Through the
-- primary key alone it walked past every other queue's jobs to reach this
-- queue's (a small queue behind a large backlog read the whole backlog);
-- these indexes start at the queue and the cursor in both directions:
--   Limit -> Index Scan [Backward] using job_queue_id (queue_id = $1 AND id < $2)
CREATE INDEX job_queue_id ON {{schema}}.job (queue_id, id);
CREATE INDEX job_archive_queue_id ON {{schema}}.job_archive (queue_id, id);
