-- pgmsg 032: the seven row triggers on the job's state (one per feature:
-- sequences, per-key limits, workflows, batches, fair queues) become two,
-- one before and one after (functions/queue.sql, _job_state_before and
-- _job_state_after, which the function files create after this): seven
-- WHEN conditions on every claim of every job cost a plain job's claim
-- about a fifth of its UPDATE. The old triggers and their functions go.
DROP TRIGGER IF EXISTS job_fair_retag ON {{schema}}.job;
DROP TRIGGER IF EXISTS job_limit_requeue ON {{schema}}.job;
DROP TRIGGER IF EXISTS job_sequence_requeue ON {{schema}}.job;
DROP TRIGGER IF EXISTS job_batch_dead ON {{schema}}.job;
DROP TRIGGER IF EXISTS job_deps_dead ON {{schema}}.job;
DROP TRIGGER IF EXISTS job_limit_dead ON {{schema}}.job;
DROP TRIGGER IF EXISTS job_sequence_dead ON {{schema}}.job;
DROP FUNCTION IF EXISTS {{schema}}._job_fair_retag();
DROP FUNCTION IF EXISTS {{schema}}._job_limit_requeue();
DROP FUNCTION IF EXISTS {{schema}}._job_sequence_requeue();
DROP FUNCTION IF EXISTS {{schema}}._job_batch_dead();
DROP FUNCTION IF EXISTS {{schema}}._job_deps_dead();
DROP FUNCTION IF EXISTS {{schema}}._job_limit_dead();
DROP FUNCTION IF EXISTS {{schema}}._job_sequence_dead();
