-- pgmsg 024 down: no fair share. The migrator has dropped the functions;
-- the previous binary's `migrate up` creates its own again. Jobs keep
-- their place in job_claim's order.
DROP TABLE IF EXISTS {{schema}}.job_tenant;
DROP INDEX IF EXISTS {{schema}}.job_fair;
DROP INDEX IF EXISTS {{schema}}.job_fair_running;
ALTER TABLE {{schema}}.job DROP COLUMN IF EXISTS tenant, DROP COLUMN IF EXISTS fair_tag;
ALTER TABLE {{schema}}.queue DROP COLUMN IF EXISTS fair;
