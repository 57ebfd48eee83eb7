-- heartbeat_steady: the heartbeats of members when nothing can have
-- changed since their last ones. {{1}} is a row source named a, one row a
-- member, with the columns topic, grp, member and session (its session
-- timeout). A member's row is updated when the member is live and keeps
-- the session timeout it had, its group is steady (steady_until not past:
-- no member's session can have ended and nothing is being moved) and the
-- assignment the member's row keeps is of the group's current generation.
-- Then its heartbeat is this UPDATE of its row alone; a member whose row
-- is not updated must take group_heartbeat()'s other path. The caller adds
-- RETURNING (the kept assignment: m.partitions, m.owner_epochs,
-- m.revoking). The group row is read, not locked. For one member the
-- topic's id is an InitPlan, so that the generic plan reads the rows by
-- their keys and costs what a custom one does (a cached plan is kept).
UPDATE {{schema}}.group_member m SET heartbeat_at = pg_catalog.clock_timestamp()
  FROM {{1}}, {{schema}}.consumer_group g
 WHERE g.topic_id = (SELECT tt.topic_id FROM {{schema}}.topic tt WHERE tt.name = a.topic) AND g.group_name = a.grp
   AND m.topic_id = g.topic_id AND m.group_name = a.grp AND m.member_id = a.member
   AND g.steady_until > pg_catalog.clock_timestamp() AND m.generation = g.generation
   AND m.session_timeout = a.session
   AND m.heartbeat_at + m.session_timeout >= pg_catalog.clock_timestamp()
