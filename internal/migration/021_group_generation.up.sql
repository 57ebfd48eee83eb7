-- pgmsg 021: steady heartbeats without reading the group.
--
-- A group's assignment changes only when it rebalances; between two
-- rebalances a member's heartbeat has nothing to learn but that nothing
-- changed, and that no member's session ended. The group row says both:
-- generation counts the rebalances, and steady_until is a time before
-- which the group is known to be what a rebalance would leave unchanged
-- (set by a heartbeat that checked it, no later than the first moment a
-- member's session can end; NULL: unknown, the next heartbeat checks). A
-- member row keeps the assignment its last checking heartbeat answered,
-- and the group generation it was computed at. So a heartbeat of a steady
-- group whose member knows the current generation is one UPDATE of the
-- member's row by its primary key (group_heartbeat()).
ALTER TABLE {{schema}}.consumer_group
    ADD COLUMN generation   bigint NOT NULL DEFAULT 0,
    ADD COLUMN steady_until timestamptz;

ALTER TABLE {{schema}}.group_member
    ADD COLUMN generation   bigint,
    ADD COLUMN partitions   integer[],
    ADD COLUMN owner_epochs bigint[],
    ADD COLUMN revoking     boolean[];

-- Every heartbeat writes a new version of its member's row: room on the
-- row's page keeps that a HOT update (no index entry), as group_cursor's
-- claims are.
ALTER TABLE {{schema}}.group_member SET (fillfactor = 50);
