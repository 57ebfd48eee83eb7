-- pgmsg 015 down: no Kafka listener state.
DROP TABLE IF EXISTS {{schema}}.kafka_broker;
DROP SEQUENCE IF EXISTS {{schema}}.kafka_producer_id;
