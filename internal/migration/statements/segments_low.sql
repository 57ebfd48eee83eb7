-- segments_low: whether a publish that moved a partition's next offset to
-- {{1}} leaves it less than two segments of {{3}} records before
-- {{2}}, the end of the segments created so far; the publisher then
-- creates more after its commit (segment_ensure()). _publish_direct(),
-- _append(), _publish_copy_end() and the Go client's COPY publish
-- (internal/store/log_publish_copy.go's copyEndSQL) answer it.
({{1}} > {{2}} - 2 * {{3}})
