-- pgmsg 002 down: removes the job queue, its jobs, payloads and archive
-- included. The migrator has dropped the functions before this runs.
DROP TABLE IF EXISTS {{schema}}.job, {{schema}}.job_archive, {{schema}}.job_payload, {{schema}}.queue CASCADE;
DROP SEQUENCE IF EXISTS {{schema}}.job_id_seq;
