DROP FUNCTION IF EXISTS {{schema}}.maintenance_events(integer, text);
DROP FUNCTION IF EXISTS {{schema}}.segments_ensure();
DROP FUNCTION IF EXISTS {{schema}}.compact_run(integer);
DROP FUNCTION IF EXISTS {{schema}}.group_expire(interval, integer);
DROP FUNCTION IF EXISTS {{schema}}.retention_run(integer);
DROP FUNCTION IF EXISTS {{schema}}._segment_bytes(text);
DROP FUNCTION IF EXISTS {{schema}}._setting(jsonb, text);
DROP TABLE IF EXISTS {{schema}}.maintenance_event;
