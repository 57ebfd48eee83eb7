-- segments_low: whether a publish that moved the next offset of partition
-- {{5}} of topic id {{4}} to {{1}} leaves it less than half a segment of
-- {{3}} records before the end of the segments attached to it; the
-- publisher then creates segments up to two past the next offset after
-- its commit (_segments_ahead()). Half a segment, not two: a partition
-- gets its segments ahead once it has filled half of its first, so a new
-- topic's first records go in without DDL (a new topic of 256 partitions
-- created its 512 segments ahead while its first publishes ran:
-- docs/benchmarks.md, "Scale"), and a partition that stays small keeps
-- one segment. {{2}} is the end the partition's counter row knows, which
-- creators do not move (segments_attached_end.sql): the segment table is
-- read only when that alone is low (the counter row learns of the
-- segments ahead when a batch first reaches past its end).
-- _publish_direct(), _append(), _publish_copy_end(), the Go client's
-- COPY publish (internal/store/log_publish_copy.go's copyEndSQL) and
-- segments_ensure() answer it.
({{1}} > {{2}} - {{3}} / 2
 AND {{1}} > coalesce({{sql segments_attached_end({{4}}, {{5}})}}, {{2}}) - {{3}} / 2)
