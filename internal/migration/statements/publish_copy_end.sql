-- publish_copy_end moves the counter of partition $2 of topic id $1 past
-- the $3 records of a COPY publish, in the transaction whose
-- publish_copy_reserve.sql locked the counter row and whose COPY stored
-- them, and answers the publish: the base offset, the publish time in
-- Unix microseconds and segments_low. The row is the version the
-- reservation locked (no other transaction can have updated it since),
-- found by its ctid (row_tid.sql). The COPY's rows took the offsets
-- base .. currval of the partition's offset sequence (named by setting
-- {{1}}): when that is not exactly the $3 records reserved, the answer's
-- base offset is {{2}}, which raises the error (PM004) and so rolls the
-- publish back. The Go client's COPY publish runs it
-- (internal/store/log_publish_copy.go's copyEndSQL, {{2}} a call of
-- _publish_copy_end()), and so does _publish_copy_end(), whose
-- parameters are these in this order.
UPDATE {{schema}}.topic_partition c SET next_offset = c.next_offset + $3::integer
  FROM {{schema}}.topic t
 WHERE c.ctid = {{sql row_tid(topic_partition, x.topic_id = $1::integer, $2::integer)}}
   AND c.topic_id = $1::integer AND c.partition = $2::integer AND t.topic_id = c.topic_id
RETURNING CASE WHEN pg_catalog.currval(pg_catalog.current_setting({{1}})::oid::regclass) = c.next_offset - 1
               THEN c.next_offset - $3::integer
               ELSE {{2}} END AS base_offset,
          (extract(epoch FROM pg_catalog.transaction_timestamp()) * 1000000)::bigint AS published_at_us,
          {{sql segments_low(c.next_offset, c.segment_end, t.segment_records, c.topic_id, c.partition)}} AS segments_low
