-- kafka_sequence_next: whether a Kafka idempotent producer's batch whose
-- first sequence is {{2}} is the one to store next on a partition where
-- the last batch it stored ended at sequence {{1}} (NULL: it stored none
-- there, and its first batch starts at 0). _kafka_publish() tells the
-- other cases apart (a retry, an older batch, a gap); the Go client's
-- idempotent COPY publish (internal/store/kafka_copy.go) leaves them to it.
(CASE WHEN {{1}} IS NULL THEN {{2}} = 0 ELSE {{2}} = {{1}} + 1 END)
