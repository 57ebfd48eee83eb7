-- publish_records: the INSERT of a batch's records into partition {{2}}
-- of topic id {{1}}, at the offsets from {{3}} on (reserved on the
-- partition's counter row by the caller's statement), each record's
-- timestamp its own or {{4}}; {{5}} to {{8}} are the parallel arrays of
-- values, keys, headers and timestamps (keys, headers and timestamps may
-- be NULL or shorter). _publish_direct() (the Go client's statement under
-- 16 records) and _append() (publish()'s) both insert with it; a caller
-- may join the row it read {{1}} and {{3}} from after it (CROSS JOIN).
-- unnest is unqualified: only the bare name takes several arrays (the
-- functions that include this pin their search_path).
INSERT INTO {{schema}}.record (topic_id, partition, "offset", "timestamp", key, value, headers)
SELECT {{1}}, {{2}}, {{3}} + u.ord - 1, coalesce(u.ts, {{4}}), u.k, u.v, u.h
  FROM unnest({{5}}, {{6}}, {{7}}, {{8}}) WITH ORDINALITY AS u(v, k, h, ts, ord)
