-- pgmsg 016 down: no log epochs. The migrator has dropped the functions;
-- the previous binary's `migrate up` creates its own again.
DROP TABLE IF EXISTS {{schema}}.log_epoch;
ALTER TABLE {{schema}}.topic_partition DROP COLUMN IF EXISTS log_epoch, DROP COLUMN IF EXISTS log_timeline;
