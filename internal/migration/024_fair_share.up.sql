-- pgmsg 024: fair share across tenants.
--
-- A queue whose jobs name a tenant serves its tenants by weight
-- (start-time fair queuing): each job gets a virtual start tag at
-- enqueue, tag = max(the queue's virtual time, the tenant's finish tag),
-- and the tenant's finish tag moves on by 1/weight per job. The queue's
-- virtual time is the largest tag of its running jobs (job_fair_running;
-- else the head of its waiting jobs, else the largest start tag its
-- tenants handed out), so a tenant that bulk enqueues gets tags far
-- ahead, and one that enqueues later gets tags right after the jobs
-- running now and is claimed next. Claims of a fair queue read job_fair
-- (tag order) instead of job_claim; queues whose jobs never named a tenant
-- are claimed as before. Per-tenant state is one row per (queue, tenant),
-- locked only by that tenant's enqueuers.

ALTER TABLE {{schema}}.queue ADD COLUMN fair boolean NOT NULL DEFAULT false;

ALTER TABLE {{schema}}.job
    ADD COLUMN tenant   text,
    ADD COLUMN fair_tag double precision;

CREATE INDEX job_fair ON {{schema}}.job (queue_id, fair_tag, id)
    WHERE fair_tag IS NOT NULL AND state IN ('available', 'scheduled', 'retrying');
CREATE INDEX job_fair_running ON {{schema}}.job (queue_id, fair_tag)
    WHERE fair_tag IS NOT NULL AND state = 'running';

CREATE TABLE {{schema}}.job_tenant (
    queue_id integer          NOT NULL REFERENCES {{schema}}.queue ON DELETE CASCADE,
    tenant   text             NOT NULL CHECK (octet_length(tenant) <= 200),
    weight   double precision NOT NULL DEFAULT 1 CHECK (weight >= 0.001 AND weight <= 1000000),
    -- The finish tag of the tenant's last job: its next job starts there,
    -- or at the queue's virtual time if that is later.
    finish   double precision NOT NULL DEFAULT 0,
    enqueued bigint           NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, tenant)
);

-- These change shape: the function file creates them again.
DROP FUNCTION IF EXISTS {{schema}}.enqueue_many(text, bytea[], text[], integer[], timestamp with time zone[], interval[], integer[], text[], boolean, interval[], jsonb[], jsonb[], interval[], text[], boolean[], text[], text[], jsonb[], boolean[], boolean[]);
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, bytea, text, integer, timestamp with time zone, interval, integer, text, boolean, interval, jsonb, jsonb, interval, text, boolean, text, jsonb, boolean, boolean);
