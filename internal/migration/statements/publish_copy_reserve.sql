-- publish_copy_reserve reserves $3 offsets of partition $2 of topic id $1
-- for a COPY publish whose largest record is at most $4 bytes, and
-- returns the first of them (base) and the partition's offset sequence
-- (seq). It reserves nothing, and returns no row, when publish() has more
-- to do (backpressure settings, a batch past the segments created so far,
-- a record that may exceed max_record_bytes, the first publish on a new
-- timeline) or when the partition has no offset sequence yet. The Go
-- client's COPY publish runs it (internal/store/log_publish_copy.go's
-- copyBeginSQL), and so does _publish_copy_begin(), whose parameters are
-- these in this order.
UPDATE {{schema}}.topic_partition c SET next_offset = c.next_offset + $3::integer
  FROM {{schema}}.topic t
 WHERE t.topic_id = $1::integer AND c.topic_id = t.topic_id AND c.partition = $2::integer
   AND $3::integer > 0 AND c.next_offset + $3::integer <= c.segment_end
   AND $4::bigint <= t.max_record_bytes
   AND NOT t.config ?| ARRAY['max_lag_records', 'max_lag_bytes']
   AND c.offset_seq IS NOT NULL AND c.log_timeline = {{sql timeline}}
RETURNING c.next_offset - $3::integer AS base, c.offset_seq AS seq
