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
-- m.revoking; k.steady_until is the group's as read).
-- The group row is read, not locked. Each member's rows are found by
-- their keys, one member at a time (k: a lateral subquery the planner
-- cannot flatten), and its row is updated by its ctid: whatever the
-- planner estimates of the tables or of a's rows, a heartbeat reads the
-- few rows it needs (a join planned for ten members of a small estate
-- scanned every group and every member). A row updated meanwhile is not
-- updated again (its ctid is no longer the live one): that member takes
-- the other path.
UPDATE {{schema}}.group_member m SET heartbeat_at = pg_catalog.clock_timestamp()
  FROM {{1}} CROSS JOIN LATERAL (
        SELECT mk.ctid AS mtid, g.steady_until
          FROM {{schema}}.topic tt
          JOIN {{schema}}.consumer_group g ON g.topic_id = tt.topic_id AND g.group_name = a.grp
          JOIN {{schema}}.group_member mk ON mk.topic_id = g.topic_id AND mk.group_name = a.grp AND mk.member_id = a.member
         WHERE tt.name = a.topic AND g.steady_until > pg_catalog.clock_timestamp() AND mk.generation = g.generation
           AND mk.session_timeout = a.session
           AND mk.heartbeat_at + mk.session_timeout >= pg_catalog.clock_timestamp()
        OFFSET 0) k
 WHERE m.ctid = k.mtid
