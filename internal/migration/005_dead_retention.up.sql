-- pgmsg 005: dead jobs pruned after a per-queue age.
--
-- queue.dead_retention: how long a dead job is kept (for dead_list,
-- requeue and purge by hand) before maintenance deletes it (dead_prune);
-- NULL, the default, keeps dead jobs until someone acts on them.

ALTER TABLE {{schema}}.queue ADD COLUMN dead_retention interval
    CHECK (dead_retention > interval '0' AND dead_retention <= interval '36525 days');

-- queue_create and queue_update take one more setting: the function file
-- creates them again.
DROP FUNCTION IF EXISTS {{schema}}.queue_create(text, integer, interval, interval, interval, interval, integer, boolean, bigint, interval, interval);
DROP FUNCTION IF EXISTS {{schema}}.queue_update(text, integer, interval, interval, interval, interval, integer, bigint, interval, interval);
