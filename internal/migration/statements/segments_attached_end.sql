-- segments_attached_end: the end of the segments attached to partition
-- {{2}} of topic id {{1}} (the newest segment's end_offset; segments are
-- contiguous and retention drops the oldest only), or NULL when the
-- partition has no segment row (retention dropped them all: then no
-- segment was created past the counter row's segment_end). The segment
-- creators (_segments_ahead(), a publish's fallback in _segment_ensure(),
-- _segment_create()) insert a segment's row in the transaction that
-- attaches it, so an end read here is an attached one. The counter row's
-- segment_end, the end publishers write below, is at most this: creators
-- never update the counter row (a publisher may hold it), and a publish
-- raises it when its batch reaches past it (_segment_ensure()). A scan
-- of the primary key backward, one entry.
(SELECT ls.end_offset FROM {{schema}}.segment ls
  WHERE ls.topic_id = {{1}} AND ls.partition = {{2}}
  ORDER BY ls.start_offset DESC LIMIT 1)
