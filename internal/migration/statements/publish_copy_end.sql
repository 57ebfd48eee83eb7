-- publish_copy_end answers a COPY publish of $3 records to partition $2
-- of topic id $1, in the transaction whose COPY stored them: the base
-- offset, the publish time in Unix microseconds and segments_low. The
-- COPY's rows took the offsets base .. currval of the partition's offset
-- sequence (named by setting {{1}}): when that is not exactly the $3
-- records reserved, the answer's base offset is {{2}}, which raises the
-- error (PM004). The Go client's COPY publish runs it
-- (internal/store/log_publish_copy.go's copyEndSQL, {{2}} a call of
-- _publish_copy_end()), and so does _publish_copy_end(), whose
-- parameters are these in this order.
SELECT CASE WHEN pg_catalog.currval(pg_catalog.current_setting({{1}})::oid::regclass) = c.next_offset - 1
            THEN c.next_offset - $3::integer
            ELSE {{2}} END AS base_offset,
       (extract(epoch FROM pg_catalog.transaction_timestamp()) * 1000000)::bigint AS published_at_us,
       {{sql segments_low(c.next_offset, c.segment_end, t.segment_records)}} AS segments_low
  FROM {{schema}}.topic_partition c JOIN {{schema}}.topic t ON t.topic_id = c.topic_id
 WHERE c.topic_id = $1::integer AND c.partition = $2::integer
