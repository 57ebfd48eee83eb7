DROP FUNCTION IF EXISTS {{schema}}.queue_latency(interval);
