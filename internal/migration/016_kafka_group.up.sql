-- pgmsg 016: Kafka consumer groups (the classic group protocol that
-- `pgmsg serve --kafka-listen` coordinates: internal/kafkagroup).
--
-- A Kafka group's committed offsets are pgmsg's own group cursors
-- (group_cursor, one pgmsg group per topic the Kafka group commits for);
-- these tables hold only what Kafka has and pgmsg's groups do not: the
-- group's membership and generation, which must outlive the process that
-- coordinates the group (another `pgmsg serve` takes it over and continues
-- from here), and the metadata string of each committed offset.
--
-- The admin role's grants cover these tables as every other table
-- (_roles_grant in functions/auth.sql grants the admin every table of the
-- schema); no other role reads them.

-- One row per Kafka group that ever completed a join. version increases
-- with every write: a coordinator writes only over the version it read or
-- wrote last, so one that lost the group to another process cannot
-- overwrite what the new coordinator wrote (it drops its copy instead).
CREATE TABLE {{schema}}.kafka_group (
    group_name    text        PRIMARY KEY,
    protocol_type text        NOT NULL,
    protocol      text        NOT NULL,   -- the selected protocol (the assignor's name)
    generation    integer     NOT NULL,
    leader        text        NOT NULL,
    -- Empty, CompletingRebalance or Stable, as last written; a
    -- coordinator that loads CompletingRebalance makes every member join
    -- again.
    state         text        NOT NULL,
    version       bigint      NOT NULL,
    updated_at    timestamptz NOT NULL,
    CONSTRAINT kafka_group_name_valid CHECK (group_name ~ '^[A-Za-z0-9._-]{1,200}$')
);

-- The members of the group's current generation: what the leader needs
-- (every member's protocols and their metadata) and what each member's
-- SyncGroup answers (its assignment).
CREATE TABLE {{schema}}.kafka_group_member (
    group_name           text    NOT NULL REFERENCES {{schema}}.kafka_group ON DELETE CASCADE,
    member_id            text    NOT NULL,
    instance_id          text,                 -- group.instance.id (static membership)
    client_id            text    NOT NULL,
    client_host          text    NOT NULL,
    session_timeout_ms   integer NOT NULL,
    rebalance_timeout_ms integer NOT NULL,
    protocols            text[]  NOT NULL,     -- in the member's order of preference
    metadata             bytea[] NOT NULL,     -- each protocol's metadata, parallel to protocols
    assignment           bytea   NOT NULL,
    PRIMARY KEY (group_name, member_id)
);

-- What a Kafka OffsetCommit carries beside the offset (which is the
-- cursor's next_offset): the metadata string and leader epoch, valid
-- while the cursor is still at next_offset. unset_epoch marks a cursor
-- that Kafka reads as "no committed offset" (-1): the partitions a Kafka
-- commit did not name when it created the pgmsg group, and those an
-- OffsetDelete removed. It holds the cursor's claim_epoch at that moment,
-- so a later claim or reset by a native consumer (which increment
-- claim_epoch) or any commit makes the cursor visible again.
CREATE TABLE {{schema}}.kafka_offset (
    topic_id     integer NOT NULL,
    group_name   text    NOT NULL,
    partition    integer NOT NULL,
    next_offset  bigint,
    metadata     text,
    leader_epoch integer NOT NULL DEFAULT -1,
    unset_epoch  bigint,
    PRIMARY KEY (topic_id, group_name, partition),
    FOREIGN KEY (topic_id, group_name, partition) REFERENCES {{schema}}.group_cursor ON DELETE CASCADE
);

-- Kafka names a group without its topic: OffsetFetch of all topics,
-- ListGroups and DeleteGroups find a group's topics by its name.
CREATE INDEX consumer_group_group_name ON {{schema}}.consumer_group (group_name);
