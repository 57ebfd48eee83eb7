-- publish_copy_reserve locks partition $2 of topic id $1 for a COPY
-- publish of $3 records whose largest record is at most $4 bytes, and
-- returns the partition's next offset (base: the first of the batch's
-- offsets) and its offset sequence (seq). It locks nothing, and returns
-- no row, when publish() has more to do (backpressure settings, a batch
-- past the segments created so far, a record that may exceed
-- max_record_bytes, the first publish on a new timeline) or when the
-- partition has no offset sequence yet. The lock (held to commit) is
-- what orders the partition's publishers; publish_copy_end.sql moves the
-- counter past the batch after the COPY, under it. The counter row is
-- locked, not updated, here and found as row_tid.sql finds it (its
-- newest version first, LIMIT 1): the UPDATE that follows finds the
-- version this locked by its ctid, which a lookup in the same statement
-- could not (a version committed after the statement's snapshot, the
-- case of every publish that waited for the lock, is invisible to its
-- TID scan). The Go client's COPY publish runs it
-- (internal/store/log_publish_copy.go's copyBeginSQL), and so does
-- _publish_copy_begin(), whose parameters are these in this order.
SELECT c.next_offset AS base, c.offset_seq AS seq
  FROM {{schema}}.topic_partition c JOIN {{schema}}.topic t ON t.topic_id = c.topic_id
 WHERE t.topic_id = $1::integer AND c.topic_id = $1::integer
   AND c.partition BETWEEN $2::integer AND $2::integer
   AND $3::integer > 0 AND c.next_offset + $3::integer <= c.segment_end
   AND $4::bigint <= t.max_record_bytes
   AND NOT t.config ?| ARRAY['max_lag_records', 'max_lag_bytes']
   AND c.offset_seq IS NOT NULL AND c.log_timeline = {{sql timeline}}
 ORDER BY c.partition DESC LIMIT 1
   FOR NO KEY UPDATE OF c
