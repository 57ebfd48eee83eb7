-- producer_state_save records an idempotent producer's batch as the last
-- it stored on a partition: {{1}} is a VALUES list or a SELECT of
-- (topic_id, partition, producer_id, first_sequence, last_sequence,
-- base_offset, record_count, "timestamp"). publish_idempotent(),
-- _kafka_publish() and the Go client's idempotent COPY publish
-- (internal/store/kafka_copy.go) run it, in the transaction that stores
-- the batch.
INSERT INTO {{schema}}.producer_state AS s (topic_id, partition, producer_id, first_sequence, last_sequence,
                                            base_offset, record_count, "timestamp")
{{1}}
ON CONFLICT (topic_id, partition, producer_id) DO UPDATE
   SET first_sequence = excluded.first_sequence, last_sequence = excluded.last_sequence,
       base_offset = excluded.base_offset, record_count = excluded.record_count,
       "timestamp" = excluded."timestamp", updated_at = pg_catalog.clock_timestamp()
