-- segments_low: whether a publish that moved the next offset of partition
-- {{5}} of topic id {{4}} to {{1}} leaves it less than two segments of
-- {{3}} records before the end of the segments attached to it; the
-- publisher then creates more after its commit (_segments_ahead()).
-- {{2}} is the end the partition's counter row knows, which creators do
-- not move (segments_attached_end.sql): the segment table is read only
-- when that alone is low, and during a partition's first segments it is
-- (the counter row learns of the segments ahead when a batch first
-- reaches past its end). _publish_direct(), _append(),
-- _publish_copy_end() and the Go client's COPY publish
-- (internal/store/log_publish_copy.go's copyEndSQL) answer it.
({{1}} > {{2}} - 2 * {{3}}
 AND {{1}} > coalesce({{sql segments_attached_end({{4}}, {{5}})}}, {{2}}) - 2 * {{3}})
