-- pgmsg 002: the job queue's tables (queues, jobs, payloads, archive).
--
-- Templated like 001_log.up.sql; its functions are in internal/migration/functions.
--
-- Life of a job (job.state):
--
--   available / scheduled / retrying  -- waiting; claimable once run_at <= now
--        | job_claim (attempt + 1, lease_token + 1)
--   running                            -- leased to one worker until lease_expires_at
--        | job_complete  -> job_archive (status completed)
--        | job_fail      -> retrying (backoff) or dead (after max_attempts)
--        | job_snooze    -> scheduled (attempt not counted)
--        | lease expiry  -> available again (rescue; the attempt counts)
--   dead                               -- dead-letter: dead_requeue / dead_purge
--   any state | job_cancel -> job_archive (status cancelled)
--
-- "scheduled" and "retrying" only say why a waiting job waits; all three
-- waiting states become claimable when run_at passes, without any update.

CREATE TABLE {{schema}}.queue (
    queue_id          integer     GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name              text        NOT NULL UNIQUE,
    -- Attempts a job gets unless it sets its own.
    max_attempts      integer     NOT NULL DEFAULT 25 CHECK (max_attempts >= 1),
    -- Visibility timeout: how long a claim holds a job unless extended.
    lease             interval    NOT NULL DEFAULT '30 seconds' CHECK (lease > interval '0'),
    -- Retry n waits retry_backoff * 2^(n-1), at most retry_backoff_max, +-10% jitter.
    retry_backoff     interval    NOT NULL DEFAULT '1 second' CHECK (retry_backoff >= interval '0'),
    retry_backoff_max interval    NOT NULL DEFAULT '1 hour' CHECK (retry_backoff_max >= interval '0'),
    -- How long archived (completed or cancelled) jobs are kept by archive_prune.
    archive_retention interval    NOT NULL DEFAULT '7 days' CHECK (archive_retention >= interval '0'),
    -- Largest payload accepted, in bytes.
    max_payload_bytes integer     NOT NULL DEFAULT 1048576 CHECK (max_payload_bytes > 0),
    created_at        timestamptz NOT NULL DEFAULT now(),
    -- The most live jobs (waiting or running; dead jobs do not count) the
    -- queue holds; NULL: no limit. backpressure_timeout: how long the Go
    -- client's Enqueue keeps retrying a full queue (0: refuse at once).
    max_depth            bigint   CHECK (max_depth >= 1),
    backpressure_timeout interval NOT NULL DEFAULT '5 seconds' CHECK (backpressure_timeout >= interval '0'),
    -- A paused queue takes jobs but hands none out (queue_pause); a column,
    -- so the state survives restarts.
    paused               boolean  NOT NULL DEFAULT false,
    CONSTRAINT queue_name_valid CHECK (name ~ '^[A-Za-z0-9._-]{1,200}$')
);

-- Job ids come from one sequence shared by the job and archive tables, so an
-- id names one job for its whole life. enqueue_many takes ids ahead of the
-- insert to report each input row's job, duplicates included.
CREATE SEQUENCE {{schema}}.job_id_seq;

-- Live jobs: waiting, running and dead. Completed and cancelled jobs move to
-- job_archive, so this table stays as small as the backlog. No foreign key to
-- queue: a key check on every insert would take a KEY SHARE lock on the
-- queue's row, which concurrent enqueuers turn into multixact churn.
-- Every job is updated a few times (claim, fail, snooze, extend): fillfactor
-- leaves room so the new row version usually lands on the same page, and
-- aggressive autovacuum settings keep the dead versions of a busy queue few.
CREATE TABLE {{schema}}.job (
    id               bigint      PRIMARY KEY DEFAULT nextval('{{schema}}.job_id_seq'),
    queue_id         integer     NOT NULL,
    state            text        NOT NULL,
    priority         smallint    NOT NULL DEFAULT 0,
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 1),
    -- Fencing token: incremented by every claim. Complete, fail, snooze and
    -- extend present it, so a worker whose lease was rescued (and the job
    -- claimed again) changes nothing.
    lease_token      bigint      NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL,
    enqueued_at      timestamptz NOT NULL,
    attempted_at     timestamptz,
    lease_expires_at timestamptz,
    finalized_at     timestamptz,             -- when it went dead
    worker           text,                    -- who holds it (job_claim's p_worker)
    kind             text,
    unique_key       text,
    errors           jsonb,                   -- [{attempt, at, error}], oldest first
    CONSTRAINT job_state_valid CHECK (state IN ('available', 'scheduled', 'retrying', 'running', 'dead'))
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.05);

-- The claim path: exactly the claim order, and only waiting jobs, so the index
-- holds the backlog and nothing else. A claim reads the first entries of its
-- queue whose run_at has passed; future jobs of a higher priority are the
-- only entries it skips.
--   Limit -> LockRows -> Index Scan using job_claim (queue_id = $1, Filter: run_at <= now)
CREATE INDEX job_claim ON {{schema}}.job (queue_id, priority DESC, run_at, id)
    WHERE state IN ('available', 'scheduled', 'retrying');

-- Rescue finds expired leases through this small index (running jobs only);
-- job_claim probes it once per call.
CREATE INDEX job_lease ON {{schema}}.job (queue_id, lease_expires_at) WHERE state = 'running';

-- Dead-letter listing and stats.
CREATE INDEX job_dead ON {{schema}}.job (queue_id, id) WHERE state = 'dead';

-- Unique keys: at most one live (not dead) job per (queue, key).
CREATE UNIQUE INDEX job_unique_key ON {{schema}}.job (queue_id, unique_key)
    WHERE unique_key IS NOT NULL AND state <> 'dead';

-- Finished jobs. Insert-only until archive_prune deletes by age.
CREATE TABLE {{schema}}.job_archive (
    id           bigint      PRIMARY KEY,
    queue_id     integer     NOT NULL,
    status       text        NOT NULL CHECK (status IN ('completed', 'cancelled')),
    priority     smallint    NOT NULL,
    attempt      integer     NOT NULL,
    max_attempts integer     NOT NULL,
    enqueued_at  timestamptz NOT NULL,
    attempted_at timestamptz,
    finished_at  timestamptz NOT NULL,
    kind         text,
    unique_key   text,
    errors       jsonb
);

-- Pruning by age and throughput (archived in the last minute) per queue.
CREATE INDEX job_archive_finished ON {{schema}}.job_archive (queue_id, finished_at);

-- Each job's payload, written once by the enqueue and deleted with the
-- job's last row (dead_purge, archive_prune, queue_delete). job and
-- job_archive keep only what changes or is searched: a claim rewrites a row
-- of some 150 bytes instead of one with its payload inline, a completion
-- moves it, and the payload is read by id where a job is handed out
-- (job_claim, job_get, dead_list). A job's id names its payload in both
-- tables, as the ids come from one sequence.
CREATE TABLE {{schema}}.job_payload (
    id      bigint PRIMARY KEY,
    payload bytea
) WITH (autovacuum_vacuum_insert_scale_factor = 0.05);
