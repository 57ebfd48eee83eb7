-- row_tid: the ctid of the version the statement sees of the row of
-- table {{1}} (topic_partition or group_cursor: primary keys ending with
-- partition) whose other key columns are {{2}} (conditions on alias x)
-- and whose partition is {{3}}, or NULL when there is none. The hot
-- paths find their counter and cursor rows by it, and then by ctid
-- (a TID scan).
--
-- These rows are updated on every publish or claim. While a snapshot is
-- held open (a long query, pg_dump, a replica's hot_standby_feedback),
-- neither vacuum nor page pruning may remove the versions they leave,
-- and a lookup by the key's equality visits every index entry of the key
-- and every version behind each, the oldest first: the cost of each
-- lookup grew with the snapshot's age (docs/benchmarks.md, held
-- snapshot). A btree keeps a key's entries in heap order, and the new
-- versions go to the table's end once the pages that had room are full
-- (nothing of them can be freed), so the newest entry comes last: this
-- scans the key backward (the range on partition, where an equality
-- would let the planner drop the order as redundant) and stops at the
-- first visible version, past the entries of versions newer than it
-- (uncommitted updates) and the page's chain of its own row. Only one
-- version of a row is visible to a snapshot, so the answer does not
-- depend on the order, only the work.
(SELECT x.ctid FROM {{schema}}.{{1}} x
  WHERE {{2}} AND x.partition BETWEEN {{3}} AND {{3}}
  ORDER BY x.partition DESC LIMIT 1)
