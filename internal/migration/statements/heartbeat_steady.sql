-- heartbeat_steady: the heartbeat of member {{3}} of group {{2}} on topic
-- {{1}} with session timeout {{4}}, when nothing can have changed since
-- its last one: the member is live and keeps the session timeout it had,
-- the group is steady (steady_until not past: no member's session can have
-- ended and nothing is being moved) and the assignment the member's row
-- keeps is of the group's current generation. Then the heartbeat is this
-- UPDATE of the member's row alone; no row updated means the caller must
-- take group_heartbeat()'s other path. The caller adds RETURNING (the
-- kept assignment: m.partitions, m.owner_epochs, m.revoking). The topic's
-- id is an InitPlan, so that the generic plan reads both rows by their
-- primary keys and costs what a custom one does (a cached plan is kept).
UPDATE {{schema}}.group_member m SET heartbeat_at = pg_catalog.clock_timestamp()
  FROM {{schema}}.consumer_group g
 WHERE g.topic_id = (SELECT tt.topic_id FROM {{schema}}.topic tt WHERE tt.name = {{1}}) AND g.group_name = {{2}}
   AND m.topic_id = g.topic_id AND m.group_name = {{2}} AND m.member_id = {{3}}
   AND g.steady_until > pg_catalog.clock_timestamp() AND m.generation = g.generation
   AND m.session_timeout = {{4}}
   AND m.heartbeat_at + m.session_timeout >= pg_catalog.clock_timestamp()
