-- pgmsg 001 down: removes the log. Dropping the record table drops every
-- segment with it; records are not kept. The migrator has dropped the
-- functions (internal/migration/functions) before this runs.
DROP TABLE IF EXISTS {{schema}}.record CASCADE;
DROP TABLE IF EXISTS {{schema}}.producer_state, {{schema}}.maintenance_event, {{schema}}.group_member,
                     {{schema}}.group_cursor, {{schema}}.consumer_group, {{schema}}.segment,
                     {{schema}}.topic_partition, {{schema}}.topic CASCADE;
